"""`make stepdiff-demo`: StepDiff's stages in one pipeline, vi probe | transcribe | clips |
describe | pair | pair-qa, on the two sample fruit salads whose keysteps are annotated.
Real models: whisper-tiny.en, EfficientNet-Lite0, and SmolLM2-135M in place of the demo's
Qwen2.5-Coder-1.5B (the same stages, a few times faster)."""

from __future__ import annotations

import json
import shutil
import subprocess
from difflib import SequenceMatcher
from pathlib import Path

import pytest
from conftest import BIN, REPO, jsonl
from rich.console import Console
from vi.evaluation.demo import samples
from vi.evaluation.stepdiff import sample_benchmark as stepdiff_sample_bench
from vi.evaluation.stepdiff import predict as sp
from vi.evaluation.demo.show_pairs import show
from vi.pipelines.stepdiff.describe import STAGE as DESCRIBE_STAGE
from vi.pipelines.stepdiff.pair_qa import DROP_REASONS
from vi.pipelines.stepdiff.pair_qa import STAGE as PAIR_QA_STAGE

SMOL = "smollm2-135m"
VIDEOS = tuple(samples.STEPDIFF_KEYSTEPS)  # fruit_salad, fruit_salad_peeler
# What EfficientNet-Lite0 calls each photo the videos show (its top label, at 67-76%).
PHOTO_LABELS = {"apple.jpg": "Granny Smith apple", "orange.jpg": "orange", "fruits.jpg": "lemon"}


def need_sample_tools() -> None:
    """Skip where a system package that makes the samples is missing (make install installs them)."""
    for tool in ("ffmpeg", "espeak-ng"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: it makes the narrated samples (make install installs it)")
    if not all((samples.PHOTOS / photo).exists() for photo in PHOTO_LABELS):
        pytest.skip(f"the photos of {samples.PHOTOS} are absent: install the Debian package opencv-doc "
                    "(make install does)")


def truth_steps(sample_dir: Path) -> dict[str, dict]:
    """Each annotated keystep clip's id -> its truth step (text, times, photo) and keystep."""
    found = {}
    for name in VIDEOS:
        steps = json.loads((sample_dir / f"{name}.json").read_text())["steps"]
        for step, keystep in zip(steps, samples.STEPDIFF_KEYSTEPS[name]):
            if step["photo"] is not None:
                found[f"{name}_{step['start']}_{step['end']}"] = {**step, "keystep": keystep, "video": name}
    return found


def test_the_annotation_labels_each_photo_step_of_both_videos_with_a_shared_keystep(tmp_path):
    need_sample_tools()
    made = samples.make_stepdiff_samples(tmp_path)
    assert [p.name for p in made] == ["fruit_salad.mp4", "fruit_salad_peeler.mp4", "stepdiff_keysteps.jsonl"]
    records = jsonl((tmp_path / samples.STEPDIFF_ANNOTATION).read_text())
    assert [r["id"] for r in records] == list(VIDEOS)
    truth = truth_steps(tmp_path)
    for record in records:
        assert record["video"] == str((tmp_path / f"{record['id']}.mp4").resolve())
        for item in record["steps"]["items"]:
            step = truth[f"{record['id']}_{item['start']}_{item['end']}"]
            assert item["text"] == step["keystep"]
    keysteps = [sorted(i["text"] for i in r["steps"]["items"]) for r in records]
    assert keysteps[0] == keysteps[1] == ["cut the fruit", "peel the fruit", "squeeze juice over the fruit"]
    for keystep in keysteps[0]:  # each keystep done on another fruit in the other video
        photos = {step["video"]: step["photo"] for step in truth.values() if step["keystep"] == keystep}
        assert len(set(photos.values())) == 2, photos


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, str]:
    """`make stepdiff-baselines stepdiff-model` (stepdiff-demo, then the baselines, then StepDiff's model
    trained for a few steps) run once into a fresh OUT; (OUT, what it printed)."""
    need_sample_tools()
    out = tmp_path_factory.mktemp("stepdiff")
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "stepdiff-baselines", "stepdiff-model", f"OUT={out}",
         f"VENV={BIN.parent}", f"STEPDIFF_LLM={SMOL}", "STEPDIFF_STEPS=6",
         "-o", f"{BIN.parent}/.stamps/install"],  # never reinstall from inside a test
        capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stdout


def stage_output(out: Path, name: str) -> list[dict]:
    return jsonl((out / "stepdiff-demo" / f"{name}.jsonl").read_text())


