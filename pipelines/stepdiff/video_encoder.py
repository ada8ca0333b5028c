"""Frozen video encoders: a clip's frames -> visual tokens (T', N, D); each model loaded once per process.

- `open_clip:REF` (REF as `vision.resolve_clip` takes it; `clip_arch` for a bare checkpoint), per frame:
  the ViT's last-layer patch tokens after `ln_post`, at the transformer's width (not the projection).
- `efficientnet-lite0` (embedded, offline), per frame: its last feature map, 1280 x 7 x 7 -> 49 tokens.
- `hf:FOLDER_OR_HUB_ID` (from the local cache only): a transformers video model (VideoMAE, TimeSformer,
  ViViT: AutoModel + its image processor) over the clip as one video; `last_hidden_state`, T' = 1.

`resolve_video_encoder` checks a reference without building anything (a missing model fails before any
record); `load_video_encoder` builds it; `info` describes it as JSON, from which
`load_video_encoder_from_info` builds it again (a feature store's encoder.json). The encoder classes
are in `video_encoders`. Frames are `frames`
uniform samples in the clip (`sample_times`), decoded at the encoder's size (`decode_size`); an image is
a clip of `frames` copies of itself.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from vi.core import media
from vi.core.devices import Placement
from vi.core.errors import ModelNotAvailable, RecordError, SetupError
from vi.core.models import vision
from vi.core.models.cache import load_once
from vi.core.models.sources import hub_snapshot
from vi.pipelines.stepdiff.describe import sample_times
from vi.pipelines.stepdiff.video_encoders import (EFFICIENTNET, HF, OPEN_CLIP, EfficientNetEncoder, HFVideoEncoder,
                                                  OpenClipEncoder, VideoEncoder)

DEFAULT_ENCODER = "open_clip:dfn5b-clip-vit-h-14"
PROCESSOR_FILE = "preprocessor_config.json"
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


@dataclass(frozen=True)
class EncoderSpec:
    """What `--encoder` resolved to, before anything is built. `ref` is the canonical name (paths made
    absolute), the one stored in `info` and in each record's `features.encoder`."""

    ref: str
    kind: str  # open_clip | efficientnet-lite0 | hf
    frames: int
    clip_arch: str | None = None
    clip: vision.ClipSource | None = None
    weights: Path | None = None  # EfficientNet-Lite0's state dict
    folder: Path | None = None  # the transformers model folder

    @property
    def identity(self) -> dict:
        """What a feature store must agree on before its tensors can be mixed with this encoder's."""
        return {"encoder": self.ref, "kind": self.kind, "clip_arch": self.clip_arch, "frames": self.frames}


def _absolute(ref: str) -> str:
    path = Path(ref).expanduser()
    return str(path.resolve()) if path.exists() else ref


def resolve_video_encoder(ref: str, clip_arch: str | None = None, frames: int = 8) -> EncoderSpec:
    """`--encoder` to an EncoderSpec; bad values raise ValueError, a missing model ModelNotAvailable."""
    if frames < 1:
        raise ValueError(f"--frames must be at least 1, got {frames}")
    kind, _, name = ref.partition(":")
    if clip_arch is not None and kind != OPEN_CLIP:
        raise ValueError("--clip-arch goes with --encoder open_clip:CHECKPOINT_FILE")
    if ref == EFFICIENTNET:
        return EncoderSpec(ref, EFFICIENTNET, frames, weights=vision.locate_imagenet_classifier())
    if kind == OPEN_CLIP and name:
        arch = _absolute(clip_arch) if clip_arch else None
        source = vision.resolve_clip(_absolute(name), arch)
        return EncoderSpec(f"{OPEN_CLIP}:{_absolute(name)}", OPEN_CLIP, frames, arch, clip=source)
    if kind == HF and name:
        folder = _hf_folder(ref, name)
        if not (folder / "config.json").is_file() or not (folder / PROCESSOR_FILE).is_file():
            raise ModelNotAvailable(f"video encoder {ref!r}: {folder} is not a transformers model folder with "
                                    f"config.json and {PROCESSOR_FILE}; download the whole repository")
        expected = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("num_frames")
        if isinstance(expected, int) and expected != frames:  # its position embeddings fix the count
            raise ValueError(f"--encoder {ref} takes {expected} frames per clip (its config's num_frames); "
                             f"give --frames {expected}")
        return EncoderSpec(f"{HF}:{_absolute(name)}", HF, frames, folder=folder)
    raise ModelNotAvailable(f"unknown video encoder {ref!r}: give open_clip:REF (a CLIP alias from `vi models`, "
                            f"a folder or checkpoint, hf-hub:org/name, or NAME:TAG), {EFFICIENTNET}, or "
                            "hf:FOLDER_OR_HUB_ID (a transformers video model)")


def _hf_folder(ref: str, name: str) -> Path:
    """A folder as given, or a hub id's snapshot in the local cache: nothing here downloads."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve()
    folder = hub_snapshot(name) if _HUB_ID.match(name) else None
    if folder is None:
        raise ModelNotAvailable(f"video encoder {ref!r}: {name} is neither a folder nor a hub id in the local "
                                f"Hugging Face cache; on a machine with internet run `hf download {name}` and "
                                "copy the cache here (or give the model's folder)")
    return folder


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
    return resolve_video_encoder(ref, clip_arch, frames)


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
