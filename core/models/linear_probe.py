"""A linear probe on a sentence embedder's vectors: a logistic regression whose weights are data.

Stages use probes where a small LLM leans one way whatever the input says and what decides is mostly
in the words themselves (vi extract-steps' line probes, vi judge progression's change probe). A probe's
file names the embedder whose unit-length vectors its weights read, so the wrong embedder is refused.
The scripts that train them share evaluation/probe_training.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
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

    @classmethod
    def packaged(cls, package: str, filename: str):
        """The probe a package ships as model_configs/`filename` (read as this class reads a probe file)."""
        return cls.from_file_contents(json.loads(resources.files(package).joinpath(
            "model_configs", filename).read_text(encoding="utf-8")))
