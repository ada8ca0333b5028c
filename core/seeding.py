"""Determinism: one `--seed` per run, applied to every library that samples.

The seed is applied to Python at once, and to numpy and torch when the first model is built
(`vi.core.models.load_once` calls `seed_libraries`), since neither is imported before then (numpy
at once if it already is): importing numpy only to seed it cost `vi probe` 130 ms of its start.
Stages that sample per record derive a generator from (seed, id) with `record_rng`, so a
record's output does not depend on its shard or on a resume.
"""

from __future__ import annotations

import hashlib
import random
import sys

_seed: int | None = None
_numpy_seeded: int | None = None  # the seed numpy's global generator last got


def seed_everything(seed: int) -> None:
    global _seed, _numpy_seeded
    _seed, _numpy_seeded = seed, None
    random.seed(seed)
    if "numpy" in sys.modules:
        _seed_numpy(seed)


def _seed_numpy(seed: int) -> None:
    """Seed numpy's global generator once per seed_everything: a model built mid-run does not rewind it."""
    global _numpy_seeded
    if _numpy_seeded == seed:
        return
    import numpy as np

    np.random.seed(seed % 2**32)
    _numpy_seeded = seed


def seed_libraries() -> None:
    """Seed numpy and torch (CPU and every GPU) with the run's seed; called before a model is built."""
    if _seed is None:
        return
    _seed_numpy(_seed)
    import torch

    torch.manual_seed(_seed)


def record_seed(seed: int, record_id: object) -> int:
    digest = hashlib.sha256(f"{seed}:{record_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % 2**63


def record_rng(seed: int, record_id: object) -> random.Random:
    return random.Random(record_seed(seed, record_id))
