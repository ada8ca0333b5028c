"""The progress samples: their truth matches their pixels (same stage = alike but not identical,
a change = a different photo), and they are the same for the same seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from vi.core import media
from vi.evaluation.progresscaptioner.samples import adjacent_labels, jittered, make_progress_sample, make_progress_sequences


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float32) - b.astype(np.float32)).mean())


def _plain(photo: str) -> np.ndarray:
    return np.asarray(jittered(photo, _NoJitter()))


class _NoJitter:
    def uniform(self, low, high):  # no zoom, no shift, brightness x1
        return 1.0 if low > 0.5 else 0.0


def _small(frame: np.ndarray) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(frame).resize((32, 18), Image.BILINEAR), np.float32)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("progress")
    make_progress_sample(out, seed=1)
    return out, json.loads((out / "progress.json").read_text())


def test_video_truth_matches_its_frames(sample):
    out, truth = sample
    assert media.probe(out / truth["video"]).duration == pytest.approx(truth["duration"], abs=0.11)
    frames = media.read_frames(out / truth["video"], truth["frame_times"], 160, 90)
    labels = truth["labels"]
    assert labels == adjacent_labels(truth["frame_stage"]) and 0 in labels and 1 in labels
    assert len(labels) == len(truth["frame_times"]) - 1 == len(frames) - 1
    same = [_distance(a, b) for a, b, label in zip(frames, frames[1:], labels) if label == 0]
    assert min(same) > 0.5, "frames of one stage must not be pixel-identical (jitter)"
    # each frame, seen small, is nearest to its own stage's photo (unjittered) of all the stages'
    photos = np.stack([_small(_plain(stage["photo"])) for stage in truth["stages"]])
    nearest = [int(np.argmin(np.abs(photos - _small(frame)).mean((1, 2, 3)))) for frame in frames]
    assert nearest == truth["frame_stage"]
    assert len(truth["stages"]) == 5 and all(2 <= s["end"] - s["start"] <= 3.5 for s in truth["stages"])
    assert [truth["frame_stage"][i] for i in truth["distinct_frames"]] == list(range(5))
    [line] = [json.loads(x) for x in (out / "progress_labels.jsonl").read_text().splitlines()]
    assert line == {"id": "progress", "labels": labels, "stages": truth["frame_stage"]}
    [record] = [json.loads(x) for x in (out / "progress_record.jsonl").read_text().splitlines()]
    assert Path(record["video"]).is_file() and record["action"] == truth["action"]


def test_sequences_have_known_labels(tmp_path):
    paths = make_progress_sequences(tmp_path / "a", n=12, seed=5)
    records = [json.loads(x) for x in paths["sequences"].read_text().splitlines()]
    truths = {t["id"]: t for t in map(json.loads, paths["labels"].read_text().splitlines())}
    assert len(records) == 12 and {r["split"] for r in records} == {"tune", "measure"}
    for record in records:
        truth = truths[record["id"]]
        assert 2 <= len(record["frames"]) <= 6 and record["source"] == "SAMPLE" and record["action"]
        assert "labels" not in record and "stages" not in record  # the truth stays out of the records
        assert truth["labels"] == adjacent_labels(truth["stages"]) and len(truth["labels"]) == len(record["frames"]) - 1
        from PIL import Image

        if len(record["frames"]) >= 3:
            assert 0 in truth["labels"] and 1 in truth["labels"]

        pixels = [np.asarray(Image.open(f["path"])) for f in record["frames"]]
        for i, label in enumerate(truth["labels"]):
            assert _distance(pixels[i], pixels[i + 1]) > 0.5  # jittered, never the same pixels
            assert (truth["photos"][i] != truth["photos"][i + 1]) == bool(label)
    again = make_progress_sequences(tmp_path / "b", n=12, seed=5)
    assert again["labels"].read_text() == paths["labels"].read_text()
