"""Frozen video encoders: a clip's frames -> visual tokens (T', N, D); each model loaded once per process.

- `open_clip:REF` (REF as `vision.resolve_clip` takes it; `clip_arch` for a bare checkpoint), per frame:
  the ViT's last-layer patch tokens after `ln_post`, at the transformer's width (not the projection).
- `efficientnet-lite0` (embedded, offline), per frame: its last feature map, 1280 x 7 x 7 -> 49 tokens.
- `hf:FOLDER_OR_HUB_ID` (from the local cache only): a transformers video model (VideoMAE, TimeSformer,
  ViViT: AutoModel + its image processor) over the clip as one video; `last_hidden_state`, T' = 1.

`resolve(ref, "video-encoder")` (core/models/video_encoder.py) checks a reference without building anything
(a missing model fails before any record); `load_video_encoder` builds it; `info` describes it as JSON, from
which `load_video_encoder_from_info` builds it again (a feature store's encoder.json). The encoder classes
are in `video_encoder_archs`, which imports nothing from here. Frames are `frames`
uniform samples in the clip (`sample_times`), decoded at the encoder's size (`decode_size`); an image is
a clip of `frames` copies of itself.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core import media
from vi.core.devices import Placement
from vi.core.errors import RecordError, SetupError
from vi.core.models.cache import load_once
from vi.core.models.resolve import resolve
from vi.core.models.video_encoder import EFFICIENTNET, HF, OPEN_CLIP, EncoderSpec
from vi.pipelines.stepdiff.describe import sample_times
from vi.pipelines.stepdiff.video_encoder_archs import (EfficientNetEncoder, HFVideoEncoder, OpenClipEncoder,
                                                       VideoEncoder)

if TYPE_CHECKING:
    import numpy as np

_KINDS = {OPEN_CLIP: OpenClipEncoder, EFFICIENTNET: EfficientNetEncoder, HF: HFVideoEncoder}


def load_video_encoder(spec: EncoderSpec, placement: Placement) -> VideoEncoder:
    """The encoder `spec` names, built once per process (its model too, under its own key: shared with the
    stages that score frames with the same model)."""
    kind = _KINDS[spec.kind]
    kind.load_model(spec, placement)
    return load_once(("video-encoder", spec, placement), lambda: kind(spec, placement))


def load_video_encoder_from_info(info: dict, placement: Placement) -> VideoEncoder:
    """The encoder an `info` dict (a feature store's encoder.json) describes, checked to make the same shapes;
    cheap to call again with the same info."""
    encoder = load_video_encoder(_resolve_once(info["encoder"], info.get("clip_arch"), info["frames"]), placement)
    made = {k: encoder.info[k] for k in ("frames_out", "tokens_per_frame", "dim")}
    if any(info.get(k, v) != v for k, v in made.items()):
        raise SetupError(f"video encoder {info['encoder']!r} now makes tokens {made}, not the stored "
                         f"{ {k: info.get(k) for k in made} }; the model files changed since the store was written")
    return encoder


@functools.lru_cache(maxsize=16)
def _resolve_once(ref: str, clip_arch: str | None, frames: int) -> EncoderSpec:
    return resolve(ref, "video-encoder", clip_arch=clip_arch, frames=frames)


# --- one clip, for callers outside a stage --------------------------------------------------------

def clip_frames(encoder: VideoEncoder, path: str | Path, start: float | None = None, end: float | None = None,
                info: media.MediaInfo | None = None) -> np.ndarray:
    """The clip's `frames` frames, sampled uniformly in [start, end] (the whole video where both are None)."""
    info = info or media.probe(path)
    if not info.has_video:
        raise RecordError("unreadable_media", f"{path}: has no video stream")
    start = 0.0 if start is None else start
    end = media.video_span(path) if end is None else end
    if not 0 <= start < end:
        raise RecordError("bad_interval", f"{path}: start {start} s must be >= 0 and before end {end} s")
    times = sample_times(start, end, encoder.spec.frames)
    width, height = encoder.decode_size(info.width or 0, info.height or 0)
    try:
        return media.read_frames(path, times, width, height)
    except RecordError:
        if width < 0:
            raise
        # decord's scaler fails at a few small widths (16, 24, 48, 72 px: "The size must exactly match");
        # at the native size the encoder's own resize does the work instead
        return media.read_frames(path, times)


def image_frames(path: str | Path) -> np.ndarray:
    """An image as one RGB frame (1, H, W, 3); the encoder resizes it."""
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    p = media.check_readable(path)
    try:
        with Image.open(p) as image:
            return np.asarray(image.convert("RGB"))[None]
    except (UnidentifiedImageError, OSError) as exc:
        raise RecordError("unreadable_media", f"{p}: not a readable image ({exc})") from None


def encode_video(encoder: VideoEncoder, path: str | Path, start: float | None = None, end: float | None = None):
    return encoder.encode([clip_frames(encoder, path, start, end)])[0]


def encode_image(encoder: VideoEncoder, path: str | Path):
    return encoder.encode([image_frames(path)])[0]
