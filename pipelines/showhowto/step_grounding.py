"""Where each step of `vi extract-steps` is said: the steps' texts aligned to the narration lines.

The model writes the steps and cites each one's first and last line, but the 1.5B default model
cites the line before or after the one it paraphrases, sometimes several lines off (on the real
pressure-cooker transcript, "Steam potatoes for about 15 minutes" cited line 11, said on line 18).
So a step's lines are not taken from its citation: each step's text is compared with every run
of one to MAX_SPAN consecutive lines, and the steps are placed by an alignment that keeps them in
the model's order where the words allow (a step starts no earlier than the one before it ends:
two steps share at most one line), as align-frames places frames.

How alike a step and a run are is two signals added, as hybrid retrieval scores a passage:
- the cosine of their sentence embeddings (core/models/text_embedding.py): the meaning, words
  paraphrased ("pour in the water" / "dump that in");
- the share of the step's distinctive words the run says (`word_overlap`), each word weighted by
  how few of this narration's lines say it (inverse document frequency), times LEXICAL_WEIGHT.
  A small embedder reads the topic first: "Steam the potatoes for 15 minutes" is closer to "put
  the potatoes in so they're steamed" than to "I'm going to put them in for about 15 minutes";
  in a narration about potatoes, "15" and "minutes" are what tells the lines apart.

The order is soft: the small model sometimes lists a step before one the narrator does first
(the pressure cooker's 15 minutes before the water), and keeping such a step in the model's order
puts it on whatever lines lie between its neighbours. A step may leave the model's order for the
run it matches best anywhere, at a cost of ORDER_COST: only a step clearly said elsewhere moves.
The steps are then in the narration's order (cited_steps sorts them by line and says so).

The citation is one more signal: a prior that favours runs starting and ending near the cited
lines (CITE_WEIGHT, falling off over CITE_SPREAD lines) breaks ties between lines that say the
same thing, and is weak on purpose: on the pressure cooker the 1.5B model's citations were up to
15 lines off. The label pass's P(TALK) of the lines is another (TALK_WEIGHT per line), so a step
is not grounded on talk that shares its words (the intro's "today I'm going to make baked
potatoes" is the line likest "remove the potatoes and eat"); and a run of lines pays SPAN_COST per
line past its first, as a longer text matches more of a step's words whether or not they are said
there.

Everything here is a pure function of texts and numbers: the embedder comes in as a function
and the alignment takes a matrix, so both are tested with small fakes, without a model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from vi.pipelines.showhowto.step_citations import content_words

MAX_SPAN = 3  # lines one step may span (the hand-written truths' longest; a step said over more is cut)
CITE_WEIGHT = 0.03  # cosine similarity the citation is worth at its own lines, at each end: a tie-breaker
SPAN_COST = 0.03  # cosine similarity each line past a run's first must earn (a longer text matches more words)
CITE_SPREAD = 2.0  # lines: the citation's prior falls to exp(-1/2) of its weight this far away
TALK_WEIGHT = 0.15  # cosine similarity taken off per line, times the label pass's P(TALK) of the line
# A step's distinctive words all said in a run are worth half a cosine: as much as the gap between
# a line on the step's topic and one that paraphrases it (0.5-0.8 with minilm), so words decide
# between lines on the same topic and the embedding between lines that share no word.
LEXICAL_WEIGHT = 0.5
# What leaving the model's order costs, in the same units: more than the citation and span terms
# together, about what the words of a step said nowhere else add; a step moves only when the run it
# matches best is better than every run between its neighbours by this much.
ORDER_COST = 0.3

_SUFFIXES = ("ing", "ed", "es", "s")


def stem(word: str) -> str:
    """A light stem, enough to match a step's words to the narration's ("steamed" / "steaming" /
    "steam", "potatoes" / "potato", "chopped" / "chop"): one inflection off, a final e off, a
    doubled final consonant made single. Not a linguist's stemmer: both sides get the same one."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[:-len(suffix)]
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and re.match(r"[b-df-hj-np-tv-z]", word[-1]):
        word = word[:-1]
    return word


def stems(text: str) -> set[str]:
    return {stem(w) for w in content_words(text)}


@dataclass(frozen=True)
class Grounded:
    first: int  # 1-based line numbers, as the model cites them
    last: int
    similarity: float  # the step's cosine similarity to its lines' text
    in_order: bool = True  # False: placed before a step the model listed earlier (its words are said there)


def spans(count: int, max_span: int = MAX_SPAN) -> list[tuple[int, int]]:
    """Every run (first, last) of 1..max_span consecutive lines of `count`, 1-based, in order."""
    return [(a, b) for a in range(1, count + 1) for b in range(a, min(count, a + max_span - 1) + 1)]


def span_texts(texts: Sequence[str], runs: Sequence[tuple[int, int]]) -> list[str]:
    return [" ".join(t.strip() for t in texts[a - 1:b]) for a, b in runs]


