"""`vi align-frames`: one representative frame per step (ShowHowTo, CVPR 2025, Sec. 3.1, step 4).

Each step's candidates are the frames at `fps` inside [start - eps, end + eps], clipped to
the video. Only frames some step needs are decoded, each distinct one once per video, at the
size the encoder takes (see `frame_scorers`), and each is encoded once. Then one frame per
step is chosen by an exact dynamic programme (`order_preserving_choice`): the best total
text-frame score with strictly increasing frame times, so the chosen frames keep the steps'
order even where their widened windows overlap.

When not every step can get its own later frame (too few candidates, or a step whose window
lies outside the video), the programme first maximises how many steps get a frame, then the
total score; the others get `frame: null`.

With `frames_dir`, the chosen frames are decoded again at the video's own resolution (n steps
frames, not the candidates) and saved as JPEG (quality 90) at DIR/<id>/<step:02d>.jpg, each
written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core import media
from vi.core.devices import Placement, resolve_placement
from vi.core.errors import RecordError
from vi.core.config import internal, option
from vi.core.models.catalog import DEFAULT_TEXT_EMBEDDING
from vi.core.paths import safe_name
from vi.core.records import finite_number
from vi.core.stream import RecordStage
from vi.pipelines.common import frame_scorers
from vi.pipelines.common.frame_scorers import ScorerChoice

if TYPE_CHECKING:
    import numpy as np

STAGE = "align-frames"
DECODE_CHUNK = 256  # frames decoded per decord call: 256 x 224 x 224 x 3 bytes = 38 MB
JPEG_QUALITY = 90


@dataclass(frozen=True, kw_only=True)
class AlignConfig:
    """The options of `vi align-frames`, checked when built (a bad one fails before any record)."""

    model: str = option("auto", help=(
        "auto (dfn5b-clip-vit-h-14 when it is in the local hub cache, else imagenet-labels), "
        "imagenet-labels (EfficientNet-Lite0's top-5 ImageNet labels vs the step, offline), "
        "random (the baseline), or a CLIP model: an alias, hf-hub:org/name, an open_clip "
        "NAME:TAG (ViT-B-32:openai) in the local cache, a folder with open_clip_config.json, or "
        "a checkpoint file with --clip-arch."))
    clip_arch: str | None = option(None, help=(
        "The architecture of a --model checkpoint file: an open_clip model name (ViT-B-32) "
        "or a model config .json."))
    fps: float = option(1.0, help="Candidate frames per second of video.")
    eps: float = option(15.0, help="Seconds each step's interval is widened by on both sides (ShowHowTo: 15).")
    frames_dir: Path | None = option(None, help="Also save each chosen frame, full size, as DIR/<id>/<step:02d>.jpg.")
    batch_size: int = option(32, help="Frames (or texts) per encoder call.")
    text_model: str = internal(DEFAULT_TEXT_EMBEDDING)  # embeds step texts and ImageNet labels for the label scorer
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0
    placement: Placement = internal(init=False)
    scorer: ScorerChoice = internal(init=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fps) and self.fps > 0):
            raise ValueError(f"--fps must be a positive number of frames per second, got {self.fps}")
        if not (math.isfinite(self.eps) and self.eps >= 0):
            raise ValueError(f"--eps must be zero or more seconds, got {self.eps}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.frames_dir is not None and self.frames_dir.exists() and not self.frames_dir.is_dir():
            raise ValueError(f"--frames-dir {self.frames_dir} exists and is not a folder")
        object.__setattr__(self, "placement", resolve_placement(self.device, self.dtype, engine="torch"))
        object.__setattr__(self, "scorer", frame_scorers.resolve_scorer(self.model, self.clip_arch,
                                                                        self.text_model))


@functools.lru_cache(maxsize=4)
def scorer_for(choice: ScorerChoice, placement: Placement, batch_size: int) -> frame_scorers.FrameScorer:
    return frame_scorers.make_scorer(choice, placement, batch_size)


# --- the choice ---------------------------------------------------------------------------

def order_preserving_choice(candidates: list[list[tuple[float, float]]]) -> list[int | None]:
    """For each step, the index of its chosen (time, score) candidate, or None.

    Maximises (number of steps with a frame, total score), lexicographically, subject to the
    chosen times strictly increasing with the step index. Exact: a dynamic programme over
    steps x distinct times, O(steps x (times + candidates)).

    best[j] is the best value of the steps seen so far using only times before times[j]; a
    step either keeps best[j] (no frame) or takes a candidate at time index c < j on top of
    best[c]. Ties go to leaving the step out, then to the earliest time.
    """
    times = sorted({t for options in candidates for t, _ in options})
    where = {t: j for j, t in enumerate(times)}
    size = len(times) + 1
    best: list[tuple[int, float]] = [(0, 0.0)] * size
    came_from: list[list[int | None]] = []  # per step and j: the candidate taken, or None
    for options in candidates:
        gain: list[tuple[tuple[int, float], int] | None] = [None] * size
        for index, (t, score) in enumerate(options):
            c = where[t]
            value = (best[c][0] + 1, best[c][1] + score)
            if gain[c + 1] is None or value > gain[c + 1][0]:
                gain[c + 1] = (value, index)
        new, source = list(best), [None] * size
        running: tuple[tuple[int, float], int] | None = None
        for j in range(size):
            if gain[j] is not None and (running is None or gain[j][0] > running[0]):
                running = gain[j]
            if running is not None and running[0] > new[j]:
                new[j], source[j] = running[0], running[1]
        best = new
        came_from.append(source)
    chosen: list[int | None] = [None] * len(candidates)
    j = size - 1
    for step in range(len(candidates) - 1, -1, -1):
        index = came_from[step][j]
        if index is not None:
            chosen[step] = index
            j = where[candidates[step][index][0]]  # earlier steps use times before this one
    return chosen


def candidate_times(start: float, end: float, fps: float, eps: float, duration: float) -> list[float]:
    """Times k / fps inside [start - eps, end + eps] and inside the video, [0, duration)."""
    first = max(0, math.ceil((start - eps) * fps - 1e-9))
    last = min(math.floor((end + eps) * fps + 1e-9), math.ceil(duration * fps - 1e-9) - 1)
    return [round(k / fps, 6) for k in range(first, last + 1)]


def candidate_windows(items: list[dict], fps: float, eps: float, duration: float
                      ) -> tuple[list[list[float]], list[float]]:
    """Each step's candidate times, and their union in order: the frames to decode."""
    windows = [candidate_times(float(item["start"]), float(item["end"]), fps, eps, duration) for item in items]
    return windows, sorted({t for window in windows for t in window})


