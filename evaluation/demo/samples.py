"""The bundled narrated how-to sample, made here rather than shipped.

Each sentence is synthesised separately with espeak-ng and placed on a timeline with known
gaps, so the ground truth (what is said, from when to when) is exact: tests check
transcription against it, and later stages check step extraction and frame alignment.
Each sentence has its own still image, so the picture changes with the step.

The how-to samples (`HOWTO_SAMPLES`) show a real photo during each step that has one (from
Debian's opencv-doc: an apple, an orange, a squirrel, ...), so a frame aligner has something
real to find; a step without a photo shows a plain coloured card.

The StepDiff samples (`STEPDIFF_SAMPLES`) do the keysteps of fruit_salad differently; with
fruit_salad, their keysteps are annotated in OUTDIR/stepdiff_keysteps.jsonl (`make stepdiff-demo`).

    python -m vi.evaluation.demo.samples OUTDIR   # tea, fruit_salad, ...: OUTDIR/NAME.mp4 + NAME.json
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vi.core.errors import SetupError
from vi.core.media import require_tool

TEA_SCRIPT = (
    "Today I will show you how to make a cup of tea.",
    "First, fill the kettle with fresh water and switch it on.",
    "While the water heats, put a tea bag into a mug.",
    "Pour the boiling water over the tea bag.",
    "Let the tea steep for three minutes, then remove the bag.",
    "Add a splash of milk and stir.",
    "Your tea is ready to enjoy.",
)
GAP_S = 0.8  # silence between sentences, and before the first
RATE = 22_050  # espeak-ng's native rate
PHOTOS = Path("/usr/share/doc/opencv-doc/examples/data")  # Debian package opencv-doc
COLOURS = ((200, 60, 60), (60, 160, 60), (60, 90, 200), (200, 170, 40), (150, 60, 170),
           (40, 170, 170), (120, 120, 120))


@dataclass
class Sentence:
    text: str
    start: float
    end: float


def _need(tool: str) -> str:
    try:
        return require_tool(tool)
    except SetupError as exc:
        raise SystemExit(f"making the sample: {exc}") from None


def speak(text: str, path: Path, voice: str = "en-us", wpm: int = 140) -> np.ndarray:
    subprocess.run([_need("espeak-ng"), "-v", voice, "-s", str(wpm), "-w", str(path), text],
                   check=True, capture_output=True)
    with wave.open(str(path)) as handle:
        assert handle.getframerate() == RATE and handle.getnchannels() == 1
        return np.frombuffer(handle.readframes(handle.getnframes()), np.int16)


def _trim(samples: np.ndarray, threshold: int = 200) -> np.ndarray:
    """espeak pads with silence; trim it so sentence times are the speech itself."""
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > threshold)
    return samples[loud[0]: loud[-1] + 1] if loud.size else samples


def _still(path: Path, index: int, text: str, size=(640, 360), photo: str | None = None) -> None:
    from PIL import Image, ImageDraw, ImageOps

    if photo is not None:  # the photo alone, letterboxed: no caption an aligner could read
        image = Image.new("RGB", size, (0, 0, 0))
        picture = ImageOps.contain(Image.open(PHOTOS / photo).convert("RGB"), size)
        image.paste(picture, ((size[0] - picture.width) // 2, (size[1] - picture.height) // 2))
        image.save(path)
        return
    image = Image.new("RGB", size, COLOURS[index % len(COLOURS)])
    draw = ImageDraw.Draw(image)
    draw.rectangle([40, 40, size[0] - 40, size[1] - 40], outline=(255, 255, 255), width=6)
    draw.text((60, 60), f"Step {index}", fill=(255, 255, 255))
    draw.text((60, 100), text, fill=(255, 255, 255))
    image.save(path)


def make_narrated_video(out_dir: Path, name: str, script: tuple[str, ...], fps: int = 10,
                        photos: tuple[str | None, ...] | None = None) -> tuple[Path, list[Sentence]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / f".{name}-parts"
    work.mkdir(exist_ok=True)
    gap = np.zeros(int(GAP_S * RATE), np.int16)
    audio, sentences, cursor = [gap], [], GAP_S
    for i, text in enumerate(script):
        samples = _trim(speak(text, work / f"s{i}.wav"))
        sentences.append(Sentence(text, round(cursor, 3), round(cursor + len(samples) / RATE, 3)))
        audio += [samples, gap]
        cursor += (len(samples) + len(gap)) / RATE
    wav = work / "narration.wav"
    with wave.open(str(wav), "wb") as handle:
        handle.setnchannels(1), handle.setsampwidth(2), handle.setframerate(RATE)
        handle.writeframes(np.concatenate(audio).tobytes())
    # One still per sentence, shown from the end of the previous sentence to its own end.
    concat = work / "frames.txt"
    lines, shown_until = [], 0.0
    for i, sentence in enumerate(sentences):
        _still(work / f"f{i}.png", i, sentence.text, photo=photos[i] if photos else None)
        until = sentence.end if i < len(sentences) - 1 else cursor
        lines += [f"file 'f{i}.png'", f"duration {until - shown_until:.3f}"]
        shown_until = until
    lines.append(f"file 'f{len(sentences) - 1}.png'")  # concat demuxer needs the last twice
    concat.write_text("\n".join(lines) + "\n")
    video = out_dir / f"{name}.mp4"
    subprocess.run([_need("ffmpeg"), "-y", "-v", "error", "-f", "concat", "-safe", "0",
                    "-i", str(concat), "-i", str(wav), "-r", str(fps), "-c:v", "libx264",
                    "-preset", "veryfast", "-threads", "1", "-pix_fmt", "yuv420p",
                    "-c:a", "aac", "-b:a", "64k", "-t", f"{cursor:.3f}", str(video)], check=True)
    shutil.rmtree(work)
    return video, sentences


def make_tea_sample(out_dir: Path) -> Path:
    """Write OUTDIR/tea.mp4 and its ground truth OUTDIR/tea.json; reuse them if present."""
    video, truth = out_dir / "tea.mp4", out_dir / "tea.json"
    if video.exists() and truth.exists():
        return video
    video, sentences = make_narrated_video(out_dir, "tea", TEA_SCRIPT)
    truth.write_text(json.dumps({
        "video": video.name, "title": "How to make a cup of tea",
        "sentences": [s.__dict__ for s in sentences]}, indent=2) + "\n")
    return video


# How-to samples with known steps: (title, ((sentence, photo or None, is_step), ...)).
# The photos are ones EfficientNet-Lite0 labels correctly (Granny Smith, orange, lemon, ...).
HOWTO_SAMPLES: dict[str, tuple[str, tuple[tuple[str, str | None, bool], ...]]] = {
    "fruit_salad": ("How to make a fruit salad", (
        ("Today I will show you how to make a simple fruit salad.", None, False),
        ("First, wash a green apple under cold water and cut it into cubes.", "apple.jpg", True),
        ("Next, peel an orange and break it into segments.", "orange.jpg", True),
        ("Then cut a lemon in half and squeeze the juice over the fruit.", "fruits.jpg", True),
        ("Mix the fruit gently in a large bowl.", None, True),
        ("Your fruit salad is ready to serve.", None, False),
    )),
    "garden_wildlife": ("How to photograph wildlife in your garden", (
        ("In this video I will show you how to photograph wildlife in your garden.", None, False),
        ("First, put some nuts on the fence to attract a squirrel.", "squirrel_cls.jpg", True),
        ("Then plant flowers, so that a monarch butterfly lands near your camera.",
         "butterfly.jpg", True),
        ("At the zoo, use a long lens to take a portrait of a baboon.", "baboon.jpg", True),
        ("That is all you need for great wildlife photos.", None, False),
    )),
    "ball_games": ("How to practise ball skills at home", (
        ("Here is how to practise your ball skills at home.", None, False),
        ("Place a soccer ball on the grass and kick it against a wall.", "messi5.jpg", True),
        ("Bounce a ping pong ball on your paddle twenty times.", "stuff.jpg", True),
        ("Finally, put the orange cones away and stretch your legs.", None, True),
    )),
}


# Narrated videos that show no task, for what a dataset build must turn away (`vi filter-instructional
# --drop`). Same layout as HOWTO_SAMPLES, no steps; kept apart from it, as STEPDIFF_SAMPLES is.
OTHER_SAMPLES: dict[str, tuple[str, tuple[tuple[str, str | None, bool], ...]]] = {
    "seaside_vlog": ("Our weekend at the seaside", (
        ("Hi everyone, welcome back to my channel.", None, False),
        ("This weekend my sister and I took the train to the seaside.", None, False),
        ("The weather was lovely and the beach was really busy.", None, False),
        ("We had ice cream on the pier and watched the boats come in.", None, False),
        ("Thanks for watching, and see you next week.", None, False),
    )),
}


def make_howto_sample(out_dir: Path, name: str) -> Path:
    """OUTDIR/NAME.mp4 and its truth NAME.json: sentences, and the steps with the interval
    their picture is on screen (`shown`); reused if present."""
    title, script = {**HOWTO_SAMPLES, **STEPDIFF_SAMPLES, **OTHER_SAMPLES}[name]
    video, truth = out_dir / f"{name}.mp4", out_dir / f"{name}.json"
    if video.exists() and truth.exists():
        return video
    photos = tuple(photo for _, photo, _ in script)
    missing = [p for p in photos if p is not None and not (PHOTOS / p).exists()]
    if missing:
        raise SystemExit(f"making the sample {name}: photos {', '.join(missing)} are missing from "
                         f"{PHOTOS}; install the Debian package opencv-doc (make install does)")
    video, sentences = make_narrated_video(out_dir, name, tuple(t for t, _, _ in script), photos=photos)
    steps, shown_from = [], 0.0
    for sentence, (_, photo, is_step) in zip(sentences, script):
        if is_step:
            steps.append({"text": sentence.text, "start": sentence.start, "end": sentence.end,
                          "shown": [shown_from, sentence.end], "photo": photo})
        shown_from = sentence.end
    truth.write_text(json.dumps({"video": video.name, "title": title,
                                 "sentences": [s.__dict__ for s in sentences], "steps": steps},
                                indent=2) + "\n")
    return video


# StepDiff samples: how-to videos whose steps are keysteps of a how-to sample above, done
# differently (another fruit, tool or technique), so that `vi pair` has clips of one keystep
# from two videos to compare. Same layout as HOWTO_SAMPLES, and kept apart from it: the
# quality and bench figures measured on HOWTO_SAMPLES stay as they are.
STEPDIFF_SAMPLES: dict[str, tuple[str, tuple[tuple[str, str | None, bool], ...]]] = {
    "fruit_salad_peeler": ("How to make a quick fruit salad with a peeler", (
        ("Here is a quick fruit salad for breakfast.", None, False),
        # Worded so that whisper-tiny.en hears it right, and no word it times runs into the
        # next step's clip ("...vegetable peeler." did: its "peeler." lasted a second).
        ("With a vegetable peeler, peel the skin off a green apple.", "apple.jpg", True),
        ("Next, slice an orange into thin rounds with a sharp knife.", "orange.jpg", True),
        ("Squeeze half an orange over the fruit with a juicer.", "orange.jpg", True),
        ("Stir everything together with a wooden spoon.", None, True),
        ("Enjoy your breakfast.", None, False),
    )),
}
# The keystep of each step (in the order of its truth's "steps"), as an annotator would label
# it: equal labels in two videos are the same keystep. fruit_salad's truth is not touched;
# its labels live here.
STEPDIFF_KEYSTEPS: dict[str, tuple[str, ...]] = {
    "fruit_salad": ("cut the fruit", "peel the fruit", "squeeze juice over the fruit", "mix the fruit"),
    "fruit_salad_peeler": ("peel the fruit", "cut the fruit", "squeeze juice over the fruit", "mix the fruit"),
}
STEPDIFF_ANNOTATION = "stepdiff_keysteps.jsonl"


def keystep_record(out_dir: Path, name: str) -> dict:
    """The keystep annotation of one video as a record `vi probe` takes and passes on: its id and
    video, and `steps.items` = the keystep label of each step over the step's spoken interval
    (the layout vi extract-steps writes, which `vi clips` cuts into clips).

    Only the steps shown with a photo: a plain card is no picture of its step, and offline
    `vi describe` would see it through its ImageNet labels ("website", "envelope"), which the
    LLM then puts into the description."""
    truth = json.loads((out_dir / f"{name}.json").read_text())
    keysteps = STEPDIFF_KEYSTEPS[name]
    assert len(truth["steps"]) == len(keysteps), f"{name}: one keystep label per step"
    items = [{"text": keystep, "start": step["start"], "end": step["end"]}
             for step, keystep in zip(truth["steps"], keysteps) if step["photo"] is not None]
    return {"id": name, "video": str((out_dir / truth["video"]).resolve()),
            "steps": {"title": truth["title"], "items": items}}


def make_stepdiff_samples(out_dir: Path) -> list[Path]:
    """The videos of STEPDIFF_KEYSTEPS and their keystep annotation, OUTDIR/stepdiff_keysteps.jsonl
    (one record a video; see keystep_record). Video paths in it are absolute, so it is rewritten
    every time."""
    videos = [make_howto_sample(out_dir, name) for name in STEPDIFF_KEYSTEPS]
    annotation = out_dir / STEPDIFF_ANNOTATION
    annotation.write_text("".join(json.dumps(keystep_record(out_dir, name)) + "\n"
                                  for name in STEPDIFF_KEYSTEPS), encoding="utf-8")
    return videos + [annotation]


def make_all(out_dir: Path) -> list[Path]:
    made = [make_tea_sample(out_dir)] + [make_howto_sample(out_dir, name) for name in HOWTO_SAMPLES]
    return made + [p for p in make_stepdiff_samples(out_dir) if p not in made]


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "out/sample")
    for made in make_all(target):
        print(made)
