"""Determinism: one `--seed` per run, applied to every library that samples.

The seed is applied to Python and numpy at once, and to torch when the first model is built
(`vi.core.models.load_once` calls `seed_libraries`), since torch is not imported before then.
Stages that sample per record derive a generator from (seed, id) with `record_rng`, so a
record's output does not depend on its shard or on a resume.
"""

from __future__ import annotations

import hashlib
import random

_seed: int | None = None


def seed_everything(seed: int) -> None:
    global _seed
    _seed = seed
    random.seed(seed)
    import numpy as np

    np.random.seed(seed % 2**32)


def seed_libraries() -> None:
    """Seed torch (CPU and every GPU) with the run's seed; called before a model is built."""
    if _seed is None:
        return
    import torch

    torch.manual_seed(_seed)


def record_seed(seed: int, record_id: object) -> int:
    digest = hashlib.sha256(f"{seed}:{record_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % 2**63


def record_rng(seed: int, record_id: object) -> random.Random:
    return random.Random(record_seed(seed, record_id))
