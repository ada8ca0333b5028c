"""A linear probe on a sentence embedder's vectors: a logistic regression whose weights are data.

Stages use probes where a small LLM leans one way whatever the input says and what decides is mostly
in the words themselves (vi extract-steps' line probes, vi judge progression's change probe). A probe's
file names the embedder whose unit-length vectors its weights read, so the wrong embedder is refused;
the scripts that train them (under evaluation/) fit with `fit_logistic`, which gives the same weights
for the same data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LinearProbe:
    embedder: str  # the sentence embedder whose unit-length vectors the weights read
    weights: tuple[float, ...]
    bias: float

    def log_odds(self, vectors) -> list[float]:
        """The probe's log-odds of each row of `vectors`."""
        import numpy as np

        if vectors.shape[1] != len(self.weights):
            raise ValueError(f"the probe reads {len(self.weights)}-d vectors of {self.embedder}, "
                             f"got {vectors.shape[1]}-d ones")
        return [float(x) for x in vectors @ np.asarray(self.weights, dtype=np.float32) + self.bias]

    @classmethod
    def from_file_contents(cls, data: dict[str, Any]) -> LinearProbe:
        """The probe a probe file holds: its embedder, weights and bias (other keys say how it was made)."""
        return cls(data["embedder"], tuple(data["weights"]), float(data["bias"]))


def fit_logistic(vectors, classes: Sequence[int], l2: float, steps: int = 30) -> tuple[Any, float]:
    """Weights and bias of an L2-regularised logistic regression (L2 on the weights, not the bias), the two
    classes weighted to count equally (the log-odds carry no prior), fitted exactly by Newton's method."""
    import numpy as np

    x = np.hstack([np.asarray(vectors, dtype=np.float64), np.ones((len(vectors), 1))])
    y = np.asarray(classes, dtype=np.float64)
    sample = np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean()))
    ridge = l2 * np.diag(np.r_[np.ones(x.shape[1] - 1), 0.0])
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        gradient = x.T @ (sample * (p - y)) + ridge @ w
        hessian = (x * (sample * p * (1 - p))[:, None]).T @ x + ridge
        w -= np.linalg.solve(hessian, gradient)
    return w[:-1], float(w[-1])


def auc(scores: Sequence[float], classes: Sequence[int]) -> float:
    """P(an item of class 1 scores above an item of class 0), ties counted half."""
    pos = [s for s, y in zip(scores, classes) if y]
    neg = [s for s, y in zip(scores, classes) if not y]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def file_differences(packaged: dict[str, Any], again: dict[str, Any]) -> tuple[float, bool]:
    """The largest difference between two probe files' weights and biases, and whether the rest is the same
    (a training script's --check and its test compare a retrain with the packaged file this way)."""
    drift = max(abs(a - b) for a, b in zip([*packaged["weights"], packaged["bias"]],
                                           [*again["weights"], again["bias"]]))
    rest = [{k: v for k, v in probe.items() if k not in ("weights", "bias")} for probe in (packaged, again)]
    return drift, rest[0] == rest[1]