# --- reading a record ---------------------------------------------------------------------

def parse_steps(record: dict) -> list[dict]:
    """The step items, checked: each has a text and numeric start <= end."""
    steps = record.get("steps")
    if not isinstance(steps, dict) or not isinstance(steps.get("items"), list):
        raise RecordError("missing_field", "the record has no 'steps' object with an 'items' list "
                          "({title, items: [{text, start, end}]}); run vi extract-steps first")
    items = steps["items"]
    if not items:
        raise RecordError("missing_field", "'steps.items' is empty: there is nothing to align; drop "
                          "the record or re-run vi extract-steps on it")
    for i, item in enumerate(items):
        where = f"steps.items[{i}]"
        if not isinstance(item, dict):
            raise RecordError("bad_field", f"{where} is {type(item).__name__}, not an object {{text, start, end}}")
        for key in ("start", "end"):
            if key not in item:
                raise RecordError("missing_field", f"{where} has no '{key}' (seconds); every step needs "
                                  "start and end")
            if finite_number(item[key]) is None:
                raise RecordError("bad_field", f"{where}.{key} is {item[key]!r}, not a number of seconds")
        if item["start"] > item["end"]:
            raise RecordError("bad_field", f"{where} starts at {item['start']} s, after its end "
                              f"{item['end']} s; fix or drop the step")
        if not isinstance(item.get("text"), str):
            raise RecordError("missing_field", f"{where} has no 'text' string to match frames with")
    return items


