"""The offline frame captioner: what the embedded EfficientNet-Lite0 can honestly say about each frame.

No VLM weights are on an offline machine, and `vi caption-frames` must still run end to end there. This
captioner is built from the one embedded image model, EfficientNet-Lite0 (ImageNet-1k), and says only what
that model measures:
- what is seen: the frame's top-k ImageNet classes with their softmax probabilities ("orange (80%)");
- whether the scene changed: the cosine distance between the frame's pooled image features (the classifier's
  last convolutional layer, averaged over the image) and the previous frame's in the same window. Below
  `threshold` the caption says "The same scene as the previous frame"; above, "The scene changed from the
  previous frame", and which top labels appeared and which are gone. Not "the view": the distance above the
  threshold is a change of what is in the frame (below), and the paper's progression prompt reads a change of
  viewpoint as no progression.
It never names an action or a person's progress: ImageNet has no such classes, and the distance says that
something changed, not what. Records say so: `kind` "offline-imagenet-labels", `model` names the classifier,
k and the threshold. Its quality against frames whose progression is known is measured by the lead's
FrameCapEval-style check (the issue's "Quality to measure").

The threshold (0.15) comes from real pairs: two adjacent 1-FPS frames of one ProgressCaptioner example
(shared/data/progcaptioner/frames/frame040-041, the same shot) are 0.003 apart, a stereo pair or a slightly
moved camera on the same scene 0.04-0.20, and frames of different content or steps 0.40-0.86.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vi.core.devices import Placement
from vi.core.models import vision
from vi.pipelines.common.frame_scorers import IMAGENET_RESIZE, fit, label_names, to_tensor

if TYPE_CHECKING:
    import numpy as np

KIND = "offline-imagenet-labels"
CHANGE_THRESHOLD = 0.15
TOP_K = 3


@dataclass(frozen=True)
class FrameLook:
    labels: tuple[tuple[str, float], ...]  # top-k (ImageNet class, probability), most probable first
    feature: np.ndarray  # L2-normalised pooled image features


def model_name(top_k: int, threshold: float) -> str:
    return (f"{vision.IMAGENET_ARCH} ImageNet top-{top_k} labels + scene change (pooled-feature cosine "
            f"distance > {threshold:g})")


def look(classifier: vision.ImageNetClassifier, frames: list[np.ndarray], placement: Placement,
         top_k: int = TOP_K) -> list[FrameLook]:
    """Labels and features of each frame (HxWx3 uint8, sizes may differ), in one forward pass."""
    import numpy as np
    import torch

    size = (classifier.input_size, classifier.input_size)
    with torch.inference_mode():
        x = torch.cat([fit(to_tensor(np.ascontiguousarray(f)[None], placement), size, IMAGENET_RESIZE)
                       for f in frames])
        x = (x - 127.0) / 128.0  # EfficientNet-Lite0's training scaling
        features = classifier.model.extract_features(x).mean(dim=(2, 3))
        net = classifier.model  # the head forward() applies to the same features, without a second pass
        probs = net._fc(net._dropout(features)).float().softmax(-1)
        features = torch.nn.functional.normalize(features.float(), dim=-1)
        top, index = probs.topk(top_k)
    names = label_names()
    return [FrameLook(tuple((names[i], round(float(p), 4)) for p, i in zip(ps, ix)), feature)
            for ps, ix, feature in zip(top.tolist(), index.tolist(), features.cpu().numpy())]


def distance(a: FrameLook, b: FrameLook) -> float:
    return float(max(0.0, 1.0 - float(a.feature @ b.feature)))


def _labels(look: FrameLook) -> str:
    shown = [f"{name} ({p:.0%})" if p >= 0.01 else f"{name} (<1%)" for name, p in look.labels]
    return ", ".join(shown)


def caption(current: FrameLook, previous: FrameLook | None, threshold: float = CHANGE_THRESHOLD) -> str:
    """One plain sentence or two about `current`, relative to `previous` (None: the window's first frame)."""
    seen = f"An ImageNet classifier's top labels: {_labels(current)}."
    if previous is None:
        return seen
    d = distance(current, previous)
    if d <= threshold:
        return f"The same scene as the previous frame (image-feature distance {d:.2f}). {seen}"
    now, before = [n for n, _ in current.labels], [n for n, _ in previous.labels]
    appeared, gone = [n for n in now if n not in before], [n for n in before if n not in now]
    change = f"The scene changed from the previous frame (image-feature distance {d:.2f})"
    if appeared:
        change += f"; labels new here: {', '.join(appeared)}"
    if gone:
        change += f"; labels gone: {', '.join(gone)}"
    return f"{change}. {seen}"


def caption_window(looks: list[FrameLook], threshold: float = CHANGE_THRESHOLD) -> list[str]:
    """Captions of a window's frames, each relative to the frame before it in the window."""
    return [caption(cur, looks[i - 1] if i else None, threshold) for i, cur in enumerate(looks)]
