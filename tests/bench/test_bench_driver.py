"""`make bench`'s driver end to end, every section once on the smallest inputs (`--smoke`): a section
that breaks fails here, not in a user's `make bench`. Its figures are not looked at (no timing is
asserted); a section whose tools are missing (Chromium, the ShowHowTo release) says so in its row.
`--only` runs some sections alone, and the table then shows only theirs."""

import json
import os
import subprocess
import sys

import pytest

from vi.evaluation.bench import run as bench

SECTIONS = ("transcribe_in_process", "transcribe_end_to_end", "probe", "memory", "align_frames", "extract_steps",
            "stepdiff", "llm_server", "caption_frames", "train_captioner", "generator", "view", "datasets", "startup")


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """One sample folder for this file's runs: the first makes the samples, the next reuse them."""
    return tmp_path_factory.mktemp("bench") / "sample"


def run_driver(*args, timeout):
    return subprocess.run([sys.executable, "-m", "vi.evaluation.bench.run", *args], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=timeout)


def test_the_sizes_say_what_each_section_runs():
    assert bench.SMOKE.repeats == 1 and bench.SMOKE.clip_s
    args = bench.parse_args(["--repeats", "4"])
    assert bench.size_of(args).repeats == 4 and bench.size_of(args).probe_files == bench.PROBE_FILES
    assert bench.size_of(bench.parse_args(["--smoke", "--repeats", "4"])) == bench.SMOKE


def test_only_takes_section_letters_in_the_runs_order():
    assert bench.parse_args([]).only == "abcdefghijklm" == bench.ALL_SECTIONS
    assert bench.parse_args(["--only", "m,a"]).only == "am"
    assert bench.parse_args(["--only", " B, b ,K"]).only == "bk"


@pytest.mark.parametrize("value, said", [("a,x", "unknown section 'x'"), ("abc", "unknown section 'abc'"),
                                         (",", "no section given")])
def test_only_refuses_an_unknown_section_and_lists_them(value, said, capsys):
    with pytest.raises(SystemExit) as exited:
        bench.parse_args(["--only", value])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert said in error and "a (transcribe)" in error and "m (start-up)" in error


def test_the_talk_is_measured_end_to_end_beside_the_short_sample_with_its_own_target(tmp_path, monkeypatch):
    talk = tmp_path / "talk.mp4"
    monkeypatch.setattr(bench, "TALK", talk)
    assert bench.transcribe_inputs(tmp_path, tmp_path) == [(tmp_path / "tea.mp4", bench.SHORT_TARGET)]
    talk.touch()
    assert bench.transcribe_inputs(tmp_path, tmp_path) == [(tmp_path / "tea.mp4", bench.SHORT_TARGET),
                                                           (talk, bench.TALK_TARGET)]
    assert bench.TALK_TARGET == 1.0 and 1 / bench.SHORT_TARGET == pytest.approx(0.95)


@pytest.mark.slow
def test_only_runs_those_sections_and_shows_only_their_rows(tmp_path, sample):
    out = tmp_path / "bench"
    done = run_driver("--smoke", "--only", "m", "--sample", str(sample), "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["sections"] == "m" and set(results["section_s"]) == {"startup"}
    assert not set(SECTIONS[:-1]) & set(results)
    assert all(row["what"].startswith(("start-up: ", "  peak RSS", "  its typer twin")) for row in results["rows"])
    assert "sections: m (start-up)" in done.stdout and "transcribe" not in done.stdout


@pytest.mark.slow
def test_every_section_runs_and_the_table_is_printed(tmp_path, sample):
    out = tmp_path / "bench"
    done = run_driver("--smoke", "--sample", str(sample), "--out", str(out), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert set(SECTIONS) <= set(results["section_s"]) and set(SECTIONS) <= set(results)
    assert results["size"]["repeats"] == 1 and results["sections"] == bench.ALL_SECTIONS
    whats = [row["what"] for row in results["rows"]]
    for first_words in ("transcribe, end to end", "probe, per file", "peak RSS, vi probe", "align-frames",
                        "extract-steps", "train stepdiff", "vi view", "start-up: vi --version"):
        assert any(w.startswith(first_words) for w in whats), first_words
    assert "vi stages vs the raw libraries" in done.stdout and "start-up: vi probe FILE" in done.stdout