def words(text: str) -> list[str]:
    return [w.strip(".,").lower() for w in text.split()]


@pytest.mark.slow
def test_clips_are_the_annotated_keysteps_with_the_narration_said_during_them(demo):
    out, _ = demo
    truth = truth_steps(out / "sample")
    clips = stage_output(out, "clips")
    assert sorted(c["id"] for c in clips) == sorted(truth)
    for clip in clips:
        step = truth[clip["id"]]
        assert (clip["keystep"], clip["source_id"]) == (step["keystep"], step["video"])
        heard = SequenceMatcher(None, words(clip["narration"]), words(step["text"])).ratio()
        assert heard > 0.8, (clip["narration"], step["text"])  # its own sentence, as whisper-tiny heard it


@pytest.mark.slow
def test_each_clip_is_described_from_its_narration_and_the_photo_it_shows(demo):
    out, _ = demo
    truth = truth_steps(out / "sample")
    clips = {c["id"]: c for c in stage_output(out, "clips")}
    described = stage_output(out, "described")
    assert [d["id"] for d in described] == list(clips)
    for record in described:
        description = record.pop("description")
        assert record["provenance"].pop(DESCRIBE_STAGE)["vi"]  # how describe was configured (docs/records.md)
        assert record == clips[record["id"]]  # the clip passes through as it came
        assert description["sources"] == {"action": None, "objects": "imagenet-labels:efficientnet-lite0",
                                          "step": SMOL}
        assert [o["name"] for o in description["objects"]] == [PHOTO_LABELS[truth[record["id"]]["photo"]]]
        assert description["narration"] == record["narration"]
        assert isinstance(description["step"], str) and description["step"].strip()


@pytest.mark.slow
def test_pairs_join_the_two_videos_clips_of_each_keystep_and_carry_their_descriptions(demo):
    out, _ = demo
    described = {d["id"]: d for d in stage_output(out, "described")}
    pairs = stage_output(out, "pairs")
    assert [p["keystep"] for p in pairs] == ["cut the fruit", "peel the fruit", "squeeze juice over the fruit"]
    for pair in pairs:
        reference, candidate = pair["reference"], pair["candidate"]
        assert pair["id"] == f"{reference['id']}__{candidate['id']}"
        assert reference["keystep"] == candidate["keystep"] == pair["keystep"]
        assert {reference["source_id"], candidate["source_id"]} == set(VIDEOS)
        assert reference == described[reference["id"]] and candidate == described[candidate["id"]]


@pytest.mark.slow
def test_pair_qa_adds_filtered_qa_of_the_three_types_to_each_pair(demo):
    out, printed = demo
    pairs = stage_output(out, "pairs")
    answered = stage_output(out, "pair_qa")
    assert [r["id"] for r in answered] == [p["id"] for p in pairs]
    for pair, record in zip(pairs, answered):
        qa, stats = record.pop("qa"), record.pop("qa_stats")
        assert record["provenance"].pop(PAIR_QA_STAGE)["vi"]  # how pair-qa was configured (docs/records.md)
        assert record == pair  # the pair passes through as it came
        assert stats["model"] == SMOL
        assert stats["sources"] == {"reference": "description", "candidate": "description"}
        assert set(stats["generated"]) == set(stats["kept"]) == {"1", "2", "3"}
        assert stats["generated"]["3"] == 1 and set(stats["dropped"]) <= set(DROP_REASONS)
        assert sum(stats["generated"].values()) == len(qa) + sum(stats["dropped"].values())
        # the dropped QA themselves, each with the reason counted in `dropped` (vi view shows them)
        assert {r: sum(d["reason"] == r for d in stats["dropped_items"]) for r in stats["dropped"]} == stats["dropped"]
        assert all(set(d) == {"type", "q", "a", "reason"} for d in stats["dropped_items"])
        for t in ("1", "2", "3"):
            assert stats["kept"][t] == sum(item["type"] == int(t) for item in qa)
        for item in qa:
            assert set(item) == {"type", "q", "a"} and item["type"] in (1, 2, 3)
            assert item["q"].strip() and item["a"].strip()
            assert item["type"] != 3 or item["a"] in ("YES", "NO")
    assert all(pair["keystep"] in printed for pair in pairs)
    assert "3 pairs, 0 failed records" in printed


