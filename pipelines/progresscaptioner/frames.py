"""`vi frames`: the frame sequence of a video, a clip, or a FrameCapEval entry.

The candidate frames come from the record's `video`, `image_files` or `frames`
(`frame_sources`). A video's frames are decoded with `core.media` and saved once, full size,
as JPEG at FRAMES_DIR/<id>/<time>.jpg, only for the frames kept: a file already there is kept
as it is (a rerun or a resume decodes nothing), and each is written to a temporary name and
renamed, so a reader never sees half a file. Window records of one video share its folder.

Then `select`: all of them; sliding windows, one record per window, id <id>/w<first>-<last>
with `parent` (`expand_windows`); or FrameCapEval's K-means construction (`frame_selection`).
Sequences are not refused here: a 1-frame record is kept (vi caption-frames refuses it) and
one longer than the 6 frames a captioner takes is kept too (vi caption-frames windows it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core import media
from vi.core.config import check_choices, internal, option
from vi.core.devices import Placement, resolve_placement
from vi.core.errors import RecordError
from vi.core.seeding import record_rng
from vi.pipelines.progresscaptioner import frame_selection
from vi.pipelines.progresscaptioner.frame_selection import EmbedderChoice, ImageEmbedder
from vi.pipelines.progresscaptioner.frame_sources import STAGE, Sequence, framecap_records, sequence_of

if TYPE_CHECKING:
    import numpy as np

__all__ = ["STAGE", "FramesConfig", "framecap_records", "expand_windows", "make_process"]
SELECT = ("all", "window", "kmeans")
WINDOW_MIN, WINDOW_MAX = 2, 6
DEFAULT_WINDOW, DEFAULT_STRIDE = 2, 1  # --select window's pairs of adjacent frames
JPEG_QUALITY = 90
DECODE_CHUNK = 256  # frames decoded per decord call at the encoder's size


@dataclass(frozen=True, kw_only=True)
class FramesConfig:
    """The options of `vi frames`, checked when built (a bad one fails before any record)."""

    select: str = option("all", choices=SELECT, help=(
        "all: every frame; window: --window frames every --stride frames, one record each (a last "
        "window ends on the last frame; a shorter sequence is one window); kmeans: FrameCapEval's "
        "construction: K-means over image features, K by silhouette score from 3, one frame per "
        "cluster in temporal order, plus the frame nearest in feature distance to a randomly chosen "
        "one (seeded by --seed and the id). Under 4 frames, kmeans keeps them all."))
    fps: float = option(1.0, help="Frames per second taken from a video, from the clip's start.")
    frames_dir: Path | None = option(None, help=(
        "Folder for a video's frames, saved once as DIR/<id>/<time>.jpg (an existing file is reused). "
        "Needed for video and clip records."))
    # window, stride, model and clip_arch are None when not given, so that giving one without the
    # --select it belongs to is refused; __post_init__ then fills in the defaults of the first three.
    window: int | None = option(None, help=f"With --select window: frames per window, {WINDOW_MIN} to "
                                           f"{WINDOW_MAX}; default {DEFAULT_WINDOW}.")
    stride: int | None = option(None, help="With --select window: frames from one window's start to the next; "
                                           f"default {DEFAULT_STRIDE}.")
    image_root: Path | None = option(None, help="The folder FrameCapEval's image_files paths start from.")
    source: str | None = option(None, help=(
        "The source dataset written to 'source' (default: from a --framecap file name, coin_*: "
        "COIN, htc_*: HTC)."))
    model: str | None = option(None, help=(
        "With --select kmeans, the image features: auto (dfn5b-clip-vit-h-14 when in the local hub "
        "cache, else efficientnet-lite0), efficientnet-lite0 (offline: its pooled last feature map), or "
        "a CLIP model as vi align-frames takes it: an alias, hf-hub:org/name, an open_clip NAME:TAG, a "
        "folder with open_clip_config.json, or a checkpoint file with --clip-arch; default auto."))
    clip_arch: str | None = option(None, help=(
        "The architecture of a --model checkpoint file: an open_clip model name or a config .json."))
    max_frames: int = option(6, help=(
        "With --select kmeans: most frames kept, near-duplicate included, so K <= max-frames - 1. "
        "The release's sequences have at most 6; 7 allows the paper's full K range 3..6."))
    batch_size: int = option(32, help="Frames per image-encoder call (kmeans).")
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0
    embedder: EmbedderChoice | None = internal(init=False, default=None)
    placement: Placement | None = internal(init=False, default=None)

    def __post_init__(self) -> None:
        if self.select != "window" and (self.window is not None or self.stride is not None):
            raise ValueError("--window and --stride go with --select window")
        if self.select != "kmeans" and (self.model is not None or self.clip_arch is not None):
            raise ValueError("--model and --clip-arch choose the image features of --select kmeans")
        for name, default in (("window", DEFAULT_WINDOW), ("stride", DEFAULT_STRIDE), ("model", "auto")):
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        check_choices(self)
        if not (math.isfinite(self.fps) and self.fps > 0):
            raise ValueError(f"--fps must be a positive number of frames per second, got {self.fps}")
        if not WINDOW_MIN <= self.window <= WINDOW_MAX:
            raise ValueError(f"--window {self.window}: a window holds {WINDOW_MIN} to {WINDOW_MAX} frames "
                             "(what progress-aware captioners take)")
        if self.stride < 1:
            raise ValueError(f"--stride must be at least 1 frame, got {self.stride}")
        if not frame_selection.K_MIN + 1 <= self.max_frames <= frame_selection.K_MAX + 1:
            raise ValueError(f"--max-frames {self.max_frames}: K-means keeps K frames plus one, K from "
                             f"{frame_selection.K_MIN}, so give {frame_selection.K_MIN + 1} to "
                             f"{frame_selection.K_MAX + 1}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be at least 1, got {self.batch_size}")
        for name, folder in (("--frames-dir", self.frames_dir), ("--image-root", self.image_root)):
            if folder is not None and folder.exists() and not folder.is_dir():
                raise ValueError(f"{name} {folder} exists and is not a folder")
        if self.image_root is not None and not self.image_root.is_dir():
            raise ValueError(f"--image-root {self.image_root} is not a folder")
        if self.select == "kmeans":
            object.__setattr__(self, "placement", resolve_placement(self.device, self.dtype, engine="torch"))
            object.__setattr__(self, "embedder", frame_selection.resolve_embedder(self.model, self.clip_arch))


_embedders: dict = {}


def embedder_for(config: FramesConfig) -> ImageEmbedder:
    key = (config.embedder, config.placement, config.batch_size)
    if key not in _embedders:
        _embedders[key] = ImageEmbedder(config.embedder, config.placement, config.batch_size)
    return _embedders[key]


# --- decoding and saving ----------------------------------------------------------------------

def materialise(seq: Sequence, indices: list[int]) -> list[dict]:
    """[{time, path}] for the chosen frames; a video's are decoded and saved unless already there."""
    if seq.video is not None:
        todo = [i for i in indices if not seq.paths[i].is_file()]
        for start in range(0, len(todo), DECODE_CHUNK):
            part = todo[start:start + DECODE_CHUNK]
            for i, image in zip(part, media.read_frames(seq.video, [seq.times[i] for i in part])):
                media.save_jpeg(image, seq.paths[i], JPEG_QUALITY)
    return [{"time": seq.times[i], "path": str(seq.paths[i].resolve())} for i in indices]


