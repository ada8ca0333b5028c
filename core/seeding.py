"""Determinism: one `--seed` per run, and a generator per record derived from it.

Deriving per-record randomness from (seed, id) rather than from one global stream keeps a
record's output the same whatever shard it lands in and whether the run was resumed.
"""

from __future__ import annotations

import hashlib
import random


def seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    import sys

    if "torch" in sys.modules:  # seed torch only if a stage already needed it
        import torch

        torch.manual_seed(seed)


def record_seed(seed: int, record_id: object) -> int:
    digest = hashlib.sha256(f"{seed}:{record_id}".encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % 2**63


def record_rng(seed: int, record_id: object) -> random.Random:
    return random.Random(record_seed(seed, record_id))
