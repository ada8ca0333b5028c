"""Frozen video encoders: a clip's frames -> visual tokens (T', N, D); each model loaded once per process.

- `open_clip:REF` (REF as `vision.resolve_clip` takes it; `clip_arch` for a bare checkpoint), per frame:
  the ViT's last-layer patch tokens after `ln_post`, at the transformer's width (not the projection).
- `efficientnet-lite0` (embedded, offline), per frame: its last feature map, 1280 x 7 x 7 -> 49 tokens.
- `hf:FOLDER_OR_HUB_ID` (from the local cache only): a transformers video model (VideoMAE, TimeSformer,
  ViViT: AutoModel + its image processor) over the clip as one video; `last_hidden_state`, T' = 1.

`resolve_video_encoder` checks a reference without building anything (a missing model fails before any
record); `load_video_encoder` builds it; `info` describes it as JSON, from which
`load_video_encoder_from_info` builds it again (a feature store's encoder.json). Frames are `frames`
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
from vi.pipelines.common.frame_scorers import IMAGENET_RESIZE, ClipScorer, ScorerChoice, _autocast, decode_size, fit, to_tensor

OPEN_CLIP, EFFICIENTNET, HF = "open_clip", vision.IMAGENET_ARCH, "hf"
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


class VideoEncoder:
    """Base of the three kinds: `encode(clips)` turns uint8 frames (T, H, W, 3), T = `frames` (or 1 for an
    image), into float tensors (T', N, D) on the CPU, `batch_size` frames per forward pass."""

    per_frame = True  # frames encoded one by one (T' = T); else the whole clip at once (T' = 1)
    size: tuple[int, int] | None = None  # (height, width) the model takes
    mode = "shortest"

    def __init__(self, spec: EncoderSpec, placement: Placement):
        self.spec, self.placement = spec, placement
        self.tokens_per_frame, self.dim = 0, 0

    @property
    def info(self) -> dict:
        frames_out = self.spec.frames if self.per_frame else 1
        return {**self.spec.identity, "frames_out": frames_out, "tokens_per_frame": self.tokens_per_frame,
                "dim": self.dim, "input_size": list(self.size) if self.size else None}

    def decode_size(self, width: int, height: int) -> tuple[int, int]:
        return decode_size(width, height, self.size, self.mode) if self.size else (-1, -1)

    @staticmethod
    def load_model(spec: EncoderSpec, placement: Placement):
        raise NotImplementedError

    def _forward(self, frames: list[np.ndarray]):
        raise NotImplementedError

    def encode(self, clips: list[np.ndarray], batch_size: int = 64, dtype=None) -> list:
        import torch

        dtype = torch.float32 if dtype is None else dtype
        if not clips:
            return []
        if not self.per_frame:  # an image is a still video; clips go through the model together
            videos = [np.repeat(c, self.spec.frames, 0) if len(c) == 1 else c for c in clips]
            step = max(1, batch_size // self.spec.frames)
            return [t[None].to(dtype) for i in range(0, len(videos), step)
                    for t in self._forward(videos[i:i + step])]
        flat = [frame for clip in clips for frame in clip]  # an image is encoded once, then repeated
        tokens = torch.cat([self._forward(flat[i:i + batch_size]).to(dtype) for i in range(0, len(flat), batch_size)])
        out, at = [], 0
        for clip in clips:
            part = tokens[at:at + len(clip)]
            out.append(part.repeat(self.spec.frames, 1, 1) if len(clip) == 1 else part)
            at += len(clip)
        return out


class OpenClipEncoder(VideoEncoder):
    @staticmethod
    def load_model(spec: EncoderSpec, placement: Placement):
        return vision.load_clip(spec.clip, placement)

    def __init__(self, spec: EncoderSpec, placement: Placement):
        from open_clip.transformer import VisionTransformer

        super().__init__(spec, placement)
        self.scorer = ClipScorer(ScorerChoice(OPEN_CLIP, spec.ref, clip=spec.clip), placement, 1)  # its loader
        self.visual = self.scorer.clip.model.visual
        if not isinstance(self.visual, VisionTransformer) or self.visual.attn_pool is not None:
            raise SetupError(f"video encoder {spec.ref!r}: its image tower is a {type(self.visual).__name__}"
                             f"{' with attentional pooling' if isinstance(self.visual, VisionTransformer) else ''}, "
                             "not a plain ViT, so it has no patch tokens to store; choose a ViT CLIP model")
        self.size, self.mode = self.scorer.size, self.scorer.mode
        self.tokens_per_frame = self.visual.grid_size[0] * self.visual.grid_size[1]
        self.dim = self.visual.transformer.width

    def _forward(self, frames: list[np.ndarray]):
        import torch

        with torch.inference_mode(), _autocast(self.placement):
            x = torch.cat([self.scorer._pixels(f[None]) for f in frames])  # fit + normalise, as scoring does
            out = self.visual.forward_intermediates(x, indices=1, normalize_intermediates=True,
                                                    intermediates_only=True, output_fmt="NLC")
            return out["image_intermediates"][-1].float().cpu()  # ln_post(last block), class token dropped


class EfficientNetEncoder(VideoEncoder):
    mode = IMAGENET_RESIZE

    @staticmethod
    def load_model(spec: EncoderSpec, placement: Placement):
        return vision.load_imagenet_classifier(spec.weights, placement)

    def __init__(self, spec: EncoderSpec, placement: Placement):
        super().__init__(spec, placement)
        self.classifier = self.load_model(spec, placement)
        side = self.classifier.input_size
        self.size = (side, side)
        self.tokens_per_frame, self.dim = (side // 32) ** 2, self.classifier.model._conv_head.out_channels

    def _forward(self, frames: list[np.ndarray]):
        import torch

        with torch.inference_mode(), _autocast(self.placement):
            x = torch.cat([fit(to_tensor(f[None], self.placement), self.size, self.mode) for f in frames])
            maps = self.classifier.model.extract_features((x - 127.0) / 128.0)  # its training scaling
            return maps.flatten(2).transpose(1, 2).float().cpu()  # (B, 1280, 7, 7) -> (B, 49, 1280)


class HFVideoEncoder(VideoEncoder):
    per_frame = False

    @staticmethod
    def load_model(spec: EncoderSpec, placement: Placement):
        return load_once(("hf-video-encoder", spec.folder, placement), lambda: _load_hf(spec, placement))

    def __init__(self, spec: EncoderSpec, placement: Placement):
        super().__init__(spec, placement)
        self.processor, self.model = self.load_model(spec, placement)
        size = getattr(self.processor, "size", None) or {}
        if "shortest_edge" in size:
            self.size = (size["shortest_edge"],) * 2
        elif "height" in size and "width" in size:
            self.size, self.mode = (size["height"], size["width"]), "squash"
        blank = np.zeros((spec.frames, *(self.size or (224, 224)), 3), np.uint8)
        self.tokens_per_frame, self.dim = self._forward([blank])[0].shape  # what it makes, asked once

    def _forward(self, videos: list[np.ndarray]):
        import torch

        with torch.inference_mode(), _autocast(self.placement):
            inputs = self.processor([list(v) for v in videos], return_tensors="pt").to(self.placement.device)
            return self.model(**inputs).last_hidden_state.float().cpu()


def _load_hf(spec: EncoderSpec, placement: Placement):
    from transformers import AutoImageProcessor, AutoModel

    try:
        processor = AutoImageProcessor.from_pretrained(str(spec.folder), local_files_only=True)
        model = AutoModel.from_pretrained(str(spec.folder), local_files_only=True).to(placement.device)
    except Exception as exc:  # a truncated file, a model kind AutoModel does not know
        raise SetupError(f"video encoder {spec.ref!r} did not load from {spec.folder}: "
                         f"{type(exc).__name__}: {exc}") from exc
    return processor, model.eval()


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