def video_geometry(record: dict) -> tuple[Path, float, int, int]:
    """(video path, duration, width, height): from the record where vi probe put them."""
    video = record.get("video")
    if not isinstance(video, str) or not video:
        raise RecordError("missing_field", "the record has no 'video' path; run vi probe on the videos first")
    path = media.check_readable(video)
    duration, width, height = record.get("duration"), record.get("width"), record.get("height")
    if duration is not None and not (finite_number(duration) is not None and duration > 0):
        raise RecordError("bad_field", f"'duration' is {duration!r}, not a positive number of seconds; "
                          "drop it (vi reads the video's) or re-run vi probe")
    if duration is None or not (finite_number(width) is not None and finite_number(height) is not None
                                 and width > 0 and height > 0):
        info = media.probe(path)
        if not info.has_video:
            raise RecordError("unreadable_media", f"{path}: has no video stream, so no frames to align")
        duration = duration if duration is not None else info.duration
        width, height = info.width, info.height
    return path, float(duration), int(width), int(height)


# --- the stage ----------------------------------------------------------------------------

def encode_video_frames(scorer, path: Path, times: list[float], width: int, height: int) -> np.ndarray:
    """Features of the frames at `times`: each decoded once, at the scorer's size, and encoded once."""
    import numpy as np

    if not scorer.needs_pixels:
        return scorer.encode_frames(np.zeros((len(times), 0, 0, 3), np.uint8))
    decode_w, decode_h = scorer.decode_size(width, height)
    parts = []
    for start in range(0, len(times), DECODE_CHUNK):
        frames = media.read_frames(path, times[start:start + DECODE_CHUNK], decode_w, decode_h)
        parts.append(scorer.encode_frames(frames))
    return np.concatenate(parts)


def align_record(record: dict, config: AlignConfig) -> dict:
    items = parse_steps(record)
    path, duration, width, height = video_geometry(record)
    # Past the last frame every time decodes to that same frame: never a candidate.
    duration = min(duration, media.video_span(path))
    windows, times = candidate_windows(items, config.fps, config.eps, duration)
    scorer = scorer_for(config.scorer, config.placement, config.batch_size).for_record(config.seed, record["id"])
    chosen: list[int | None] = [None] * len(items)
    scores: list[list[tuple[float, float]]] = [[] for _ in items]
    if times:
        frame_feats = encode_video_frames(scorer, path, times, width, height)
        similarity = scorer.similarity(scorer.encode_texts([item["text"] for item in items]), frame_feats)
        column = {t: k for k, t in enumerate(times)}
        scores = [[(t, float(similarity[i, column[t]])) for t in window] for i, window in enumerate(windows)]
        chosen = order_preserving_choice(scores)
    frames = [None if index is None else {"time": scores[i][index][0], "score": round(scores[i][index][1], 6)}
              for i, index in enumerate(chosen)]
    if config.frames_dir is not None:
        save_frames(path, frames, config.frames_dir / safe_name(record["id"]))
    steps = dict(record["steps"])
    steps["items"] = [{**item, "frame": frame} for item, frame in zip(items, frames)]
    return {"steps": steps,
            "alignment": {"model": config.scorer.name, "fps": config.fps, "eps": config.eps,
                          "candidates": len(times), "unaligned": sum(f is None for f in frames)}}


def save_frames(path: Path, frames: list[dict | None], folder: Path) -> None:
    """Decode the chosen frames at full size and write each as DIR/<step:02d>.jpg, atomically."""
    wanted = [(i, frame) for i, frame in enumerate(frames) if frame is not None]
    if not wanted:
        return
    pixels = media.read_frames(path, [frame["time"] for _, frame in wanted])
    folder.mkdir(parents=True, exist_ok=True)
    for (i, frame), image in zip(wanted, pixels):
        target = folder / f"{i:02d}.jpg"
        media.save_jpeg(image, target, JPEG_QUALITY)
        frame["path"] = str(target.resolve())


ALIGN_FRAMES = RecordStage(
    STAGE,
    reads="[cyan]video[/cyan], [cyan]steps[/cyan] = {title, items: [{text, start, end}]} (from vi "
          "extract-steps), and [cyan]duration[/cyan], [cyan]width[/cyan], [cyan]height[/cyan] when "
          "vi probe set them.",
    writes="[cyan]steps[/cyan] with [cyan]frame[/cyan] = {time, score[, path]} or null added to each "
           "item (every other key kept), and [cyan]alignment[/cyan] = {model, fps, eps, candidates, "
           "unaligned}.",
    example="vi align-frames -i steps.jsonl --frames-dir frames/ -o aligned.jsonl",
    config=AlignConfig, fields=("steps", "alignment"), process=align_record)
