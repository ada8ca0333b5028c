"""What the scripts that train linear probes (core/models/linear_probe.py) share: an exact logistic fit, AUC,
and keeping the packaged probe file (--write stores a retrain, --check compares the packaged file with one).

Used by evaluation/showhowto/train_line_probes.py and evaluation/progresscaptioner/train_progression_probe.py.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]  # the repository root, where probe files are named from
DRIFT = 1e-4  # a retrain's weights within this of the packaged ones are the same probe (float rounding)


def cpu_text_embedder(ref: str):
    """The sentence embedder `ref` on the CPU, loaded once per process: the probes are trained where CI runs."""
    from vi.core.devices import resolve_placement
    from vi.core.models.text_embedding import load_text_embedder

    return load_text_embedder(ref, resolve_placement("cpu"))


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


def add_file_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--write", action="store_true", help="store the weights in the package")
    parser.add_argument("--check", action="store_true", help="exit 1 if the packaged weights differ from a retrain")


def keep_file(target: Path, probe: dict[str, Any], args: argparse.Namespace, name: str = "probe") -> bool | None:
    """With --check: print how the packaged file `target` compares with the retrain `probe` and say whether it is
    stale; with --write: store `probe` there. None when not checking."""
    if args.check:
        drift, same = file_differences(json.loads(target.read_text(encoding="utf-8")), probe)
        print(f"packaged {name} vs retrain: largest weight difference {drift:.2e}, metadata "
              f"{'the same' if same else 'differs'}")
        return not same or drift >= DRIFT
    if args.write:
        target.write_text(json.dumps(probe, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {target.relative_to(ROOT)}")
    return None
