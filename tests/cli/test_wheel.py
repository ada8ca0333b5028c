"""Packaging: the repository root is the `vi` package, in the editable install and in a wheel.

The wheel test installs the built wheel alone into a fresh venv and borrows the dependencies
from this venv's site-packages through a `.pth` line. Python adds that folder to sys.path but
does not process the `.pth` files inside it, so the editable install's finder stays off and
`import vi` can only find the wheel's copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IN_WHEEL = ("vi/__init__.py", "vi/__main__.py", "vi/cli/app.py", "vi/core/stream.py",
            "vi/core/models/sources.py", "vi/pipelines/common/transcribe.py",
            # one module of each system's folders, and a packaged prompt
            "vi/pipelines/showhowto/extract_steps.py", "vi/pipelines/stepdiff/train.py",
            "vi/pipelines/progresscaptioner/__init__.py", "vi/pipelines/common/prompt_templates/extract_steps.txt",
            "vi/evaluation/stepdiff/metrics.py", "vi/evaluation/showhowto/quality.py",
            "vi/evaluation/bench/run.py", "vi/evaluation/demo/samples.py")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment minus anything that would put this checkout or venv on the path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    return {**env, "HF_HUB_OFFLINE": "1", **extra}


def test_tests_run_against_the_editable_install():
    import vi

    assert Path(vi.__file__).resolve() == REPO / "__init__.py"


def test_python_dash_m_vi_runs_the_cli(tmp_path):
    done = subprocess.run([sys.executable, "-m", "vi", "--help"], capture_output=True, text=True,
                          env=clean_env(), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "probe" in done.stdout and "transcribe" in done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project built as a wheel, from a copy of the checkout (so no build/ folder is left
    in the repository, and no stale build/lib from an earlier build can leak into the wheel)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "dist", "out", "*.egg-info", "__pycache__", ".pytest_cache",
        ".stamps", ".bench"))
    dist = root / "dist"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist),
                           str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip wheel failed:\n{done.stdout}\n{done.stderr}"
    (built,) = dist.glob("vi-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    """A new venv holding only the wheel; dependencies come from this venv's site-packages."""
    home = tmp_path_factory.mktemp("fresh") / "venv"
    venv.EnvBuilder(with_pip=False).create(home)
    python = home / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-index", "-q", str(wheel)],
                          capture_output=True, text=True, env=clean_env(), timeout=300)
    assert done.returncode == 0, f"installing the wheel failed:\n{done.stderr}"
    site = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True, env=clean_env()).strip())
    ours = Path(sysconfig.get_paths()["purelib"])
    assert (ours / "torch").is_dir(), f"{ours} is not this venv's site-packages"
    (site / "_vi_test_dependencies.pth").write_text(f"{ours}\n")
    return home


def fresh(fresh_venv: Path, program: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(fresh_venv / "bin" / program), *args], capture_output=True,
                          text=True, env=clean_env(), cwd=cwd, timeout=300)


@pytest.mark.slow
def test_wheel_holds_the_package_and_not_the_tests(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in IN_WHEEL if name not in names]
    assert not missing, f"not in the wheel: {missing}"
    assert not [n for n in names if n.startswith(("tests/", "vi/tests/"))], "tests are in the wheel"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "vi = vi.cli.app:main" in scripts and "vi-toolkit = vi.cli.app:main" in scripts


@pytest.mark.slow
def test_fresh_venv_imports_vi_from_the_wheel(fresh_venv, tmp_path):
    done = fresh(fresh_venv, "python", "-c",
                 "import json, vi, vi.core.stream, vi.core.models.catalog;"
                 "print(json.dumps([vi.__file__, vi.__version__]))", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    location, version = json.loads(done.stdout)
    assert Path(location).resolve().is_relative_to(fresh_venv.resolve()), location
    assert not Path(location).resolve().is_relative_to(REPO), location
    assert version == "0.1.0"


@pytest.mark.slow
@pytest.mark.parametrize("script", ["vi", "vi-toolkit"])
def test_fresh_venv_console_scripts_list_the_stages(fresh_venv, tmp_path, script):
    done = fresh(fresh_venv, script, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "probe" in done.stdout and "transcribe" in done.stdout and "models" in done.stdout


@pytest.mark.slow
def test_fresh_venv_vi_probe_reads_the_sample(fresh_venv, tea, tmp_path):
    done = fresh(fresh_venv, "vi", "probe", str(tea), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout
    record = json.loads(lines[0])
    assert record["id"] == "tea" and record["video"] == str(tea)
    assert record["duration"] > 10 and "errors" not in record, record
