"""A command that needs no model starts like a Unix tool: it imports no deep-learning library.

torch alone is about 1 s and 600 MB of a process's start; a pipe of five stages or an array job of
10,000 short tasks pays that each time. Each command here runs in a fresh interpreter that reports
the modules it ended with (not its time: that depends on the machine's load).
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import jsonl

# Imported where a model is built, never by a command that builds none.
HEAVY = ("torch", "transformers", "diffusers", "open_clip", "llama_cpp", "whisperx", "faster_whisper",
         "ctranslate2", "pyannote", "accelerate", "trl", "sentence_transformers")

# Runs `vi ARGS...`, then writes the name of every module it imported to $VI_MODULES.
RUN_AND_LIST = """\
import json, os, sys
sys.argv = ["vi", *sys.argv[1:]]
try:
    from vi.cli.app import main
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(os.environ["VI_MODULES"], "w") as out:
    json.dump(sorted(sys.modules), out)
sys.exit(code)
"""

# Asks every command's --help (groups walked) in one interpreter: the union of what they import, and the first
# command after which numpy (or PIL) was imported.
EVERY_HELP = """\
import json, os, sys
from vi.cli.app import app, command_names
import typer
from typer.testing import CliRunner
runner = CliRunner()
failed, first = [], {}
names = command_names()
for name in ["", *names]:
    result = runner.invoke(app, [*name.split(), "--help"])
    if result.exit_code != 0 or "Usage" not in result.output:
        failed.append((name, result.exit_code, result.output[-300:]))
    for module in ("numpy", "PIL"):
        if module in sys.modules:
            first.setdefault(module, name)
with open(os.environ["VI_MODULES"], "w") as out:
    json.dump({"modules": sorted({n.partition(".")[0] for n in sys.modules}), "all": sorted(sys.modules),
               "failed": failed, "first": first}, out)
