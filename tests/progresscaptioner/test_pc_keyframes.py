"""`vi keyframes`: progress (captions + judge), uniform and K-means keyframes on a sequence of known stages."""

from __future__ import annotations

import json
import random
import re

import pytest
from conftest import jsonl, run_vi
from vi.core.errors import RecordError
from vi.core.models.llm import ChatReply
from vi.pipelines.progresscaptioner import keyframes as kf

SMOL = "smollm2-135m"
STAGES = [0, 0, 1, 1, 1, 2]  # frames 2 and 5 start a new stage
STAGE_TEXT = ["The bowl is empty on the table.", "Flour has been poured into the bowl.",
              "The dough is kneaded into a ball."]


class StageJudge:
    """A stand-in judge LLM: progression when the two captions differ (a window's tag aside), none when they
    are the same, in the letters of the order it is asked (eval A / B; the swapped prompt, which --debias
    also asks: B / A). `pairs` holds the captions of each pair once (the paper's order)."""

    n_ctx = 2048

    def __init__(self):
        self.pairs = []

    def count_message_tokens(self, messages) -> int:
        return sum(len(m["content"]) // 4 + 8 for m in messages)

    def chat(self, messages, schema=None, max_tokens=0, temperature=0.0, seed=0):
        found = re.search(r"Image 1: (.*) Image 2: (.*) Choose one", messages[-1]["content"])
        swapped = "A. No Action Progression" in messages[-1]["content"]
        if not swapped:
            self.pairs.append(found.groups())
        return ChatReply(json.dumps({"answer": "A" if self.progressed(*found.groups()) != swapped else "B"}),
                         0, 0, "stop")

    def progressed(self, first: str, second: str) -> bool:
        return re.sub(r" \(window \d+\)$", "", first) != re.sub(r" \(window \d+\)$", "", second)  # the stage's text


def sequence(pairwise: bool = False, frames: list[dict] | None = None) -> dict:
    n = len(STAGES)
    if pairwise:  # vi caption-frames --window 2 --keep-both: each frame from both windows it is in
        items = []
        for t in range(n):
            for first in (t - 1, t):
                if 0 <= first < n - 1:
                    items.append({"frame": t, "text": STAGE_TEXT[STAGES[t]] + f" (window {first})",
                                  "from": [first, first + 1]})
    else:
        items = [{"frame": t, "text": STAGE_TEXT[s]} for t, s in enumerate(STAGES)]
    return {"id": "dough", "action": "make dough",
            "frames": frames or [{"time": float(t), "path": f"/nowhere/{t}.jpg"} for t in range(n)],
            "captions": {"model": "test", "kind": "test", "window": 2 if pairwise else "full", "items": items}}


@pytest.fixture()
def judge(monkeypatch) -> StageJudge:
    llm = StageJudge()
    monkeypatch.setattr(kf.KeyframesConfig, "load_llm", lambda self: llm)
    monkeypatch.setattr(kf, "check_llm", lambda settings: None)
    # the selector is the point here, so the judge is asked in both orders (which agree) and no embedder
    monkeypatch.setattr(kf, "load_embedder", lambda ref, device: None)
    return llm


def test_progress_keeps_frame_0_and_each_new_stage(judge):
    out = kf.keyframes(sequence(), kf.KeyframesConfig(llm=SMOL, debias="orders"))
    assert [k["index"] for k in out["keyframes"]] == [0, 2, 5]
    assert [k["time"] for k in out["keyframes"]] == [0.0, 2.0, 5.0]
    assert [k["caption"] for k in out["keyframes"]] == STAGE_TEXT
    method = out["keyframes_method"]
    assert method["answers"] == ["B", "A", "B", "B", "A"] and method["captions"] == "sequence"
    assert (method["method"], method["prompt"], method["action"], method["count"]) == ("progress", "eval",
                                                                                        "make dough", 3)


def test_progress_compares_the_captions_of_each_window(judge):
    out = kf.keyframes(sequence(pairwise=True), kf.KeyframesConfig(llm=SMOL, debias="orders"))
    # every pair was read from its own window (t-1, t): both captions end "(window t-1)"
    assert all(a.endswith(f"(window {t})") and b.endswith(f"(window {t})") for t, (a, b) in enumerate(judge.pairs))
    assert out["keyframes_method"]["captions"] == "pairwise"
    assert [k["index"] for k in out["keyframes"]] == [0, 2, 5]
    assert out["keyframes"][1]["caption"] == STAGE_TEXT[1] + " (window 1)"  # c_t of the window (v_1, v_2)


def test_pseudo_prompt_and_an_uncertain_answer_keeps_nothing(judge, monkeypatch):
    monkeypatch.setattr(judge, "chat", lambda *a, **k: ChatReply('{"answer": "C"}', 0, 0, "stop"))
    out = kf.keyframes(sequence(), kf.KeyframesConfig(llm=SMOL, debias="orders", prompt="pseudo"))
    assert [k["index"] for k in out["keyframes"]] == [0] and out["keyframes_method"]["action"] is None


def test_progress_needs_a_caption_for_every_frame(judge):
    record = sequence()
    del record["captions"]["items"][3]
    with pytest.raises(RecordError, match="frame 3 has no caption in 'captions'"):
        kf.keyframes(record, kf.KeyframesConfig(llm=SMOL, debias="orders"))
    del record["captions"]
    with pytest.raises(RecordError, match="no 'captions' captions"):
        kf.keyframes(record, kf.KeyframesConfig(llm=SMOL, debias="orders"))


class LevelJudge(StageJudge):
    """A judge that sees a change only when the water level differs by at least 20 points: it never
    notices the 10 points of one adjacent pair."""

    def progressed(self, first: str, second: str) -> bool:
        return abs(level(second) - level(first)) >= 20


def level(caption: str) -> int:
    return int(re.search(r"(\d+)%", caption).group(1))


def test_the_last_keyframe_as_reference_catches_a_slow_change(judge, monkeypatch):
    """--reference keyframe: a change too small for the judge between adjacent frames is seen from the
    last keyframe; the paper's sliding window (previous) misses it at every step and keeps frame 0 alone."""
    levels = LevelJudge()
    monkeypatch.setattr(kf.KeyframesConfig, "load_llm", lambda self: levels)
    record = {"id": "glass", "action": "fill a glass", "captions": {"model": "test", "kind": "test", "items": [
        {"frame": t, "text": f"The glass is {10 * t}% full of water."} for t in range(6)]}}
    out = kf.keyframes(record, kf.KeyframesConfig(llm=SMOL, debias="orders"))
    assert [k["index"] for k in out["keyframes"]] == [0] and out["keyframes_method"]["reference"] == "previous"
    levels.pairs.clear()
    out = kf.keyframes(record, kf.KeyframesConfig(llm=SMOL, debias="orders", reference="keyframe"))
    assert [k["index"] for k in out["keyframes"]] == [0, 2, 4]
    # each frame was judged against the last keyframe: 0-1, 0-2, then 2-3, 2-4, then 4-5
    assert [(level(a), level(b)) for a, b in levels.pairs] == [(0, 10), (0, 20), (20, 30), (20, 40), (40, 50)]
    assert out["keyframes_method"]["reference"] == "keyframe"
    with pytest.raises(ValueError, match="--reference must be one of previous, keyframe"):
        kf.KeyframesConfig(llm=SMOL, debias="orders", reference="first")


def test_the_last_keyframe_as_reference_on_window_captions(judge):
    """With per-window captions, a pair of adjacent frames is still read from its window; a keyframe
    further back is compared by each frame's own first caption ("mixed")."""
    out = kf.keyframes(sequence(pairwise=True), kf.KeyframesConfig(llm=SMOL, debias="orders", reference="keyframe"))
    assert [k["index"] for k in out["keyframes"]] == [0, 2, 5]
    assert out["keyframes_method"]["captions"] == "mixed"
    # frame 3 against keyframe 2: adjacent, from their window (2, 3); frame 4 against keyframe 2: first captions
    assert judge.pairs[2] == (STAGE_TEXT[1] + " (window 2)", STAGE_TEXT[1] + " (window 2)")
    assert judge.pairs[3] == (STAGE_TEXT[1] + " (window 1)", STAGE_TEXT[1] + " (window 3)")


def test_uniform_spacing_and_its_count():
    assert kf.uniform_indices(6, 3) == [0, 2, 5] and kf.uniform_indices(6, 2) == [0, 5]
    assert kf.uniform_indices(3, 4) == [0, 1, 2] and kf.uniform_indices(5, 1) == [0]
    record = sequence()
    out = kf.keyframes(record, kf.KeyframesConfig(method="uniform"))
    assert [k["index"] for k in out["keyframes"]] == [0, 2, 3, 5]  # the default 4
    assert out["keyframes_method"]["count_from"] == "default"
    record.update(keyframes=[{"index": 0}, {"index": 2}], keyframes_method={"method": "progress"})
    out = kf.keyframes(record, kf.KeyframesConfig(method="uniform", into="keyframes_uniform"))
    assert [k["index"] for k in out["keyframes_uniform"]] == [0, 5]  # as many as the progress run kept
    assert out["keyframes_uniform_method"]["count_from"] == "progress"
    assert out["keyframes_uniform"][1]["caption"] == STAGE_TEXT[2]
    out = kf.keyframes(record, kf.KeyframesConfig(method="uniform", count=3))
    assert [k["index"] for k in out["keyframes"]] == [0, 2, 5]


def test_captions_alone_make_a_sequence(judge):
    record = sequence()
    del record["frames"]  # the release's sequences: captions, no frames
    out = kf.keyframes(record, kf.KeyframesConfig(llm=SMOL, debias="orders"))
    assert [(k["index"], k["time"]) for k in out["keyframes"]] == [(0, None), (2, None), (5, None)]


def stage_photos(folder) -> list[dict]:
    """The STAGES sequence as jittered real photos, one photo per stage."""
    from vi.evaluation.demo.samples import PHOTOS
    from vi.evaluation.progresscaptioner.samples import jittered

    if not (PHOTOS / "apple.jpg").exists():
        pytest.skip(f"{PHOTOS} is absent: install the Debian package opencv-doc (make install does)")
    rng, frames = random.Random(0), []
    for t, stage in enumerate(STAGES):
        path = folder / f"{t}.jpg"
        jittered(("apple.jpg", "butterfly.jpg", "messi5.jpg")[stage], rng, (320, 180)).save(path)
        frames.append({"time": float(t), "path": str(path)})
    return frames


def test_captions_made_here_come_from_each_window(tmp_path, judge):
    record = sequence(frames=stage_photos(tmp_path))
    del record["captions"]
    config = kf.KeyframesConfig(llm=SMOL, debias="orders", captioner="offline", device="cpu")
    out = kf.keyframes(record, config)
    assert out["keyframes_method"]["captions"] == "pairwise" and len(judge.pairs) == 5
    assert out["keyframes"][0]["index"] == 0 and "captions" not in out  # the captions stay the stage's own


def test_kmeans_keeps_one_frame_per_stage(tmp_path):
    frames = stage_photos(tmp_path)
    out = kf.keyframes(sequence(frames=frames), kf.KeyframesConfig(method="kmeans", image_model="efficientnet-lite0",
                                                                    device="cpu"))
    kept = [k["index"] for k in out["keyframes"]]
    assert sorted({STAGES[i] for i in kept}) == [0, 1, 2] and len(kept) == 3
    assert out["keyframes_method"]["k"] == 3 and out["keyframes_method"]["model"].startswith("efficientnet")
    broken = sequence(frames=[{"time": 0.0, "path": str(tmp_path / "missing.jpg")}, *frames[1:]])
    with pytest.raises(RecordError, match="frame 0 .* not a readable image"):
        kf.keyframes(broken, kf.KeyframesConfig(method="kmeans", image_model="efficientnet-lite0", device="cpu"))


@pytest.mark.slow
def test_the_stage_with_the_real_embedded_judge(tmp_path):
    captions = [{"frame": t, "text": STAGE_TEXT[s]} for t, s in enumerate([0, 0, 1])]
    three = {"id": "three", "action": "make dough", "frames": [{"time": float(t), "path": "x"} for t in range(3)],
             "captions": {"model": "t", "items": captions}}
    records = [three, {"id": "nothing"}, {**three, "id": "one", "frames": three["frames"][:1],
                                          "captions": {"model": "t", "items": [{"frame": 0, "text": "A bowl."}]}}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = run_vi("keyframes", "-i", str(path), "--llm", SMOL, "--threads", "1", "-q")
    out = {r["id"]: r for r in jsonl(done.stdout)}
    assert done.returncode == 3, done.stderr  # the record without frames or captions failed, the others did not
    assert "no 'frames' and no captions" in out["nothing"]["errors"][-1]["message"]
    assert [k["index"] for k in out["one"]["keyframes"]] == [0]  # one frame: nothing to judge
    method = out["three"]["keyframes_method"]
    assert out["three"]["keyframes"][0]["index"] == 0 and len(method["answers"]) == 2
    assert set(method["answers"]) <= {"A", "B", "C"} and method["llm"] == SMOL
    kept = [k["index"] for k in out["three"]["keyframes"]]
    assert kept == [0] + [t for t, letter in enumerate(method["answers"], 1) if letter == "A"]
