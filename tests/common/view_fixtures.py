"""Records of every kind `vi view` draws, shaped as the stages write them (see each stage's
--help), over real photos and a short video made from them; plus the untrusted text the page
must show as text."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

PHOTOS = Path("/usr/share/doc/opencv-doc/examples/data")
NAMES = ("orange.jpg", "apple.jpg", "fruits.jpg", "home.jpg", "baboon.jpg", "butterfly.jpg")
# A caption that would run if the page ever put record text into HTML.
INJECTED = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">peel the orange'


def photos(folder: Path) -> list[Path]:
    if not all((PHOTOS / n).is_file() for n in NAMES):
        pytest.skip(f"{PHOTOS} lacks the photos (Debian's opencv-doc, installed by make install)")
    folder.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy(PHOTOS / n, folder / n)) for n in NAMES]


def video(folder: Path, pictures: list[Path]) -> Path:
    """A 6 s video, one photo per second (so a frame's time says which photo it shows)."""
    from PIL import Image

    stills = folder / "stills"
    stills.mkdir(exist_ok=True)
    for n, picture in enumerate(pictures):
        Image.open(picture).convert("RGB").resize((320, 240)).save(stills / f"{n:02d}.png")
    target = folder / "clip.mp4"
    subprocess.run(["ffmpeg", "-y", "-v", "error", "-framerate", "1", "-i", str(stills / "%02d.png"),
                    "-vf", "fps=5", "-pix_fmt", "yuv420p", str(target)], check=True)
    return target


def steps_record(clip: Path, pictures: list[Path]) -> dict:
    segments = [{"start": 0.1, "end": 0.9, "text": "Hi everyone, welcome back to the channel."},
                {"start": 1.0, "end": 1.9, "text": "First grab an orange and"},
                {"start": 2.0, "end": 2.9, "text": "peel it all the way round."},
                {"start": 3.0, "end": 3.9, "text": "Sorry, my phone is ringing, ignore that."},
                {"start": 4.0, "end": 5.9, "text": "Then slice the apple thinly."}]
    return {"id": "howto-1", "video": str(clip), "duration": 6.0,
            "transcript": {"language": "en", "segments": segments},
            "instructional": {"label": True, "model": "qwen2.5-coder-1.5b"},
            "steps": {"title": "Fruit plate", "model": "qwen2.5-coder-1.5b", "repairs": [],
                      "items": [{"text": "Peel an orange.", "start": 1.0, "end": 2.9, "lines": [1, 2],
                                 "frame": {"time": 2.0, "score": 0.41, "path": str(pictures[0])}},
                                {"text": "Slice the apple.", "start": 4.0, "end": 5.9, "lines": [4, 4],
                                 "frame": {"time": 4.5, "score": 0.38}},  # no path: a frame of the video
                                {"text": "Serve it.", "start": 5.5, "end": 5.9, "lines": [4, 4], "frame": None}]},
            "alignment": {"model": "random", "fps": 1.0, "eps": 15.0, "candidates": 6, "unaligned": 1}}


def clip_record(clip: Path, start: float, end: float, name: str, step: str) -> dict:
    return {"id": f"{name}_{start}_{end}", "video": str(clip), "start": start, "end": end, "keystep": "peel the fruit",
            "source_id": name, "narration": f"Now {step.lower()}", "video_duration": 6.0,
            "description": {"action": None, "objects": [{"name": "orange", "attributes": None, "score": 0.71}],
                            "narration": f"Now {step.lower()}", "step": step,
                            "sources": {"action": None, "objects": "imagenet-labels:efficientnet-lite0",
                                        "step": "qwen2.5-coder-1.5b"}}}


def pair_record(clip: Path) -> dict:
    ref = clip_record(clip, 0.0, 2.0, "a", "The person peels an orange by hand.")
    cand = clip_record(clip, 1.0, 3.0, "b", "The person peels an apple with a peeler.")
    return {"id": f"{ref['id']}__{cand['id']}", "reference": ref, "candidate": cand, "keystep": "peel the fruit",
            "qa": [{"type": 2, "q": "Which video uses a peeler?", "a": "Video 2"},
                   {"type": 3, "q": "Do the two videos share a similar main action?", "a": "YES"}],
            "qa_stats": {"model": "qwen2.5-coder-1.5b", "sources": {"reference": "description", "candidate": "description"},
                         "generated": {"1": 1, "2": 1, "3": 1}, "kept": {"1": 0, "2": 1, "3": 1},
                         "dropped": {"about_the_text": 1},
                         "dropped_items": [{"type": 1, "q": "What is not mentioned in the descriptions?",
                                            "a": "The colour of the knife.", "reason": "about_the_text"}]}}


def captions_record(pictures: list[Path]) -> dict:
    frames = [{"time": None, "path": str(p)} for p in pictures[:4]]
    texts = ["A whole orange on the board.", INJECTED, "Half of the orange is peeled.", "The orange is fully peeled."]
    return {"id": "seq-1", "action": "peel an orange", "source": "HTC", "frames": frames,
            "captions": {"model": "offline-imagenet-labels", "kind": "offline-imagenet-labels", "window": "full",
                         "items": [{"frame": i, "text": t} for i, t in enumerate(texts)], "repairs": []},
            "captions_b": {"model": "openai:qwen2-vl@http://localhost:8000/v1", "kind": "openai", "window": 2,
                           "items": [{"frame": i, "text": f"Frame {i}: hands and an orange.", "from": [i, i + 1]}
                                     for i in range(4)]},
            "progression": {"prompt": "pseudo", "judges": ["qwen2.5-coder-1.5b"], "captioners": ["captions", "captions_b"],
                            "pairs": [{"frames": [i, i + 1], "answers": {"captions": {"qwen2.5-coder-1.5b": "B"},
                                                                         "captions_b": {"qwen2.5-coder-1.5b": "A"}},
                                       "consensus": "B" if i != 1 else None, "change": True if i != 1 else None,
                                       "passed": {"captions": True, "captions_b": False}} for i in range(3)],
                            "distinct": [0, 1, 3]},
            "matching": {"captions": {"scorer": "offline", "seed": 0, "verdict": "good",
                                      "frames": [{"frame": i, "options": [0, 1, 2, 3, None], "answer": "A",
                                                  "chosen": i, "correct": True} for i in (0, 1, 3)]},
                         "captions_b": {"scorer": "offline", "seed": 0, "verdict": "rejected",
                                        "frames": [{"frame": i, "options": [0, 1, 2, 3, None], "answer": "E",
                                                    "chosen": None, "correct": False} for i in (0, 1, 3)]}},
            "keyframes": [{"index": 0, "time": None, "caption": texts[0]}, {"index": 3, "time": None, "caption": texts[3]}],
            "keyframes_method": {"method": "progress", "count": 2}}


def generated_record(folder: Path, pictures: list[Path]) -> dict:
    from PIL import Image

    out = folder / "generated" / "seq"
    out.mkdir(parents=True, exist_ok=True)
    tiles = [Image.open(p).convert("RGB").resize((64, 64)) for p in pictures[:3]]
    for n, tile in enumerate(tiles[1:], 1):
        tile.save(out / f"step{n:02d}.jpg")
    strip = Image.new("RGB", (64 * len(tiles), 64))
    for n, tile in enumerate(tiles):
        strip.paste(tile, (64 * n, 0))
    strip.save(out / "strip.jpg")
    return {"id": "gen-1", "key": "seq", "image": str(pictures[0]), "title": "Fruit plate",
            "prompts": ["A cutting board with fruit.", "Peel the orange.", "Slice the apple."],
            "source_strip": str(out / "strip.jpg"),
            "generated": {"frames": [str(out / "step01.jpg"), str(out / "step02.jpg")], "strip": str(out / "strip.jpg"),
                          "seed": 7, "steps": 20, "guidance": {"text": 7.5, "image": 1.5}, "model": "tiny"}}


def transcript_record(clip: Path) -> dict:
    return {"id": "talk-1", "video": str(clip), "duration": 6.0,
            "transcript": {"language": "en", "model": "whisper-tiny.en", "segments": [
                {"start": 0.0, "end": 2.5, "text": "Thanks for coming to this talk about compilers."},
                {"start": 2.6, "end": 5.9, "text": ""}]},
            "instructional": {"label": False, "reason": "a talk, not a how-to", "model": "qwen2.5-coder-1.5b"}}


def error_records() -> list[dict]:
    return [{"id": "broken-1", "video": "/nowhere/missing.mp4",
             "errors": [{"stage": "transcribe", "kind": "unreadable_media",
                         "message": "/nowhere/missing.mp4: no such file; check the path"}]},
            {"id": "other-1", "note": "a record of no kind vi view knows", "score": 0.5, "tags": ["a", "b"]}]


def all_records(folder: Path) -> list[dict]:
    pictures = photos(folder / "photos")
    clip = video(folder, pictures)
    return [steps_record(clip, pictures), pair_record(clip), clip_record(clip, 2.0, 4.0, "c", "Slice the apple."),
            captions_record(pictures), generated_record(folder, pictures), transcript_record(clip), *error_records()]


def write_jsonl(path: Path, records: list[dict], extra_lines: list[str] = ()) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "".join(line + "\n" for line in extra_lines))
    return path