"""

def imported(tmp_path, script: str, *args: str, stdin: str | None = None):
    listing = tmp_path / "modules.json"
    env = {**os.environ, "VI_MODULES": str(listing), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script, *args], input=stdin, capture_output=True, text=True,
                          env=env, timeout=300)
    return done, json.loads(listing.read_text())


def heavy(modules) -> list[str]:
    return [name for name in HEAVY if name in modules]


def arrays_or_models(modules) -> list[str]:
    """numpy, PIL, the model catalogue and any pipeline module: what a command that reads and writes records
    (no pixels, no model) has no use for."""
    return [name for name in modules if name in ("numpy", "PIL", "vi.core.models") or name.startswith("vi.pipelines.")]


def test_version_and_every_help_import_no_model_library(tmp_path):
    done, modules = imported(tmp_path, RUN_AND_LIST, "--version")
    assert done.returncode == 0 and done.stdout.startswith("vi ")
    assert heavy(modules) == [] and "numpy" not in modules
    done, listing = imported(tmp_path, EVERY_HELP)
    assert done.returncode == 0, done.stderr
    assert listing["failed"] == []
    assert heavy(listing["modules"]) == []
    # no command's options live in a module that imports numpy or PIL at the top (130 ms, a third of a --help)
    assert listing["first"] == {}, listing["first"]
    # nor draws a progress bar: rich.progress is imported where one is drawn (core/progress.make_progress)
    assert "rich" in listing["modules"]
    assert "rich.progress" not in listing["all"], [n for n in listing["all"] if n.startswith("rich.")]


@pytest.mark.slow
def test_model_free_stages_import_no_model_library(tmp_path, tea):
    done, modules = imported(tmp_path, RUN_AND_LIST, "probe", str(tea), "-q")
    assert done.returncode == 0, done.stderr
    assert jsonl(done.stdout)[0]["has_audio"] is True
    # the first stage of every pipeline reads headers only: not even numpy (130 ms), nor the model catalogue
    assert heavy(modules) == [] and "numpy" not in modules and "vi.core.models" not in modules
    probed = tmp_path / "probed.jsonl"
    probed.write_text(done.stdout)

    done, modules = imported(tmp_path, RUN_AND_LIST, "view", str(probed), "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    assert heavy(modules) == [] and arrays_or_models(modules) == []

    done, modules = imported(tmp_path, RUN_AND_LIST, "status", str(probed), "--json")
    assert done.returncode == 0, done.stderr
    assert heavy(modules) == [] and arrays_or_models(modules) == []

    steps = {"id": "tea", "video": str(tea), "duration": 27.0, "steps": {"title": "How to make tea", "items": [
        {"text": "Boil the water.", "start": 0.0, "end": 3.0, "frame": {"time": 1.0, "score": 0.5}},
        {"text": "Pour it.", "start": 3.0, "end": 6.0, "frame": {"time": 4.0, "score": 0.5}}]}}
    done, modules = imported(tmp_path, RUN_AND_LIST, "export", "showhowto", "-q", "--out", str(tmp_path / "ds"),
                             stdin=json.dumps(steps) + "\n")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ds" / "prompts.json").exists()
    assert heavy(modules) == []

    gt, pred = tmp_path / "gt.jsonl", tmp_path / "pred.jsonl"
    options = [[f"v{i}_1_2", f"w{i}_3_4"] for i in range(4)]
    gt.write_text(json.dumps({"difference": "one is peeled", "category": "Technique", "answer": options[1],
                              "options": options}) + "\n")
    pred.write_text(json.dumps({"scores": [0.1, 0.9, 0.2, 0.3]}) + "\n")
    done, modules = imported(tmp_path, RUN_AND_LIST, "eval", "diffmcq", "--gt", str(gt), "--pred", str(pred))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["accuracy"] == 1.0
    # the metrics and the options of every vi eval command but framecap and showhowto: no numpy (the argmax is
    # numpy's, in plain Python), nor mcq-negatives' numpy code, nor framecap's progression judge
    assert heavy(modules) == [] and arrays_or_models(modules) == []
    assert {name for name in modules if name.startswith("vi.evaluation.")} <= {
        "vi.evaluation.stepdiff", "vi.evaluation.stepdiff.mcq_negatives_config", "vi.evaluation.stepdiff.metrics"}


@pytest.mark.parametrize("args, listed", [(["--help"], "probe"), (["eval", "--help"], "diffmcq"),
                                           (["judge", "--help"], "match"), ([], "probe")],
                         ids=["vi --help", "vi eval --help", "vi judge --help", "vi"])
def test_listing_the_commands_imports_no_command_module(tmp_path, args, listed):
    """The command table holds each command's summary: listing the commands imports none of their modules."""
    done, modules = imported(tmp_path, RUN_AND_LIST, *args)
    assert done.returncode in (0, 2), done.stderr  # bare `vi` shows the help and exits 2 (no command given)
    shown = done.stdout + done.stderr
    assert "Usage" in shown and f" {listed} " in shown
    commands = [name for name in modules if name.startswith(("vi.cli.", "vi.pipelines.", "vi.evaluation."))]
    assert commands == ["vi.cli.app"]


@pytest.mark.parametrize("words", [("probe",), ("train", "stepdiff")])
def test_the_typer_twin_shows_the_commands_help(tmp_path, words):
    """The bench's floor under a command's --help is a plain typer app showing that very help: if the two
    drifted apart (an option more, another type), the comparison would be between different work."""
    from vi.evaluation.bench.startup import write_typer_twin

    twin = write_typer_twin(words, tmp_path / "twin.py")
    env = {**os.environ, "COLUMNS": "100", "TERMINAL_WIDTH": "100"}
    shown = [subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
             for argv in ([sys.executable, "-m", "vi", *words, "--help"], [sys.executable, str(twin), "--help"])]
    assert all(done.returncode == 0 for done in shown), [done.stderr[-2000:] for done in shown]
    vi_help, twin_help = (done.stdout.splitlines() for done in shown)
    assert " ".join(words) in vi_help[1] and "Usage: twin.py" in twin_help[1]
    assert vi_help[2:] == twin_help[2:] and len(vi_help) > 20
