"""vi judge match: the seeded shuffle, letter parsing and verdicts; the offline scorer (the real
EfficientNet-Lite0 + MiniLM) on real photos, where the right captions are matched and swapped ones are
rejected; and the VLM path on a tiny random Qwen2-VL, which must answer a letter or a noted "none"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import jsonl, run_vi
from vi.core.errors import RecordError
from vi.pipelines.progresscaptioner import judge_match as jm

PHOTOS = Path("/usr/share/doc/opencv-doc/examples/data")
SCENES = {"orange.jpg": "A person holds an orange fruit.", "messi5.jpg": "A football player kicks a soccer ball.",
          "butterfly.jpg": "A butterfly sits on a flower.", "baboon.jpg": "A baboon monkey looks at the camera."}


def photo_record(tmp_path: Path) -> dict:
    """Four real photos as small jpg frames, and three captioners: right, shifted by one, all alike."""
    from PIL import Image

    if not (PHOTOS / "orange.jpg").exists():
        pytest.skip(f"{PHOTOS} is absent: install the Debian package opencv-doc (make install does)")
    frames = []
    for name in SCENES:
        with Image.open(PHOTOS / name) as image:
            image.convert("RGB").resize((160, 120)).save(tmp_path / name, quality=90)
        frames.append({"time": None, "path": str(tmp_path / name)})
    texts = list(SCENES.values())
    items = lambda caps: {"model": "test", "kind": "offline-test",  # noqa: E731
                          "items": [{"frame": i, "text": t} for i, t in enumerate(caps)]}
    return {"id": "photos", "frames": frames, "captions": items(texts),
            "captions_shifted": items(texts[1:] + texts[:1]), "captions_same": items(["A photo."] * 4)}


def test_shuffle_is_seeded_and_none_stays_last():
    frames = [0, 1, 2, 3, 4]
    first = jm.shuffled_options(0, "seq", 2, frames)
    assert first == jm.shuffled_options(0, "seq", 2, frames)  # same seed, id and frame: same order
    assert first[-1] is None and sorted(first[:-1]) == frames
    assert any(jm.shuffled_options(s, "seq", 2, frames) != first for s in (1, 2, 3))  # the seed moves it
    assert len({tuple(jm.shuffled_options(0, "seq", f, frames)) for f in frames}) > 1  # so does the frame
    text = jm.options_text([1, None], {1: "a  cut\napple"})
    assert text == f"A. a cut apple\nB. {jm.NONE_TEXT}"


def test_letters_and_verdicts():
    assert [jm.first_letter(r, 3) for r in ("B", "(C).", "Answer: A", "I think B", "D", "none")] == \
        [1, 2, 0, 1, None, None]
    assert jm.verdict([True] * 4) == "good"
    assert jm.verdict([True, True, False, False]) == "neither"  # half wrong is not "more than half"
    assert jm.verdict([True, False, False, False]) == "rejected"


def test_frames_to_match_and_bad_records():
    rec = {"id": "r", "frames": [{"path": "a.jpg"}, {"path": "b.jpg"}, {"path": "c.jpg"}]}
    assert jm.match_frames(rec) == [0, 1, 2]
    assert jm.match_frames({**rec, "progression": {"distinct": [0, 2]}}) == [0, 2]
    with pytest.raises(RecordError, match="progression.distinct"):
        jm.match_frames({**rec, "progression": {"distinct": [0, 5]}})
    with pytest.raises(RecordError, match="no 'frames'"):
        jm.match_frames({"id": "r"})
    with pytest.raises(RecordError, match=r"frame 1 \(b.jpg\) cannot be read"):
        jm.load_image(rec, 1)


@pytest.mark.slow
def test_offline_scorer_on_real_photos(tmp_path):
    rec = photo_record(tmp_path)
    rec["progression"] = {"distinct": [0, 1, 2, 3]}
    done = run_vi("judge", "match", "--vlm", "offline", "--device", "cpu", "-q", "--seed", "3",
                  stdin=json.dumps(rec) + "\n", check=True)
    matching = jsonl(done.stdout)[0]["matching"]
    assert matching["captions"]["verdict"] == "good"
    assert matching["captions"]["scorer"].startswith("offline:imagenet-labels")
    assert matching["captions_shifted"]["verdict"] == "rejected"
    same = matching["captions_same"]  # identical captions: none stands out, every answer is "none"
    assert [f["chosen"] for f in same["frames"]] == [None] * 4 and same["verdict"] == "rejected"
    for entry in matching["captions"]["frames"]:
        assert entry["options"][-1] is None and entry["options"][jm.LETTERS.index(entry["answer"])] == entry["frame"]
        assert entry["options"][:-1] == jm.shuffled_options(3, "photos", entry["frame"], [0, 1, 2, 3])[:-1]


@pytest.mark.slow
def test_tiny_vlm_answers_a_letter_or_a_noted_none(tmp_path):
    from vi.evaluation.progresscaptioner.caption_bench import build_tiny_vlm

    rec = photo_record(tmp_path)
    del rec["captions_shifted"], rec["captions_same"]
    config = jm.MatchConfig(vlm=str(build_tiny_vlm("qwen2_vl", tmp_path / "qwen2-vl")), device="cpu", dtype="float32",
                            max_new_tokens=4)
    result = jm.match_record(rec, config)["matching"]["captions"]
    assert result["scorer"] == f"vlm:{tmp_path / 'qwen2-vl'}" and len(result["frames"]) == 4
    for entry in result["frames"]:
        position = jm.LETTERS.index(entry["answer"])
        assert entry["chosen"] == entry["options"][position]
        if "note" in entry:  # random weights rarely write a capital letter: counted as none, and said so
            assert entry["chosen"] is None and "counted as none" in entry["note"]
    assert result["verdict"] in ("good", "rejected", "neither")
