"""ShowHowTo's three metrics for generated sequences (paper Sec. 5.1), over feature matrices.

Every function returns a credit per item in [0, 1] (1 = correct); a metric is their mean.
A tie at the top (scores within `TIE` of the maximum) shares the credit: an item whose own class
is one of k tied best gets 1/k, the expected accuracy of breaking the tie at random, so the order
of texts or test images never decides a score.

- step faithfulness: each generated image is classified among its own sequence's step texts
  (`zero_shot_credit`; image and text features from one image-text model, scores = dot products);
- scene consistency: each generated image's nearest test-set image by cosine similarity of image
  features, among all test-set frames except its sequence's input image, must come from the same
  video as the input (`scene_credit`);
- task faithfulness: a sequence's mean L2-normalised image feature is classified among the test
  set's task texts (`task_credit`).
"""

from __future__ import annotations

import numpy as np

TIE = 1e-6  # scores this close to the best count as tied


def _top_credit(scores: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """scores (N, C), correct (N, C) bool -> the share of each row's tied best that is correct."""
    if scores.shape[1] == 0:
        return np.zeros(len(scores))
    best = scores >= scores.max(axis=1, keepdims=True) - TIE
    return (best & correct).sum(axis=1) / best.sum(axis=1)


def zero_shot_credit(images: np.ndarray, texts: np.ndarray, targets) -> np.ndarray:
    """images (N, D), texts (T, D), targets (N,) text indices -> credit (N,): the image's own text
    has the highest score (image . text)."""
    targets = np.asarray(targets, dtype=int)
    scores = np.asarray(images, np.float64) @ np.asarray(texts, np.float64).T
    correct = np.arange(scores.shape[1])[None, :] == targets[:, None]
    return _top_credit(scores, correct)


def l2_normalise(features: np.ndarray) -> np.ndarray:
    features = np.asarray(features, np.float64)
    norms = np.linalg.norm(features, axis=-1, keepdims=True)
    return features / np.where(norms == 0, 1, norms)


def scene_credit(images: np.ndarray, videos, excluded, database: np.ndarray, database_videos) -> np.ndarray:
    """images (N, D) generated-image features; videos (N,) the video of each image's input;
    excluded (N,) the database index of each image's own input image (never a candidate);
    database (M, D) the features of every test-set frame, database_videos (M,) their videos.
    Credit (N,): the nearest database frame (cosine) comes from the image's own video."""
    if len(database) < 2:
        raise ValueError("scene consistency needs a test set of at least two frames")
    images, database = l2_normalise(images), l2_normalise(database)
    database_videos = np.asarray(database_videos, dtype=object)
    credit = np.zeros(len(images))
    for start in range(0, len(images), 1024):  # (1024, M) similarities at a time
        part = slice(start, min(len(images), start + 1024))
        scores = images[part] @ database.T
        rows = np.arange(part.stop - part.start)
        scores[rows, np.asarray(excluded[part], dtype=int)] = -np.inf
        own = database_videos[None, :] == np.asarray(videos[part], dtype=object)[:, None]
        credit[part] = _top_credit(scores, own)
    return credit


def task_credit(sequences: list[np.ndarray], texts: np.ndarray, targets) -> np.ndarray:
    """sequences: per sequence its images' features (n_i, D); texts (T, D) the task texts;
    targets (S,) each sequence's task index -> credit (S,) of the mean L2-normalised feature."""
    if not sequences:
        return np.zeros(0)
    means = np.stack([l2_normalise(features).mean(axis=0) for features in sequences])
    return zero_shot_credit(means, texts, targets)


def step_targets(step_texts: list[str]) -> tuple[list[str], list[int]]:
    """A sequence's step texts without repeats (the classes) and each step's class: two steps that
    say the same thing are one class, so an image of either is right to pick it."""
    classes = list(dict.fromkeys(step_texts))
    return classes, [classes.index(text) for text in step_texts]


def mean(values) -> float | None:
    values = np.asarray(list(values), dtype=float)
    return float(values.mean()) if values.size else None