def word_overlap(texts: Sequence[str], lines: Sequence[str], runs: Sequence[tuple[int, int]]) -> np.ndarray:
    """`[i, r]`: the share of step i's content words (stemmed) that run r says, each word weighted
    by its inverse document frequency over `lines` (a word no line says weighs the most, and is
    matched nowhere)."""
    line_words = [stems(t) for t in lines]
    count = len(lines)
    frequency: dict[str, int] = {}
    for words in line_words:
        for w in words:
            frequency[w] = frequency.get(w, 0) + 1

    def idf(word: str) -> float:  # BM25's, always positive
        df = frequency.get(word, 0)
        return math.log(1 + (count - df + 0.5) / (df + 0.5))

    run_words = [set().union(*line_words[a - 1:b]) for a, b in runs]
    overlap = np.zeros((len(texts), len(runs)))
    for i, text in enumerate(texts):
        weights = {w: idf(w) for w in stems(text)}
        total = sum(weights.values())
        if total > 0:
            overlap[i] = [sum(v for w, v in weights.items() if w in said) / total for said in run_words]
    return overlap


def citation_prior(run: tuple[int, int], cited: tuple[int, int] | None) -> float:
    """CITE_WEIGHT at each end of the cited run, falling off with the distance in lines."""
    if cited is None:
        return 0.0
    return sum(CITE_WEIGHT * math.exp(-((end - c) ** 2) / (2 * CITE_SPREAD ** 2))
               for end, c in zip(run, cited))


def align(similarity: np.ndarray, runs: Sequence[tuple[int, int]], cited: Sequence[tuple[int, int] | None],
          talk: Sequence[float] | None = None, order_cost: float = ORDER_COST) -> list[tuple[tuple[int, int], bool]]:
    """The run of lines each step is placed on, and whether it kept the model's order:
    `similarity[i, r]` is step i's similarity to `runs[r]`. Maximises the sum over steps of
    gain = similarity + citation prior - TALK_WEIGHT x P(TALK) summed over the run's lines
    (`talk`, per 1-based line - 1) - SPAN_COST per line past the first; the steps that keep the
    order start at or after the line the previous such step ends on; a step that leaves it takes
    its best run anywhere and pays `order_cost` (infinite: the order is kept, unless more steps
    than lines make that impossible).

    Exact: a DP over steps x states, a state being the run of the last step placed in order (or
    none yet); the best value of the states ending on or before each line is a running maximum."""
    steps, count = similarity.shape
    if steps == 0:
        return []
    if count != len(runs) or steps != len(cited):
        raise ValueError(f"{steps}x{count} similarities for {len(cited)} steps and {len(runs)} runs")
    talk_cost = [(TALK_WEIGHT * sum(talk[line - 1] for line in range(a, b + 1)) if talk is not None else 0.0)
                 + SPAN_COST * (b - a) for a, b in runs]
    gain = np.array([[similarity[i, r] + citation_prior(runs[r], cited[i]) - talk_cost[r]
                      for r in range(count)] for i in range(steps)])
    best_anywhere = gain.argmax(axis=1)
    order_cost = order_cost if math.isfinite(order_cost) else 1e6  # finite: a step may always be placed
    ends = [b for _, b in runs] + [0]  # state `count`: no step placed in order yet
    last_line = max(ends)
    value = np.full(count + 1, -np.inf)
    value[count] = 0.0
    back = np.zeros((steps, count + 1), dtype=int)  # the state before step i; -1 - s: step i left the order
    for i in range(steps):
        # ending[e]: the best (value, state) among states ending on line <= e
        ending: list[tuple[float, int]] = [(-np.inf, -1)] * (last_line + 1)
        for s, e in enumerate(ends):
            if value[s] > ending[e][0]:
                ending[e] = (value[s], s)
        for e in range(1, last_line + 1):
            if ending[e - 1][0] > ending[e][0]:
                ending[e] = ending[e - 1]
        out_of_order = gain[i, best_anywhere[i]] - order_cost
        new = value + out_of_order  # step i leaves the order: the state stays
        back[i] = -1 - np.arange(count + 1)
        for r, (a, _) in enumerate(runs):
            before, source = ending[a]
            if source >= 0 and before + gain[i, r] > new[r]:
                new[r], back[i, r] = before + gain[i, r], source
        value = new
    state = int(np.argmax(value))
    placed = []
    for i in range(steps - 1, -1, -1):
        source = int(back[i, state])
        if source < 0:  # left the order: the state is the one before
            placed.append((runs[int(best_anywhere[i])], False))
            state = -1 - source
        else:
            placed.append((runs[state], True))
            state = source
    return placed[::-1]


def ground_steps(texts: Sequence[str], lines: Sequence[str], cited: Sequence[tuple[int, int] | None],
                 embed: Callable[[list[str]], np.ndarray], talk: Sequence[float] | None = None
                 ) -> list[Grounded]:
    """Each step text of `texts` placed on the lines (`lines`, numbered from 1) its words are said
    on (see `align`); `embed` gives unit-length rows, so a dot product is the cosine."""
    if not texts:
        return []
    runs = spans(len(lines))
    vectors = embed([*texts, *span_texts(lines, runs)])
    cosine = vectors[:len(texts)] @ vectors[len(texts):].T
    similarity = cosine + LEXICAL_WEIGHT * word_overlap(texts, lines, runs)
    where = {run: r for r, run in enumerate(runs)}
    return [Grounded(a, b, round(float(cosine[i, where[(a, b)]]), 3), kept)
            for i, ((a, b), kept) in enumerate(align(similarity, runs, cited, talk))]
