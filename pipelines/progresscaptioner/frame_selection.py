"""Which frames of a sequence `vi frames` keeps: sliding windows, and FrameCapEval's K-means.

FrameCapEval (ProgressCaptioner, CVPR 2025, Sec. 5) built its sequences from frames at 1 FPS:
K-means over CLIP image features with K chosen by silhouette score in 3..6, one frame per
cluster (the one nearest its centroid), in temporal order, plus the frame closest in feature
distance to a randomly chosen one of them, so that every sequence holds a pair that shows no
progression. `kmeans_selection` does exactly that with scikit-learn's KMeans (random_state =
--seed) and silhouette_score, over any unit-norm features:

- K is tried from 3 up to min(6, frames - 1, max_frames - 1): silhouette needs at least one
  frame more than clusters, and the release's sequences hold at most 6 frames *with* the
  near-duplicate, so by default (max_frames 6) K stops at 5; max_frames 7 gives the paper's
  full 3..6. The best score wins; a tie goes to the smaller K.
- Fewer than 4 frames: nothing to cluster (K >= 3 needs 4); every frame is kept, in order,
  with no near-duplicate added (`k` is null).
- Frames all alike (no K splits them into 2 or more clusters): the first frame and its
  nearest neighbour, so the sequence is still a (no-progression) pair.
- The near-duplicate is the not-yet-kept frame nearest to the anchor; when every frame is
  already kept (frames == K), nothing is added.

Image features come from the image encoders `vi align-frames` uses (`frame_scorers`):
open_clip models as they are (CLIP, the paper's choice), and offline EfficientNet-Lite0,
whose pooled last feature map stands in for CLIP's embedding (`ImageEmbedder`).
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.devices import Placement
from vi.core.models import get_spec, vision
from vi.core.models.catalog import DEFAULT_IMAGE_CLASSIFIER
from vi.core.models.resolve import resolve
from vi.pipelines.common import frame_scorers

if TYPE_CHECKING:  # numpy, like scikit-learn and torch, is imported where frames are selected
    import numpy as np

K_MIN, K_MAX = 3, 6
EFFICIENTNET = vision.IMAGENET_ARCH


# --- windows --------------------------------------------------------------------------------

def window_bounds(count: int, size: int, stride: int) -> list[tuple[int, int]]:
    """(first, last) frame indices of each window of `size` frames, `stride` apart.

    A sequence no longer than a window is one window of all its frames; when the last stride
    does not land on the end, one more window ends on the last frame, so every frame is in one.
    """
    if count <= 0:
        return []
    if count <= size:
        return [(0, count - 1)]
    starts = list(range(0, count - size + 1, stride))
    if starts[-1] + size < count:
        starts.append(count - size)
    return [(s, s + size - 1) for s in starts]


# --- K-means --------------------------------------------------------------------------------

@dataclass
class KMeansChoice:
    indices: list[int]  # into the candidate frames, in temporal order
    k: int | None
    silhouette: dict[int, float] = field(default_factory=dict)
    anchor: int | None = None  # the randomly chosen kept frame ...
    duplicate: int | None = None  # ... and the frame nearest to it, added
    note: str | None = None

    def as_fields(self) -> dict:
        """The record's view: positions of the pair in the kept sequence, not candidate indices."""
        pair = None
        if self.duplicate is not None:
            pair = sorted([self.indices.index(self.anchor), self.indices.index(self.duplicate)])
        return {"k": self.k, "silhouette": {str(k): round(s, 6) for k, s in self.silhouette.items()},
                "near_duplicate": pair, "note": self.note}


