"""Text-frame similarity for `vi align-frames`: three scorers with one interface.

    encode_frames(frames uint8 (N, H, W, 3)) -> features (N, ...)
    encode_texts(texts) -> features (T, ...)
    similarity(text_features, frame_features) -> (T, N)

- `ClipScorer`: open_clip cosine similarity (ShowHowTo used DFN5B-CLIP ViT-H/14).
- `ImageNetLabelScorer`, the offline default: EfficientNet-Lite0's top-5 ImageNet classes
  per frame, each class name embedded once with a sentence embedder; a step scores a frame
  by sum_k p_k cos(label_k, step), p renormalised over the top 5. It sees only what ImageNet
  names (fruit, animals, balls, tools), but it runs anywhere `make install` has run.
- `RandomScorer`: uniform scores from (seed, record id), the baseline.

Frames arrive already decoded at `decode_size(width, height)`, so decord's scaler does the
resize once, at decode time; a scorer only crops or pads what is left and normalises.
Model calls are batched (`batch_size`), under `torch.inference_mode`, with autocast where
the placement's dtype is bf16/fp16 (weights stay fp32: open_clip's `amp` precision).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.devices import Placement
from vi.core.errors import ModelNotAvailable
from vi.core.models import get_spec, load_once, text_embedding, vision
from vi.core.models.catalog import DEFAULT_CLIP, DEFAULT_IMAGE_CLASSIFIER, DEFAULT_TEXT_EMBEDDING
from vi.core.models.resolve import resolve
from vi.core.progress import log
from vi.core.seeding import record_rng

if TYPE_CHECKING:  # numpy, like torch, is imported where a scorer runs, not by --help
    import numpy as np

TOP_K = 5
LABEL_TEMPLATE = "a photo of a {}."  # CLIP's prompt; it helps MiniLM place a bare noun too
# Shorter side to 224, then the centre square: ImageNet's evaluation crop, which recognised
# the bundled samples' photos better than squashing the whole 16:9 frame (see align_quality).
IMAGENET_RESIZE = "shortest"
LABEL_SCORER = "imagenet-labels"
LABEL_ALIASES = (LABEL_SCORER, vision.IMAGENET_ARCH)
RANDOM = "random"


@dataclass(frozen=True)
class ScorerChoice:
    """What `--model` resolved to, before anything is loaded."""

    kind: str  # clip | imagenet-labels | random
    name: str  # written to each record's `alignment.model`
    clip: vision.ClipSource | None = None
    classifier: Path | None = None
    embedder: text_embedding.EmbedderFiles | None = None


def resolve_scorer(model: str, clip_arch: str | None = None, text_model: str = DEFAULT_TEXT_EMBEDDING) -> ScorerChoice:
    """`--model` to a ScorerChoice; a missing model raises ModelNotAvailable now."""
    if model == "auto":
        spec = get_spec(DEFAULT_CLIP)
        if spec is not None and spec.available():
            log.info("align-frames: --model auto uses %s from the local hub cache; "
                     "--model %s runs the small offline scorer instead", DEFAULT_CLIP, LABEL_SCORER)
            return resolve_scorer(DEFAULT_CLIP, clip_arch, text_model)
        fetch = spec.install if spec is not None else DEFAULT_CLIP
        log.info("align-frames: --model auto uses %s (EfficientNet-Lite0 ImageNet labels embedded "
                 "with %s): %s, ShowHowTo's aligner, is not in the local hub cache (`%s` on a "
                 "connected machine, then --model auto uses it; --model %s silences this)",
                 LABEL_SCORER, text_model, DEFAULT_CLIP, fetch, LABEL_SCORER)
        model = LABEL_SCORER
    if model == RANDOM:
        return ScorerChoice(RANDOM, RANDOM)
    if model in LABEL_ALIASES:
        return ScorerChoice(LABEL_SCORER, f"{LABEL_SCORER}:{vision.IMAGENET_ARCH}+{text_model}",
                            classifier=resolve(DEFAULT_IMAGE_CLASSIFIER, "image-classifier"),
                            embedder=resolve(text_model, "text-embedding"))
    if clip_arch is not None and not Path(model).expanduser().is_file():
        raise ValueError("--clip-arch goes with --model PATH_TO_CHECKPOINT; other models name "
                         "their architecture themselves")
    return ScorerChoice("clip", model, clip=resolve(model, "clip", arch=clip_arch))


def _autocast(placement: Placement):
    import torch

    dtype = placement.torch_dtype()
    return torch.autocast(placement.kind, dtype=dtype, enabled=dtype in (torch.float16, torch.bfloat16))


def _batches(count: int, size: int):
    for start in range(0, count, size):
        yield slice(start, min(count, start + size))


# --- frame geometry: decord resizes at decode time, the encoder crops or pads what is left ---

def decode_size(width: int, height: int, size: tuple[int, int], mode: str) -> tuple[int, int]:
    """(width, height) to decode a width x height video at, for an encoder input `size`
    (height, width) reached by `mode`: squash (resize to it), shortest (cover it, then crop
    the centre) or longest (fit inside it, then pad)."""
    out_h, out_w = size
    if mode == "squash":
        return out_w, out_h
    scale = (max if mode == "shortest" else min)(out_w / width, out_h / height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def to_tensor(frames: np.ndarray, placement: Placement):
    """uint8 (N, H, W, 3) -> float (N, 3, H, W) on the placement's device, values 0-255."""
    import numpy as np
    import torch

    if not (frames.flags.writeable and frames.flags.c_contiguous):  # torch wants to own writable memory
        frames = np.array(frames)
    x = torch.from_numpy(frames).to(placement.device)
    return x.permute(0, 3, 1, 2).float()


