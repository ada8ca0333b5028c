"""Sample material whose progression is known, for ProgressCaptioner's stages and their quality.

`make_progress_sample`: a short MP4 of distinct stages, each a real photo (Debian's opencv-doc,
as the how-to samples use) held 2 or 3 seconds. Every half second the photo is redrawn with a
small random zoom, shift and brightness change, so frames of one stage are alike but never
pixel-identical, as in a real shot. Stage changes fall on half seconds, so the frames at
t = 0, 1, 2, ... s that `vi frames` takes at 1 FPS each lie clearly inside one stage: adjacent
frames of one stage are a "no progression" pair (label 0), the others a change (label 1).
Truth: NAME.json (per-second stage, adjacent labels, the distinct stages), NAME_labels.jsonl
(`{id, labels, stages}` in `vi eval framecap --labels` form, for the sequence `vi frames
--select all` makes from NAME_record.jsonl; id NAME, as vi probe names NAME.mp4 too).

`make_progress_sequences`: FrameCapEval-like image sequences of 2-6 frames (jpgs), each frame
a stage photo with its own jitter; adjacent frames of the same stage (the same photo, jittered)
are the no-progression pairs. sequences.jsonl holds `{id, frames: [{time: null, path}], action,
source: "SAMPLE", split}` (split: "tune" or "measure": keep the measure ones for measuring
only) and sequences_labels.jsonl the truth, `{id, labels, stages}`; no truth is in the records.

    python -m vi.evaluation.progresscaptioner.samples OUTDIR [N_SEQUENCES] [SEED]
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

from vi.evaluation.demo.samples import PHOTOS, _need

SIZE = (640, 360)
SLOT_S = 0.5  # the picture is redrawn (jittered) every half second
VIDEO_FPS = 10
SOURCE = "SAMPLE"
# Photos EfficientNet-Lite0 names well, in themes; a sample's stages are photos of one theme.
THEMES: dict[str, tuple[str, ...]] = {
    "arranging food on a table": ("apple.jpg", "orange.jpg", "fruits.jpg", "smarties.png", "HappyFish.jpg"),
    "photographing wildlife": ("squirrel_cls.jpg", "butterfly.jpg", "baboon.jpg", "chicky_512.png",
                               "HappyFish.jpg"),
    "practising ball games": ("messi5.jpg", "stuff.jpg", "basketball1.png", "board.jpg", "home.jpg"),
}
PROGRESS_SAMPLES: dict[str, str] = {"progress": "arranging food on a table"}  # name -> theme


def _check_photos(photos) -> None:
    missing = sorted({p for p in photos if not (PHOTOS / p).exists()})
    if missing:
        raise SystemExit(f"making the progress sample: photos {', '.join(missing)} are missing from {PHOTOS}; "
                         "install the Debian package opencv-doc (make install does)")


def jittered(photo: str, rng: random.Random, size: tuple[int, int] = SIZE):
    """The photo letterboxed into `size`, zoomed 0-8 %, shifted up to 3 % and brightened +-8 %."""
    from PIL import Image, ImageEnhance, ImageOps

    picture = Image.open(PHOTOS / photo).convert("RGB")
    zoom = 1 + rng.uniform(0, 0.08)
    w, h = picture.size
    cw, ch = w / zoom, h / zoom
    left = (w - cw) / 2 + rng.uniform(-0.03, 0.03) * w
    top = (h - ch) / 2 + rng.uniform(-0.03, 0.03) * h
    left, top = min(max(0, left), w - cw), min(max(0, top), h - ch)
    picture = picture.crop((round(left), round(top), round(left + cw), round(top + ch)))
    picture = ImageEnhance.Brightness(ImageOps.contain(picture, size)).enhance(rng.uniform(0.92, 1.08))
    image = Image.new("RGB", size, (0, 0, 0))
    image.paste(picture, ((size[0] - picture.width) // 2, (size[1] - picture.height) // 2))
    return image


def adjacent_labels(stages: list[int]) -> list[int]:
    """1 where the next frame shows another stage (progression), 0 where it shows the same."""
    return [int(a != b) for a, b in zip(stages, stages[1:])]


def make_progress_sample(out_dir: Path, name: str = "progress", seed: int = 0) -> Path:
    """OUTDIR/NAME.mp4 (+ NAME.json, NAME_labels.jsonl, NAME_record.jsonl); reused if present."""
    out_dir = Path(out_dir)
    video, truth_path = out_dir / f"{name}.mp4", out_dir / f"{name}.json"
    if video.exists() and truth_path.exists():
        return video
    action = PROGRESS_SAMPLES.get(name, PROGRESS_SAMPLES["progress"])
    photos = THEMES[action]
    _check_photos(photos)
    rng = random.Random(f"progress-sample:{name}:{seed}")
    holds = [rng.choice((2, 3)) for _ in photos]  # whole seconds per stage
    # Stage i ends at 0.5 + sum(holds[:i+1]): changes fall between the 1 FPS frames.
    ends = [SLOT_S + sum(holds[:i + 1]) for i in range(len(photos))]
    duration = ends[-1]
    work = out_dir / f".{name}-parts"
    work.mkdir(parents=True, exist_ok=True)
    slots = round(duration / SLOT_S)
    for k in range(slots):
        stage = next(i for i, end in enumerate(ends) if (k + 0.5) * SLOT_S < end)
        jittered(photos[stage], rng).save(work / f"s{k:03d}.png", compress_level=1)
    # One picture per half second, each repeated to VIDEO_FPS: the duration is exact.
    subprocess.run([_need("ffmpeg"), "-y", "-v", "error", "-framerate", str(1 / SLOT_S), "-i", str(work / "s%03d.png"),
                    "-r", str(VIDEO_FPS), "-c:v", "libx264", "-preset", "veryfast", "-threads", "1",
                    "-pix_fmt", "yuv420p", str(video)], check=True)
    shutil.rmtree(work)
    seconds = list(range(int(duration) + (0 if duration.is_integer() else 1)))  # t = 0, 1, ... < duration
    frame_stage = [next(i for i, end in enumerate(ends) if t < end) for t in seconds]
    labels = adjacent_labels(frame_stage)
    distinct = [frame_stage.index(i) for i in range(len(photos))]  # first frame of each stage
    starts = [0.0] + ends[:-1]
    truth = {"id": name, "video": video.name, "action": action, "fps": 1, "duration": duration,
             "stages": [{"index": i, "photo": p, "start": s, "end": e}
                        for i, (p, s, e) in enumerate(zip(photos, starts, ends))],
             "frame_times": [float(t) for t in seconds], "frame_stage": frame_stage, "labels": labels,
             "distinct_frames": distinct}
    truth_path.write_text(json.dumps(truth, indent=2) + "\n")
    (out_dir / f"{name}_labels.jsonl").write_text(json.dumps({"id": name, "labels": labels,
                                                              "stages": frame_stage}) + "\n")
    (out_dir / f"{name}_record.jsonl").write_text(json.dumps({"id": name, "video": str(video.resolve()),
                                                              "action": action}) + "\n")
    return video


def _stage_plan(rng: random.Random) -> list[int]:
    """Stage index per frame, 2 to 6 frames; from 3 frames on, at least one change and one repeat."""
    count = rng.randint(2, 6)
    stages = rng.randint(1, 2) if count == 2 else rng.randint(2, count - 1)
    cuts = sorted(rng.sample(range(1, count), stages - 1))  # frames where a new stage starts
    return [sum(1 for c in cuts if c <= f) for f in range(count)]


def make_progress_sequences(out_dir: Path, n: int = 24, seed: int = 0, tune_share: float = 0.3) -> dict[str, Path]:
    """OUTDIR/sequences.jsonl, OUTDIR/sequences_labels.jsonl and the jpgs in OUTDIR/sequences/<id>/."""
    out_dir = Path(out_dir)
    _check_photos({p for photos in THEMES.values() for p in photos})
    rng = random.Random(f"progress-sequences:{seed}")
    records, truths = [], []
    for i in range(n):
        sid = f"seq{i:03d}"
        action = rng.choice(sorted(THEMES))
        plan = _stage_plan(rng)
        photos = rng.sample(THEMES[action], plan[-1] + 1)
        folder = out_dir / "sequences" / sid
        folder.mkdir(parents=True, exist_ok=True)
        frames = []
        for f, stage in enumerate(plan):
            path = folder / f"{f}.jpg"
            jittered(photos[stage], rng).save(path, quality=90)
            frames.append({"time": None, "path": str(path.resolve())})
        split = "tune" if rng.random() < tune_share else "measure"
        records.append({"id": sid, "frames": frames, "action": action, "source": SOURCE, "split": split})
        truths.append({"id": sid, "labels": adjacent_labels(plan), "stages": plan,
                       "photos": [photos[s] for s in plan]})
    paths = {"sequences": out_dir / "sequences.jsonl", "labels": out_dir / "sequences_labels.jsonl"}
    paths["sequences"].write_text("".join(json.dumps(r) + "\n" for r in records))
    paths["labels"].write_text("".join(json.dumps(t) + "\n" for t in truths))
    return paths


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "out/progress")
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    chosen = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    print(make_progress_sample(target, seed=chosen))
    for made in make_progress_sequences(target, count, chosen).values():
        print(made)
