"""Where each step of `vi extract-steps` is said: the steps' texts aligned to the narration lines.

The model writes the steps and cites each one's first and last line, but the 1.5B default model
cites the line before or after the one it paraphrases, sometimes several lines off (on the real
pressure-cooker transcript, "Steam potatoes for about 15 minutes" cited line 11, said on line 18).
So a step's lines are not taken from its citation: each step's text is compared with every run
of one to MAX_SPAN consecutive lines by a sentence embedder (core/models/text_embedding.py), and
the steps are placed by a monotonic alignment, a dynamic programme that keeps them in the
model's order (a step starts no earlier than the one before it ends: two steps share at most one
line), as align-frames places frames. The citation is one signal among others: a prior that
favours runs starting and ending near the cited lines (CITE_WEIGHT, falling off over CITE_SPREAD
lines) breaks ties between lines that say the same thing, and is weak on purpose: on the
pressure cooker the 1.5B model's citations were up to 15 lines off. The label pass's P(TALK) of the
lines is another signal (TALK_WEIGHT per line), so a step is not grounded on talk that shares its
words (the intro's "today I'm going to make baked potatoes" is the line likest "remove the
potatoes and eat"); and a run of lines pays SPAN_COST per line past its first, as a longer text
matches more of a step's words whether or not they are said there. Before the alignment, each
run's similarities are taken down by half its mean similarity to its HUB_K nearest steps (CSLS,
`hub_corrected`): the small embedder reads the topic first, so a line about the dish in general
is near every step and took steps said elsewhere (the pressure cooker's 15 minutes, said on line
17, went to line 8's "put them in so that they're going to be steamed nicely").

Everything here is a pure function of numbers: the similarities come in as a matrix, so the
alignment is tested with small fakes, without a model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where the alignment runs: `vi extract-steps --help` needs none of it
    import numpy as np

MAX_SPAN = 3  # lines one step may span (the hand-written truths' longest; a step said over more is cut)
CITE_WEIGHT = 0.03  # cosine similarity the citation is worth at its own lines, at each end: a tie-breaker
SPAN_COST = 0.03  # cosine similarity each line past a run's first must earn (a longer text matches more words)
CITE_SPREAD = 2.0  # lines: the citation's prior falls to exp(-1/2) of its weight this far away
TALK_WEIGHT = 0.15  # cosine similarity taken off per line, times the label pass's P(TALK) of the line
HUB_K = 10  # a run's hubness: its mean similarity to its HUB_K likeliest steps (all of them in a smaller chunk)


@dataclass(frozen=True)
class Grounded:
    first: int  # 1-based line numbers, as the model cites them
    last: int
    similarity: float  # the step's cosine similarity to its lines' text


def spans(count: int, max_span: int = MAX_SPAN) -> list[tuple[int, int]]:
    """Every run (first, last) of 1..max_span consecutive lines of `count`, 1-based, in order."""
    return [(a, b) for a in range(1, count + 1) for b in range(a, min(count, a + max_span - 1) + 1)]


def span_texts(texts: Sequence[str], runs: Sequence[tuple[int, int]]) -> list[str]:
    return [" ".join(t.strip() for t in texts[a - 1:b]) for a, b in runs]


def citation_prior(run: tuple[int, int], cited: tuple[int, int] | None) -> float:
    """CITE_WEIGHT at each end of the cited run, falling off with the distance in lines."""
    if cited is None:
        return 0.0
    return sum(CITE_WEIGHT * math.exp(-((end - c) ** 2) / (2 * CITE_SPREAD ** 2))
               for end, c in zip(run, cited))


def align(similarity: np.ndarray, runs: Sequence[tuple[int, int]], cited: Sequence[tuple[int, int] | None],
          talk: Sequence[float] | None = None) -> list[tuple[int, int]]:
    """The run of lines each step is placed on: `similarity[i, r]` is step i's similarity to
    `runs[r]`; steps keep their order (each starts at or after the line the previous one ends
    on). Maximises the sum over steps of similarity + citation prior - TALK_WEIGHT x P(TALK)
    summed over the run's lines (`talk`, per 1-based line - 1) - SPAN_COST per line past the first.
    Exact: a DP over steps x runs, with the best previous value kept as a running maximum over where
    the previous run ends."""
    import numpy as np

    steps, count = similarity.shape
    if steps == 0:
        return []
    if count != len(runs) or steps != len(cited):
        raise ValueError(f"{steps}x{count} similarities for {len(cited)} steps and {len(runs)} runs")
    talk_cost = [(TALK_WEIGHT * sum(talk[line - 1] for line in range(a, b + 1)) if talk is not None else 0.0)
                 + SPAN_COST * (b - a) for a, b in runs]
    gain = np.array([[similarity[i, r] + citation_prior(runs[r], cited[i]) - talk_cost[r]
                      for r in range(count)] for i in range(steps)])
    last_line = max(b for _, b in runs)
    # best[i][r]: the best total of steps 0..i with step i on runs[r]; back[i][r]: step i-1's run
    best = np.full((steps, count), -np.inf)
    back = np.full((steps, count), -1, dtype=int)
    best[0] = gain[0]
    for i in range(1, steps):
        # ending[e]: the best (value, run) of step i-1 among runs ending on line <= e
        ending: list[tuple[float, int]] = [(-np.inf, -1)] * (last_line + 1)
        for r, (_, b) in enumerate(runs):
            if best[i - 1, r] > ending[b][0]:
                ending[b] = (best[i - 1, r], r)
        for e in range(1, last_line + 1):
            if ending[e - 1][0] > ending[e][0]:
                ending[e] = ending[e - 1]
        for r, (a, _) in enumerate(runs):
            value, source = ending[a]
            if source >= 0:
                best[i, r], back[i, r] = value + gain[i, r], source
    if not np.isfinite(best[-1]).any():  # more steps than lines allow in order: keep them in order anyway
        return [runs[int(np.argmax(gain[i]))] for i in range(steps)]
    r = int(np.argmax(best[-1]))
    placed = []
    for i in range(steps - 1, -1, -1):
        placed.append(runs[r])
        r = int(back[i, r])
    return placed[::-1]


def hub_corrected(similarity: np.ndarray, k: int = HUB_K) -> np.ndarray:
    """CSLS (cross-domain similarity local scaling; Conneau et al. 2018, "Word translation without
    parallel data"), halved: similarity[i, r] - mean of run r's similarity to its k nearest steps / 2
    (the steps' own term is the same for every run of a step, so it cannot move one and is left out).
    A small embedder reads the topic first: a line about the dish in general ("put them in so
    they're steamed nicely") is near every step, so it is the best match of steps said elsewhere
    ("steam for about 15 minutes", said nine lines later). Taking off how near a run is to all the
    steps leaves what is near this step alone."""
    import numpy as np

    if similarity.size == 0:
        return similarity
    nearest = np.sort(similarity, axis=0)[-min(k, similarity.shape[0]):]
    return similarity - nearest.mean(axis=0, keepdims=True) / 2


def ground_steps(texts: Sequence[str], lines: Sequence[str], cited: Sequence[tuple[int, int] | None],
                 embed: Callable[[list[str]], np.ndarray], talk: Sequence[float] | None = None
                 ) -> list[Grounded]:
    """Each step text of `texts` placed on the lines (`lines`, numbered from 1) its words are said
    on, in order (see `align`); `embed` gives unit-length rows, so a dot product is the cosine."""
    if not texts:
        return []
    runs = spans(len(lines))
    vectors = embed([*texts, *span_texts(lines, runs)])
    similarity = vectors[:len(texts)] @ vectors[len(texts):].T
    where = {run: r for r, run in enumerate(runs)}
    return [Grounded(a, b, round(float(similarity[i, where[(a, b)]]), 3))
            for i, (a, b) in enumerate(align(hub_corrected(similarity), runs, cited, talk))]
