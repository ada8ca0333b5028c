"""VLEmbed, StepDiff's vision-language embedding baseline (Sec. 4), with any open_clip model.

A clip's embedding is the mean of the unit-normalised open_clip embeddings of `frames` frames
sampled uniformly inside it (the centres of equal parts, as `vi describe` samples), normalised
again. Then:
- DiffMCQ: an option pair's embedding is the normalised mean of its two clips' (`pair=both`),
  or the reference's or the candidate's alone (`reference`, `candidate`: the paper's Vr-only
  and Vc-only rows); its score is the cosine to the caption's text embedding.
- DiffRank: a target's score is the cosine between its embedding and the reference's. A
  category cannot be seen in a single embedding, so every category ranks the same way: the
  baseline asks how alike the two clips look overall.

Every clip is encoded once, and the frames of several clips go through the model together.
Clip embeddings can be saved (NPZ with `id` and `embedding`, the format `vi eval
mcq-negatives --clip-features` reads) and read back instead of the videos.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from vi.core import media
from vi.core.config import check_choice
from vi.evaluation.stepdiff import predict as sp
from vi.evaluation.stepdiff.mcq_negatives import read_clip_features, unit
from vi.evaluation.stepdiff.predict import ClipVideo
from vi.pipelines.stepdiff.describe import sample_times
from vi.pipelines.common.frame_scorers import ClipScorer

PAIR_MODES = ("both", "reference", "candidate")


def encode_clips(scorer: ClipScorer, videos: dict[str, ClipVideo], frames: int = 8, clips_per_batch: int = 8,
                 advance: Callable[[int], None] = lambda done: None) -> dict[str, np.ndarray]:
    """{clip id: unit embedding}: the mean of its frames' unit embeddings, normalised."""
    out: dict[str, np.ndarray] = {}
    sizes: dict[str, tuple[int, int]] = {}
    order = list(videos)
    for first in range(0, len(order), clips_per_batch):
        batch = order[first:first + clips_per_batch]
        by_shape: dict[tuple, list[tuple[str, np.ndarray]]] = {}
        for clip in batch:
            video = videos[clip]
            if video.path not in sizes:
                info = media.probe(video.path)
                sizes[video.path] = scorer.decode_size(info.width, info.height)
            width, height = sizes[video.path]
            pixels = media.read_frames(video.path, sample_times(video.start, video.end, frames), width, height)
            by_shape.setdefault(pixels.shape, []).append((clip, pixels))
        for group in by_shape.values():  # videos of one size go through the model together
            features = scorer.encode_frames(np.concatenate([p for _, p in group])).reshape(len(group), frames, -1)
            for (clip, _), frame_features in zip(group, features):
                out[clip] = unit(frame_features.mean(axis=0)).astype(np.float32)  # as saved
        advance(len(batch))
    return out


def save_clip_features(path: Path, features: dict[str, np.ndarray]) -> None:
    ids = np.array(list(features), dtype=str)
    matrix = np.stack([features[i] for i in features]).astype(np.float32)
    partial = path.with_name(path.name + ".partial.npz")
    np.savez(partial, id=ids, embedding=matrix)
    partial.replace(path)


def load_clip_features(path: Path) -> dict[str, np.ndarray]:
    return read_clip_features(path)


class VLEmbed:
    """The two scoring functions of `vi predict` over clip embeddings and a text encoder."""

    def __init__(self, clips: dict[str, np.ndarray], encode_texts, pair: str = "both"):
        check_choice("--pair", pair, PAIR_MODES)
        # float32, as saved, then normalised in float64: encoded and reloaded features score alike
        self.clips = {clip: unit(np.asarray(v, np.float32)) for clip, v in clips.items()}
        self.encode_texts, self.pair = encode_texts, pair
        self._texts: dict[str, np.ndarray] = {}

    def text(self, caption: str) -> np.ndarray:
        if caption not in self._texts:
            self._texts[caption] = unit(self.encode_texts([caption])[0])
        return self._texts[caption]

    def pair_embedding(self, reference: str, candidate: str) -> np.ndarray:
        if self.pair == "reference":
            return self.clips[reference]
        if self.pair == "candidate":
            return self.clips[candidate]
        return unit(self.clips[reference] + self.clips[candidate])

    def option_score(self, reference: str, candidate: str, caption: str, category: str) -> float:
        return float(self.pair_embedding(reference, candidate) @ self.text(caption))

    def target_score(self, reference: str, target: str, category: str) -> float:
        return float(self.clips[reference] @ self.clips[target])


def build(config: sp.PredictConfig, rows: list[sp.BenchmarkRow], advance_clips: Callable[[int], Callable[[int], None]]
          ) -> VLEmbed:
    """The method for `vi predict --method vlembed`: the clips' embeddings (from --clip-features, the rest
    encoded from --video-root) and the model's text encoder, every clip found before the model loads."""
    from vi.core.devices import resolve_placement
    from vi.pipelines.common.frame_scorers import resolve_scorer

    task = config.task.value
    needed = {clip for item in rows for clip in sp.row_clips(task, item.row)}
    features = load_clip_features(config.clip_features) if config.clip_features else {}
    todo = sorted(needed - set(features))
    if todo and config.video_root is None:
        raise ValueError(f"--clip-features {config.clip_features} has no embedding of {len(todo)} clips, e.g. "
                         f"{todo[0]}; give --video-root to encode them")
    videos = sp.clip_videos(task, [r for r in rows if set(sp.row_clips(task, r.row)) & set(todo)],
                            config.video_root, str(config.gt)) if todo else {}
    choice = resolve_scorer(config.clip_model, config.clip_arch)
    if choice.kind != "clip":
        raise ValueError(f"--clip-model {config.clip_model}: VLEmbed needs an open_clip model, not {choice.kind}")
    scorer = ClipScorer(choice, resolve_placement(config.device, config.dtype, engine="torch"), config.batch_size)
    if todo:
        features.update(encode_clips(scorer, {c: videos[c] for c in todo}, config.frames,
                                     advance=advance_clips(len(todo))))
    if config.save_clip_features:
        save_clip_features(config.save_clip_features, features)
    dims = {len(v) for v in features.values()} | {scorer.encode_texts(["a photo"]).shape[1]}
    if len(dims) > 1:
        raise ValueError(f"clip embeddings and {config.clip_model}'s text embeddings differ in size ({sorted(dims)}): "
                         f"--clip-features {config.clip_features} comes from another model")
    return VLEmbed(features, scorer.encode_texts, config.pair.value)
