"""The three kinds of frozen video encoder `vi.pipelines.stepdiff.video_encoder` builds, and the
`EncoderSpec` (what `--encoder` resolved to) each is built from.

Each turns uint8 frames (T, H, W, 3) into float tokens (T', N, D) on the CPU: `OpenClipEncoder` (a
ViT's last-layer patch tokens per frame), `EfficientNetEncoder` (the embedded EfficientNet-Lite0's
7x7 feature map per frame) and `HFVideoEncoder` (a transformers video model over the whole clip).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vi.core.devices import Placement
from vi.core.errors import SetupError
from vi.core.models import vision
from vi.core.models.cache import load_once
from vi.core.models.video_encoder import OPEN_CLIP, EncoderSpec
from vi.pipelines.common.frame_scorers import (IMAGENET_RESIZE, ClipScorer, ScorerChoice, _autocast, decode_size,
                                               fit, to_tensor)

if TYPE_CHECKING:  # numpy, like torch, is imported where frames are encoded
    import numpy as np


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
        import numpy as np
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
        import numpy as np

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