def fit(x, size: tuple[int, int], mode: str, fill: float = 0.0):
    """Frames (N, 3, H, W) to exactly `size` (height, width) the way `mode` says."""
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    out_h, out_w = size
    height, width = x.shape[-2:]
    if (height, width) == (out_h, out_w):
        return x
    if mode == "squash":
        return F.resize(x, [out_h, out_w], InterpolationMode.BICUBIC, antialias=True)
    scale = (max if mode == "shortest" else min)(out_w / width, out_h / height)
    new = [max(1, round(height * scale)), max(1, round(width * scale))]
    if new != [height, width]:  # decoded at another size than decode_size asked (a test, a caller)
        x = F.resize(x, new, InterpolationMode.BICUBIC, antialias=True)
    if mode == "shortest":
        return F.center_crop(x, [out_h, out_w])
    pad_w, pad_h = out_w - x.shape[-1], out_h - x.shape[-2]
    return F.pad(x, [pad_w // 2, pad_h // 2, pad_w - pad_w // 2, pad_h - pad_h // 2], fill=fill)


class ClipScorer:
    needs_pixels = True

    def __init__(self, choice: ScorerChoice, placement: Placement, batch_size: int):
        self.name = choice.name
        self.clip = vision.load_clip(choice.clip, placement)
        self.placement, self.batch_size = placement, batch_size
        size = self.clip.preprocess["size"]
        self.size = (size, size) if isinstance(size, int) else tuple(size)  # (height, width)
        self.mode = self.clip.preprocess.get("resize_mode", "shortest")

    def for_record(self, seed: int, record_id: object) -> ClipScorer:
        return self

    def decode_size(self, width: int, height: int) -> tuple[int, int]:
        return decode_size(width, height, self.size, self.mode)

    def _pixels(self, frames: np.ndarray):
        from torchvision.transforms.v2 import functional as F

        cfg = self.clip.preprocess
        x = fit(to_tensor(frames, self.placement).div_(255), self.size, self.mode, cfg.get("fill_color", 0) / 255)
        return F.normalize(x.clamp_(0, 1), list(cfg["mean"]), list(cfg["std"]))

    def encode_frames(self, frames: np.ndarray) -> np.ndarray:
        import numpy as np
        import torch

        out = []
        with torch.inference_mode(), _autocast(self.placement):
            for part in _batches(len(frames), self.batch_size):
                feats = self.clip.model.encode_image(self._pixels(frames[part]), normalize=True)
                out.append(feats.float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        import numpy as np
        import torch

        out = []
        with torch.inference_mode(), _autocast(self.placement):
            for part in _batches(len(texts), self.batch_size):
                tokens = self.clip.tokenizer(texts[part]).to(self.placement.device)
                out.append(self.clip.model.encode_text(tokens, normalize=True).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    def similarity(self, text_feats: np.ndarray, frame_feats: np.ndarray) -> np.ndarray:
        return text_feats @ frame_feats.T


class ImageNetLabelScorer:
    needs_pixels = True

    def __init__(self, choice: ScorerChoice, placement: Placement, batch_size: int):
        self.name = choice.name
        self.classifier = vision.load_imagenet_classifier(choice.classifier, placement)
        self.embedder = text_embedding.load_text_embedder(choice.embedder.folder, placement)
        self.placement, self.batch_size = placement, batch_size
        self.size = (self.classifier.input_size, self.classifier.input_size)
        labels = [LABEL_TEMPLATE.format(name) for name in label_names()]
        # Once per process: 1,000 sentences take a few seconds on a CPU.
        self.label_embeddings = load_once(("imagenet-label-embeddings", choice.embedder, placement,
                                           LABEL_TEMPLATE), lambda: self.embedder.encode(labels, 128))

    def for_record(self, seed: int, record_id: object) -> ImageNetLabelScorer:
        return self

    def decode_size(self, width: int, height: int) -> tuple[int, int]:
        return decode_size(width, height, self.size, IMAGENET_RESIZE)

    def encode_frames(self, frames: np.ndarray) -> np.ndarray:
        """(N, 1000): the top-k class probabilities renormalised to sum to 1, zeros elsewhere."""
        import numpy as np
        import torch

        out = np.zeros((len(frames), len(self.classifier.categories)), np.float32)
        with torch.inference_mode(), _autocast(self.placement):
            for part in _batches(len(frames), self.batch_size):
                x = fit(to_tensor(frames[part], self.placement), self.size, IMAGENET_RESIZE)
                probs = self.classifier.model((x - 127.0) / 128.0).float().softmax(-1)
                top, index = probs.topk(TOP_K, dim=-1)
                top = top / top.sum(-1, keepdim=True)
                rows = np.arange(part.start, part.stop)[:, None]
                out[rows, index.cpu().numpy()] = top.cpu().numpy()
        return out

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return self.embedder.encode(list(texts), self.batch_size)

    def similarity(self, text_feats: np.ndarray, frame_feats: np.ndarray) -> np.ndarray:
        return (text_feats @ self.label_embeddings.T) @ frame_feats.T


def label_names() -> tuple[str, ...]:
    """The 1,000 ImageNet classes as the words people use, in logit order.

    OpenAI CLIP's curated names (shipped with open_clip) say what the WordNet lemma leaves
    implicit: 'Granny Smith apple', 'monarch butterfly', 'construction crane' (the other crane
    is a bird), where torchvision's names read 'Granny Smith', 'monarch', 'crane'.
    """
    from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES

    return tuple(IMAGENET_CLASSNAMES)


class RandomScorer:
    """Uniform scores in [0, 1), drawn from (seed, record id): the same on any shard or resume."""

    needs_pixels = False  # nothing is decoded for it

    def __init__(self, seed: int = 0, record_id: object = None):
        import numpy as np

        self.name = RANDOM
        self.rng = np.random.default_rng(record_rng(seed, record_id).getrandbits(64))

    def for_record(self, seed: int, record_id: object) -> RandomScorer:
        return RandomScorer(seed, record_id)

    def decode_size(self, width: int, height: int) -> tuple[int, int]:
        return 0, 0

    def encode_frames(self, frames: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.zeros((len(frames), 0), np.float32)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        return np.zeros((len(texts), 0), np.float32)

    def similarity(self, text_feats: np.ndarray, frame_feats: np.ndarray) -> np.ndarray:
        return self.rng.random((len(text_feats), len(frame_feats)))


FrameScorer = ClipScorer | ImageNetLabelScorer | RandomScorer


def make_scorer(choice: ScorerChoice, placement: Placement, batch_size: int) -> FrameScorer:
    """The scorer `choice` names; its models load once per process (`load_once`)."""
    if choice.kind == "clip":
        return ClipScorer(choice, placement, batch_size)
    if choice.kind == LABEL_SCORER:
        return ImageNetLabelScorer(choice, placement, batch_size)
    if choice.kind == RANDOM:
        return RandomScorer()
    raise ModelNotAvailable(f"unknown frame scorer {choice.kind!r}")
