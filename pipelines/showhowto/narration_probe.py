"""A second reading of each narration line: is it talk? A linear probe on a sentence embedder.

Why: the label pass (narration_labels.py) ranks talk and steps apart fairly well, but the 1.5B
model leans away from TALK on talk about the task itself: how the result looks, how long it
keeps, a general tip or warning, a recap, the intro's list of steps. On the narrations written
blind (evaluation/showhowto/heldout/extract_transcripts_3 and _4) its labels called 51% and 30%
of the talk lines TALK, and the steps the model wrote from that talk were kept. Labelled examples
in the prompt and a yes/no question per step did not move it (evaluation/showhowto/RESULTS.md).
What a line is (an action said, or talk) is mostly in its own words, which a sentence embedder
reads without the LLM's lean: a logistic regression on `minilm-l6`'s embedding of the line,
trained on narrations written for tuning (evaluation/showhowto/train_talk_probe.py says which,
and makes the weights again), called 85% and 80% of those blind sets' talk lines talk, keeping
95% and 96% of their action lines.

It is off by default (`vi extract-steps --talk-probe` turns it on): on narrations written blind
after it was frozen, and on the real pressure cooker, it dropped more true steps than talk steps
were worth there (evaluation/showhowto/RESULTS.md, seventh pass).

The probe's weights are data (model_configs/narration_talk_probe.json): the embedder they belong
to, the weights, and the label pass's own weight in the decision. A line's TALK log-odds are the
probe's plus `llm_weight` times the label pass's; STEP against MORE stays the label pass's (a
line's place in its step is context, which the probe does not see). The probe was trained with
balanced classes, so its log-odds carry no prior of their own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

PROBE_FILE = "narration_talk_probe.json"


@dataclass(frozen=True)
class TalkProbe:
    embedder: str  # the sentence embedder whose unit-length vectors the weights read
    weights: tuple[float, ...]
    bias: float
    llm_weight: float  # how much the label pass's TALK log-odds count beside the probe's

    def log_odds(self, vectors) -> list[float]:
        """The probe's TALK log-odds of each row of `vectors` (unit-length embeddings)."""
        import numpy as np

        if vectors.shape[1] != len(self.weights):
            raise ValueError(f"the talk probe reads {len(self.weights)}-d vectors of {self.embedder}, "
                             f"got {vectors.shape[1]}-d ones")
        return [float(x) for x in vectors @ np.asarray(self.weights, dtype=np.float32) + self.bias]


    @classmethod
    def from_file_contents(cls, data: dict[str, Any]) -> TalkProbe:
        """The probe a narration_talk_probe.json holds (train_talk_probe.py writes them)."""
        return cls(data["embedder"], tuple(data["weights"]), float(data["bias"]), float(data["llm_weight"]))


@cache
def load_talk_probe() -> TalkProbe:
    """The packaged probe (model_configs/narration_talk_probe.json)."""
    return TalkProbe.from_file_contents(json.loads(resources.files("vi.pipelines.showhowto").joinpath(
        "model_configs", PROBE_FILE).read_text(encoding="utf-8")))


def log_odds(p: float, floor: float = 1e-6) -> float:
    p = min(max(p, floor), 1.0 - floor)
    return math.log(p / (1.0 - p))


def with_probe(marks: Sequence[dict[str, Any]], probe_log_odds: Sequence[float], llm_weight: float
               ) -> list[dict[str, Any]]:
    """The label pass's marks with each line's TALK decided again: its log-odds are the probe's
    (`probe_log_odds`) plus `llm_weight` times the label pass's; STEP against MORE keep the label
    pass's share. A mark without probabilities (a server's label) is left as it is: there is no
    confidence of the model's to weigh. Each changed mark keeps the probe's P(TALK) as `probe`."""
    from vi.pipelines.showhowto.narration_labels import labelled, with_talk

    out = []
    for mark, probe in zip(marks, probe_log_odds, strict=True):
        probs = mark.get("probs")
        if not probs:
            out.append(dict(mark))
            continue
        z = probe + llm_weight * log_odds(float(probs[-1]))
        talk = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0
        out.append({**mark, **labelled(with_talk(probs, talk)),
                    "probe": round(1.0 / (1.0 + math.exp(-probe)) if probe > -700 else 0.0, 3)})
    return out