def test_show_pairs_prints_failed_pairs_and_pairs_without_kept_qa(tmp_path):
    clip = {"id": "a_1_2", "source_id": "a", "start": 1, "end": 2, "narration": "Peel it.",
            "description": {"step": "The person peels an [orange]."}}
    records = [{"id": "p", "keystep": "peel", "reference": clip, "candidate": {**clip, "id": "b_1_2", "source_id": "b"},
                "qa": [], "qa_stats": {"generated": {"1": 2}, "kept": {"1": 0}, "dropped": {"unsupported": 2}}},
               {"id": "q", "keystep": "cut", "errors": [{"stage": "pair-qa", "kind": "missing_description",
                                                        "message": "nothing to compare"}]}]
    path = tmp_path / "pair_qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    console = Console(record=True, width=200)
    assert show(path, console) == 2
    printed = console.export_text()
    assert 'Video 2  b 0:01.00-0:02.00  says "Peel it."' in printed
    assert "described: The person peels an [orange]." in printed  # markup-like text shown as is
    assert "the filter kept no QA" in printed and "kept 0 of 2 QA; dropped: unsupported 2" in printed
    assert "failed in pair-qa (missing_description): nothing to compare" in printed
    assert "1 pairs, 1 failed records; QA kept 0 of 2 (dropped: unsupported 2)" in printed


def test_the_sample_benchmark_names_the_annotated_clips_in_the_official_formats(tmp_path):
    annotation = [{"id": video, "steps": {"items": [
        {"text": keystep, "start": 1.5 * k + offset, "end": 1.5 * k + offset + 1.0}
        for k, keystep in enumerate(samples.STEPDIFF_KEYSTEPS[video][:3])]}} for video, offset in zip(VIDEOS, (0, 0.25))]
    (tmp_path / samples.STEPDIFF_ANNOTATION).write_text("".join(json.dumps(r) + "\n" for r in annotation))
    made = stepdiff_sample_bench.benchmark(tmp_path)
    clips = stepdiff_sample_bench.sample_clips(tmp_path)
    for task, rows in made.items():
        for row in rows:
            sp.CHECKS[task](row)  # what vi eval and vi predict accept
            assert set(sp.row_clips(task, row)) <= set(clips.values())
    positions = [row["options"].index(row["answer"]) for row in made["diffmcq"]]
    assert len(set(positions)) == 4  # the answer is not always in one place
    for row in made["diffmcq"]:  # its reversed pair is among the options, never the answer itself twice
        assert row["answer"][::-1] in row["options"] and row["options"].count(row["answer"]) == 1
    assert all(row["reference"] == clips[("fruit_salad", row_keystep)]
               for row, (row_keystep, _, _) in zip(made["diffcap"], stepdiff_sample_bench.DIFFERENCES))


@pytest.mark.slow
def test_the_socratic_baseline_runs_end_to_end_on_the_sample_benchmark(demo):
    out, _ = demo
    bench = out / "stepdiff-demo" / "bench"
    for task, rows in (("diffcap", 6), ("diffmcq", 6), ("diffrank", 2)):
        predictions = jsonl((bench / f"socratic_{task}.jsonl").read_text())
        assert len(predictions) == rows
        scores = json.loads((bench / f"socratic_{task}.scores.json").read_text())
        assert scores["task"] == task and scores["rows"] == rows
    assert all(p["generated_text"] for p in jsonl((bench / "socratic_diffcap.jsonl").read_text()))


@pytest.mark.slow
def test_the_model_target_encodes_trains_asks_and_predicts_from_a_fresh_clone(demo):
    out, printed = demo
    folder = out / "stepdiff-demo"
    encoded = jsonl((folder / "encoded.jsonl").read_text())
    assert encoded and all(r["features"]["shape"] == [8, 49, 1280] for r in encoded)  # EfficientNet-Lite0
    log = [json.loads(line) for line in (folder / "model" / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log if e["split"] == "val"] == [0, 6]
    assert (folder / "model" / "checkpoints" / "step-0000006" / "projector.safetensors").is_file()
    answer = [json.loads(line) for line in printed.splitlines() if line.startswith('{"id": "ask"')]
    assert len(answer) == 1 and answer[0]["answer"]
    for task, rows in (("diffcap", 6), ("diffmcq", 6), ("diffrank", 2)):
        assert len(jsonl((folder / "bench" / f"stepdiff_{task}.jsonl").read_text())) == rows
        assert json.loads((folder / "bench" / f"stepdiff_{task}.scores.json").read_text())["rows"] == rows
