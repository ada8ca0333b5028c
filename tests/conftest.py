"""Shared fixtures: the `vi` command, the narrated sample, and broken media made from it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

def _pin_xdist_worker() -> None:
    """Under pytest-xdist (`make test`), give each worker its own share of the cores, inherited by
    the `vi` processes its tests start: llama.cpp and torch then size their thread pools to that
    share (core.devices.usable_cpus reads the affinity), where two workers each using every core
    would make their threads wait on each other."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    index, count = int(worker.removeprefix("gw")), int(count)
    if count > len(cores):
        return
    mine = cores[index::count]
    os.sched_setaffinity(0, mine)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(len(mine))


_pin_xdist_worker()

# The longest test files (minutes each: real LLMs, training), run first. pytest-xdist hands files out
# in collection order, so a long file collected last would run alone at the end while the other
# worker idles: longest first keeps both busy to the end.
LONGEST_FIRST = ("stepdiff/test_stepdiff_demo.py", "showhowto/test_showhowto_dataset.py", "showhowto/test_generator.py",
                 "showhowto/test_llm_stages.py", "stepdiff/test_stepdiff_model.py", "stepdiff/test_predict.py",
                 "stepdiff/test_ask_predict.py", "stepdiff/test_pair_qa.py", "stepdiff/test_train_reproducible.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::")[0].removeprefix("tests/")
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order inside a file, and of the other files, stays

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
BIN = Path(sys.executable).parent
VI = str(BIN / "vi")


def run_vi(*args: str, stdin: str | None = None, env: dict | None = None, check: bool = False,
           timeout: int = 600, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    done = subprocess.run([VI, *args], input=stdin, capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=cwd)
    if check and done.returncode != 0:
        raise AssertionError(f"vi {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def shared(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared test material lives beside the repository")
    return path


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-y", "-v", "error", *args], check=True)


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory) -> Path:
    from vi.evaluation.demo.samples import make_tea_sample

    out = tmp_path_factory.mktemp("sample")
    make_tea_sample(out)
    return out


@pytest.fixture(scope="session")
def tea(sample_dir) -> Path:
    return sample_dir / "tea.mp4"


@pytest.fixture(scope="session")
def tea_truth(sample_dir) -> dict:
    return json.loads((sample_dir / "tea.json").read_text())


@pytest.fixture(scope="session")
def broken_media(tea, tmp_path_factory) -> dict[str, Path]:
    """Real faults: an empty file, a cut-off download, a video without audio, silence."""
    out = tmp_path_factory.mktemp("broken")
    empty = out / "empty.mp4"
    empty.write_bytes(b"")
    truncated = out / "truncated.mp4"
    data = tea.read_bytes()
    truncated.write_bytes(data[: len(data) // 3])
    no_audio = out / "no_audio.mp4"
    ffmpeg("-i", str(tea), "-an", "-c:v", "copy", str(no_audio))
    silent = out / "silent.mp4"
    ffmpeg("-i", str(tea), "-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono", "-map", "0:v",
           "-map", "1:a", "-c:v", "copy", "-c:a", "aac", "-shortest", str(silent))
    return {"empty": empty, "truncated": truncated, "no_audio": no_audio, "silent": silent,
            "missing": out / "does_not_exist.mp4"}


@pytest.fixture()
def no_tools_needed():
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed (make install installs it)")


@pytest.fixture()
def pretend_mps(monkeypatch):
    """A machine whose best torch device is mps (an Apple GPU), without a CUDA GPU."""
    import torch

    class FakeMps:
        @staticmethod
        def is_available():
            return True

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends, "mps", FakeMps, raising=False)
    from vi.core import devices

    monkeypatch.setattr(devices, "best_device", lambda engine="torch": "mps")
