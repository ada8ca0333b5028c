"""Second readings of each narration line: is it talk, and does it start a step? Linear probes on a
sentence embedder.

Why: the label pass (narration_labels.py) ranks lines fairly well, but the 1.5B model has two leans.
- **Away from TALK** on talk about the task itself: how the result looks, how long it keeps, a
  general tip or warning, a recap, the intro's list of steps. On the narrations written blind
  (evaluation/showhowto/heldout/extract_transcripts_3 and _4) its labels called 51% and 30% of the
  talk lines TALK, and the steps the model wrote from that talk were kept.
- **Towards MORE** on a new action: "okay add one clove of garlic", "so first open your can of
  chickpeas" read as going on with the step above, so steps merge and a copied line folds into the
  step before. On held-out sets 1-4 its STEP-against-MORE share tells a step's first line from its
  later lines at balanced accuracy 0.75 (the probe: 0.84).
What a line is (an action said, talk, the start of an action or its continuation: "and blend that
for about a minute", "one can, that's about fifteen ounces") is mostly in its own words, which a
sentence embedder reads without the LLM's leans: a logistic regression on `minilm-l6`'s embedding of
the line, trained on narrations written for tuning (evaluation/showhowto/train_line_probes.py says
which, and makes the weights again).

Each probe's weights are data (model_configs/narration_talk_probe.json, narration_start_probe.json):
the embedder they belong to, the weights, and the label pass's own weight in the decision.
- The talk probe: a line's TALK log-odds are the probe's plus `llm_weight` times the label pass's.
  Off by default (`vi extract-steps --talk-probe`): on narrations written blind after it was frozen,
  and on the real pressure cooker, it dropped more true steps than talk steps were worth there.
- The start probe: among the lines that are not talk, STEP against MORE; its log-odds are the probe's
  plus `llm_weight` times the label pass's log(P(STEP) / P(MORE)). P(TALK) is left as it is.
Both were trained with balanced classes, so their log-odds carry no prior of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from vi.core.models.linear_probe import LinearProbe
from vi.pipelines.showhowto.narration_labels import labelled, sigmoid, with_talk

PROBE_FILES = {"talk": "narration_talk_probe.json",  # talk (1) against a step's line (0)
               "start": "narration_start_probe.json"}  # a step's first line (1) against its later ones (0)


@dataclass(frozen=True)
class LineProbe(LinearProbe):
    llm_weight: float = 0.0  # how much the label pass's log-odds count beside the probe's

    @classmethod
    def from_file_contents(cls, data: dict[str, Any]) -> LineProbe:
        """The probe a model_configs/narration_*_probe.json holds (train_line_probes.py writes them)."""
        return cls(data["embedder"], tuple(data["weights"]), float(data["bias"]), float(data["llm_weight"]))


@cache
def load_line_probe(kind: str) -> LineProbe:
    """The packaged probe of `kind` (a key of PROBE_FILES)."""
    return LineProbe.packaged("vi.pipelines.showhowto", PROBE_FILES[kind])


def log_odds(p: float, floor: float = 1e-6) -> float:
    p = min(max(p, floor), 1.0 - floor)
    return math.log(p / (1.0 - p))


def with_probes(marks: Sequence[dict[str, Any]], talk: tuple[Sequence[float], float] | None = None,
                start: tuple[Sequence[float], float] | None = None) -> list[dict[str, Any]]:
    """The label pass's marks decided again with the probes' readings, each given as (the probe's
    log-odds per line, the label pass's weight beside them):
    - `talk`: P(TALK) from the talk probe's log-odds plus the weight times the label pass's;
    - `start`: STEP against MORE from the start probe's log-odds plus the weight times the label pass's
      log(P(STEP) / P(MORE)), within the share that is not TALK.
    A mark without probabilities (a server's label) is left as it is: there is no confidence of the
    model's to weigh. A changed mark keeps each probe's own probability as `probe` (talk) and `start`."""
    out = []
    for k, mark in enumerate(marks):
        probs = mark.get("probs")
        if not probs:
            out.append(dict(mark))
            continue
        probs, seen = [float(p) for p in probs], {}
        if talk is not None:
            said, weight = talk[0][k], talk[1]
            probs = with_talk(probs, sigmoid(said + weight * log_odds(probs[-1])))
            seen["probe"] = round(sigmoid(said), 3)
        if start is not None:
            said, weight = start[0][k], start[1]
            step, more = max(probs[0], 1e-6), max(probs[1], 1e-6)  # the floor of log_odds
            share = sigmoid(said + weight * math.log(step / more))
            probs = [(1.0 - probs[-1]) * share, (1.0 - probs[-1]) * (1.0 - share), probs[-1]]
            seen["start"] = round(sigmoid(said), 3)
        out.append({**mark, **labelled(probs), **seen})
    return out