def _cluster(features: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.cluster import KMeans

    with warnings.catch_warnings():  # duplicate frames: fewer distinct points than k is expected
        warnings.simplefilter("ignore")
        model = KMeans(n_clusters=k, random_state=seed, n_init=10).fit(features)
    return model.labels_, model.cluster_centers_


def kmeans_selection(features: np.ndarray, *, seed: int, rng: random.Random,
                     max_frames: int = K_MAX) -> KMeansChoice:
    """FrameCapEval's frames from (N, D) features in temporal order (see the module doc)."""
    import numpy as np
    from sklearn.metrics import silhouette_score

    count = len(features)
    if count < K_MIN + 1:
        return KMeansChoice(list(range(count)), None,
                            note=f"{count} frames: too few to cluster (K >= {K_MIN} needs {K_MIN + 1}); all kept")
    features = np.asarray(features, np.float64)
    scores: dict[int, float] = {}
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for k in range(K_MIN, min(K_MAX, count - 1, max_frames - 1) + 1):
        labels, centres = _cluster(features, k, seed)
        if not 2 <= len(set(labels.tolist())) <= count - 1:
            continue  # too few distinct frames for k clusters: silhouette is undefined
        scores[k] = float(silhouette_score(features, labels))
        if best is None or scores[k] > best[0]:
            best = (scores[k], labels, centres)
    if best is None:
        kept, k, note = [0], None, "frames all alike: no K splits them; the first frame and its nearest kept"
    else:
        _, labels, centres = best
        k, note = len(centres), None
        kept = []
        for c in sorted(set(labels.tolist())):
            members = np.flatnonzero(labels == c)
            distance = np.linalg.norm(features[members] - centres[c], axis=1)
            kept.append(int(members[np.argmin(distance)]))
    anchor = rng.choice(sorted(kept))
    others = [i for i in range(count) if i not in kept]
    duplicate = None
    if others:
        distance = np.linalg.norm(features[others] - features[anchor], axis=1)
        duplicate = others[int(np.argmin(distance))]
        kept.append(duplicate)
    return KMeansChoice(sorted(kept), k, scores, anchor, duplicate, note)


# --- image features ---------------------------------------------------------------------------

@dataclass(frozen=True)
class EmbedderChoice:
    kind: str  # clip | efficientnet
    name: str  # written to frame_select.model
    clip: frame_scorers.ScorerChoice | None = None
    weights: Path | None = None


def resolve_embedder(model: str, clip_arch: str | None = None) -> EmbedderChoice:
    """`--model` to local files, before any record: a missing model fails the run at once."""
    if model == "auto":
        spec = get_spec(frame_scorers.DEFAULT_CLIP)
        model = frame_scorers.DEFAULT_CLIP if spec is not None and spec.available() else EFFICIENTNET
    if model == frame_scorers.RANDOM:
        raise ValueError("--model random has no image features to cluster; give a CLIP model or "
                         f"{EFFICIENTNET}")
    if model in frame_scorers.LABEL_ALIASES:
        if clip_arch is not None:
            raise ValueError(f"--clip-arch goes with a CLIP checkpoint file, not --model {model}")
        return EmbedderChoice("efficientnet", f"{EFFICIENTNET}:pooled",
                              weights=resolve(DEFAULT_IMAGE_CLASSIFIER, "image-classifier"))
    choice = frame_scorers.resolve_scorer(model, clip_arch)
    return EmbedderChoice("clip", choice.name, clip=choice)


class ImageEmbedder:
    """uint8 frames (N, H, W, 3) -> unit-norm features (N, D), `batch_size` frames per call."""

    def __init__(self, choice: EmbedderChoice, placement: Placement, batch_size: int):
        self.choice, self.placement, self.batch_size = choice, placement, batch_size
        if choice.kind == "clip":
            self.clip = frame_scorers.ClipScorer(choice.clip, placement, batch_size)
            self.size, self.mode = self.clip.size, self.clip.mode
        else:
            self.classifier = vision.load_imagenet_classifier(choice.weights, placement)
            self.size = (self.classifier.input_size,) * 2
            self.mode = frame_scorers.IMAGENET_RESIZE

    def decode_size(self, width: int, height: int) -> tuple[int, int]:
        return frame_scorers.decode_size(width, height, self.size, self.mode)

    def encode(self, frames: np.ndarray) -> np.ndarray:
        if self.choice.kind == "clip":
            return self.clip.encode_frames(frames)
        import numpy as np
        import torch

        out = []
        with torch.inference_mode(), frame_scorers._autocast(self.placement):
            for start in range(0, len(frames), self.batch_size):
                x = frame_scorers.fit(frame_scorers.to_tensor(frames[start:start + self.batch_size], self.placement),
                                      self.size, self.mode)
                # The pooled 1280-d map before the classifier head: the top-5 label vector the
                # aligner scores with calls two different photos of fruit the same point.
                maps = self.classifier.model.extract_features((x - 127.0) / 128.0)
                out.append(torch.nn.functional.normalize(maps.mean((2, 3)).float(), dim=-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)