def _image(path: Path) -> np.ndarray:
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except (OSError, UnidentifiedImageError) as exc:
        raise RecordError("unreadable_media", f"{path}: not a readable image ({exc})") from None


def features_of(seq: Sequence, embedder: ImageEmbedder) -> np.ndarray:
    import numpy as np

    if seq.video is not None:  # decoded small, at the encoder's size; saved frames come later
        width, height = embedder.decode_size(*seq.size)
        return np.concatenate([embedder.encode(media.read_frames(seq.video, seq.times[s:s + DECODE_CHUNK],
                                                                 width, height))
                               for s in range(0, len(seq), DECODE_CHUNK)])
    return np.concatenate([embedder.encode(_image(p)[None]) for p in seq.paths])  # sizes differ


# --- the stage --------------------------------------------------------------------------------

def _sequence(record: dict, config: FramesConfig) -> Sequence:
    return sequence_of(record, fps=config.fps, frames_dir=config.frames_dir, image_root=config.image_root,
                       folder_id=record["id"])


def _described(record: dict, config: FramesConfig) -> dict:
    action = next((record[k] for k in ("action", "action_label", "keystep") if record.get(k) is not None), None)
    return {"action": action, "source": record.get("source") or config.source}


def select_record(record: dict, config: FramesConfig) -> dict:
    """The fields of --select all or kmeans (and of a window record that did not fan out)."""
    seq = _sequence(record, config)
    fps = config.fps if seq.video is not None else None
    if config.select == "kmeans":
        feats = features_of(seq, embedder_for(config))
        choice = frame_selection.kmeans_selection(feats, seed=config.seed, max_frames=config.max_frames,
                                                  rng=record_rng(config.seed, record["id"]))
        selected = {"method": "kmeans", "fps": fps, "model": config.embedder.name, "candidates": len(seq),
                    **choice.as_fields()}
        indices = choice.indices
    else:
        indices = list(range(len(seq)))
        selected = {"method": config.select, "fps": fps, "count": len(seq)}
        if config.select == "window":
            selected.update(window=config.window, stride=config.stride, first=0, last=len(seq) - 1, of=len(seq))
    return {"frames": materialise(seq, indices), **_described(record, config), "frame_select": selected}


def expand_windows(records, config: FramesConfig, pending: dict):
    """Each record as one record per window, id <id>/w<first>-<last>; `pending` tells `process`
    which window a child id is. A record whose frames cannot be listed goes on whole, and
    `process` turns it into the error record naming why."""
    for record in records:
        if record.get("errors"):
            yield record
            continue
        try:
            seq = _sequence(record, config)
        except RecordError:
            yield record
            continue
        for first, last in frame_selection.window_bounds(len(seq), config.window, config.stride):
            child = {**record, "id": f"{record['id']}/w{first}-{last}"}
            pending[child["id"]] = (record["id"], seq, first, last)
            yield child


def window_record(record: dict, config: FramesConfig, parent: object, seq: Sequence, first: int,
                  last: int) -> dict:
    selected = {"method": "window", "fps": config.fps if seq.video is not None else None,
                "window": config.window, "stride": config.stride, "first": first, "last": last, "of": len(seq)}
    return {"frames": materialise(seq, list(range(first, last + 1))), **_described(record, config),
            "frame_select": selected, "parent": parent}


def make_process(config: FramesConfig, pending: dict):
    def process(record: dict) -> dict:
        window = pending.pop(record["id"], None)
        if window is not None:
            return window_record(record, config, *window)
        return select_record(record, config)
    return process
