"""`make showhowto-dataset`: the whole ShowHowTo pipeline on a list of videos, in parallel
shards, each stage's output kept; a second run resumes (redoes nothing) and the dataset is
the same. Real models: whisper-tiny.en, Qwen2.5-Coder-1.5B, the offline frame scorer. One shard gets a
how-to, the other a vlog the filter turns away, so both ends of the filter are built through (and the
vlog, costing no step extraction, keeps this end-to-end run of the default models short)."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import BIN, REPO, jsonl


def make_dataset(videos, out, shards: int) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "showhowto-dataset",
                           f"VIDEOS={videos}", f"OUT={out}", f"SHARDS={shards}",
                           f"VENV={BIN.parent}"],
                          capture_output=True, text=True, timeout=1200)


@pytest.mark.slow
def test_the_dataset_target_runs_sharded_then_resumes_without_redoing_anything(tmp_path):
    from vi.evaluation.demo.samples import make_howto_sample

    videos = tmp_path / "videos.txt"
    made = [make_howto_sample(tmp_path / "sample", name) for name in ("fruit_salad", "seaside_vlog")]
    videos.write_text("".join(f"{path}\n" for path in made))
    out = tmp_path / "ds"
    first = make_dataset(videos, out, shards=2)
    assert first.returncode == 0, first.stderr[-3000:]

    aligned = jsonl((out / "aligned.jsonl").read_text())
    rejected = sum((jsonl(p.read_text()) for p in sorted((out / "work").glob("not_instructional.*"))), [])
    assert [r["id"] for r in aligned] == ["fruit_salad"]  # every record lands in one of the two
    assert [r["id"] for r in rejected] == ["seaside_vlog"] and rejected[0]["instructional"]["label"] is False
    prompts = json.loads((out / "dataset" / "prompts.json").read_text())
    fruit = next(r for r in aligned if r["id"] == "fruit_salad")
    assert prompts["fruit_salad"] == [s["text"] for s in fruit["steps"]["items"] if s["frame"]]
    assert len(prompts["fruit_salad"]) >= 2
    assert list((out / "dataset").glob("imgseqs-*-of-2/fruit_salad.jpg"))
    assert not list((out / "dataset").glob("imgseqs-*/seaside_vlog.jpg")) and "seaside_vlog" not in prompts
    assert all(s["frame"] is None or (out / "frames" / "fruit_salad").is_dir()
               for s in fruit["steps"]["items"])

    before = {p.name: p.read_bytes() for p in (out / "work").glob("*.jsonl")}
    again = make_dataset(videos, out, shards=2)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already done (resume)" in again.stderr
    after = {p.name: p.read_bytes() for p in (out / "work").glob("*.jsonl")}
    assert after == before  # nothing redone, nothing appended
    assert json.loads((out / "dataset" / "prompts.json").read_text()) == prompts
