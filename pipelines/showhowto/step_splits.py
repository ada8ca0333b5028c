"""Steps the model merged: a written step whose later clauses are said on a line of their own, cut there.

Why: the 1.5B model writes brief actions said on consecutive lines as one step (blind set 36's tacos: "Peel and
dice two sweet potatoes, and toss them with oil, cumin, and salt." for "peel and dice two sweet potatoes" / "toss
them with oil cumin and salt"). Grounding places such a step on its first line (a longer run pays SPAN_COST and
the step's words lean to its first action), the line of the second action is then on no step, and the
labelled-run writer does not see it either: the label pass calls it MORE, part of the run the step starts.
Blind sets 4, 8 and 9 miss the found target mostly by such merges.

How: a step's text is cut at a clause break (step_summaries.CLAUSE_BREAKS: a comma, "and", "then") into a head
and a tail, each of two words or more. The sentence embedder compares the tail with the step's first line and
with each later line up to the next step's first (at most MAX_SPAN - 1 lines on, none labelled TALK): a cut is a
candidate where the tail is said on such a line (cosine SPLIT_MATCH or more) better than on the step's first line
(by SPLIT_GAIN or more), and the head is said on the first line better than on that one. The best candidate of a
step is taken, and the parts before and after it are cut again the same way, each onto its own side's lines.
What is cut is in the model's own words.

The embedder cannot tell a second action from a detail said after the first ("slice the oranges into thin
rounds, about a quarter inch thick" cut at the comma matches the detail's line as well), so the caller
(extract_steps.split_merged) makes a cut only where the line reads as a step's first line and not as talk to the
line probes. On the saved outputs of the spent sets 27, 29, 31, 34 and 35 the embedder found 33 cuts, 9 of them
onto a true step that had no step; the probes keep 7 of those 9 and 3 of the other 24 ("flip them every hour",
the muffins' "then pour in one cup of milk...", a downspout's "the bottom piece goes back on underneath it").
The LLM's reading of the tail as an action against a detail of the step before did not part them (details up to
+5.7 nats, true steps from +0.6).

A cut step's head keeps the step's first line, where grounding placed the whole merged step; that line can be a
false start the next line corrects (blind set 38's engine). head_lines (vi extract-steps --reground-heads) moves the
head to the line of its part it is said on, by the bar a cut is made by. Off by default: blind set 40, aimed at
it, had no cut made (thirty-eighth pass).

Pure functions of similarities and labels: tested with small fakes, without a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vi.pipelines.showhowto.step_grounding import MAX_SPAN
from vi.pipelines.showhowto.step_summaries import CLAUSE_BREAKS

if TYPE_CHECKING:
    import numpy as np

# Set before any case was read, not fitted: a clear match (steps in the model's words meet the lines they are said
# on at about 0.7-1.0 in grounding's repairs), and clearly better than on the step's own first line.
SPLIT_MATCH = 0.5  # cosine a tail needs with the line it is cut to
SPLIT_GAIN = 0.15  # and how much better than with the step's first line
CUT_BREAKS = re.compile(CLAUSE_BREAKS.pattern, re.IGNORECASE)  # on the model's text, in its own case


@dataclass(frozen=True)
class Cut:
    step: int  # the step's index in the list given
    at: int  # where in its text the clause break starts, and where the text after it starts
    resume: int
    line: int  # the line the text after the break is said on (1-based, as the steps' lines)
    tail: str  # the part cut off, as a sentence (up to the next cut found in that part, if any)
    match: float  # the tail's cosine with that line, and with `first`, the first line of the part it was cut from
    before: float
    first: int


def sentence(text: str) -> str:
    """A clause as a step's text: its first letter upper case, ending in a full stop unless it ends otherwise."""
    text = text.strip().rstrip(",;:").strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def breaks(text: str, lo: int = 0, hi: int | None = None) -> list[tuple[int, int]]:
    """The clause breaks of `text[lo:hi]` as (where the break starts, where the text after it starts), each
    leaving two words or more on both sides."""
    hi = len(text) if hi is None else hi
    return [(found.start(), found.end()) for found in CUT_BREAKS.finditer(text, lo, hi)
            if len(text[lo:found.start()].split()) >= 2 and len(text[found.end():hi].rstrip(".!?").split()) >= 2]


def candidate_lines(first: int, next_first: int, labels: dict[int, str]) -> list[int]:
    """The lines after a step's first a tail may be cut to: before the next step's first, at most MAX_SPAN - 1
    on, none labelled TALK."""
    return [n for n in range(first + 1, min(next_first, first + MAX_SPAN)) if labels.get(n) != "TALK"]


def best_cut(step: int, text: str, lo: int, hi: int, first: int, lines: Sequence[int], texts: Sequence[str],
             embed: Callable[[list[str]], np.ndarray]) -> Cut | None:
    """The cut of `text[lo:hi]` (a part said from line `first`) whose tail is said best, against the part's
    first line, on one of `lines`, by the rule in the module's docstring; None where no cut passes it."""
    points = breaks(text, lo, hi)
    if not points or not lines:
        return None
    said = [texts[first - 1], *(texts[n - 1] for n in lines)]
    parts = [sentence(part) for at, resume in points for part in (text[lo:at], text[resume:hi])]
    vectors = embed([*parts, *said])
    similarity = vectors[:len(parts)] @ vectors[len(parts):].T  # (head, tail) rows x (first, *lines) columns
    best = None
    for k, (at, resume) in enumerate(points):
        heads, tails = similarity[2 * k], similarity[2 * k + 1]
        for j, line in enumerate(lines, 1):
            match, before = float(tails[j]), float(tails[0])
            if match >= SPLIT_MATCH and match - before >= SPLIT_GAIN and heads[0] > heads[j] and (
                    best is None or match - before > best.match - best.before):
                best = Cut(step, at, resume, line, parts[2 * k + 1], round(match, 3), round(before, 3), first)
    return best


def find_cuts(steps: Sequence[tuple[int, int, str]], texts: Sequence[str], labels: dict[int, str],
              embed: Callable[[list[str]], np.ndarray]) -> list[Cut]:
    """The cuts of `steps` (first line, last line, text; in order, lines numbered from 1 over `texts`), in the
    order of each step's text: a step's best cut, then the best of the part before it (onto the lines before the
    cut's) and of the part after it (onto the lines after), and so on (a step that merged three lines)."""
    cuts: list[Cut] = []

    def search(step: int, text: str, lo: int, hi: int, first: int, lines: list[int]) -> None:
        cut = best_cut(step, text, lo, hi, first, lines, texts, embed)
        if cut is not None:
            search(step, text, lo, cut.at, first, [n for n in lines if n < cut.line])
            cuts.append(cut)
            search(step, text, cut.resume, hi, cut.line, [n for n in lines if n > cut.line])

    for i, (first, _, text) in enumerate(steps):
        next_first = steps[i + 1][0] if i + 1 < len(steps) else len(texts) + 1
        search(i, text, 0, len(text), first, candidate_lines(first, next_first, labels))
    return cuts


def head_lines(steps: Sequence[tuple[int, int, str]], cuts: Sequence[Cut], kept: Sequence[bool],
               texts: Sequence[str], embed: Callable[[list[str]], np.ndarray]) -> dict[int, int]:
    """Where the head of each step cut by a kept cut is said, where that is not the step's first line: {step index:
    line}. The whole merged step was placed on its first line, and the head can be said on a later line of its part
    (a false start the next line corrects: "And then start pouring in the oil." / "Oh, wait, no, first check your
    owner's manual ..."); the head moves to the line of its part (before its cut's line) it is said on best, by the
    bar a tail is cut by: SPLIT_MATCH or more, and SPLIT_GAIN better than on the first line."""
    heads = {}
    for cut, keep in zip(cuts, kept, strict=True):
        if keep and (cut.step not in heads or cut.at < heads[cut.step].at):
            heads[cut.step] = cut
    moved = {}
    for step, cut in heads.items():
        first = steps[step][0]
        lines = list(range(first, cut.line))
        if len(lines) < 2:
            continue
        head = sentence(steps[step][2][:cut.at])
        vectors = embed([head, *(texts[n - 1] for n in lines)])
        similarity = (vectors[:1] @ vectors[1:].T)[0]
        best = int(similarity.argmax())
        if best and similarity[best] >= SPLIT_MATCH and similarity[best] - similarity[0] >= SPLIT_GAIN:
            moved[step] = lines[best]
    return moved


def apply_cuts(steps: Sequence[tuple[int, int, str]], cuts: Sequence[Cut], kept: Sequence[bool],
               heads: dict[int, int] | None = None) -> list[tuple[int, int, str]]:
    """`steps` with the `cuts` (find_cuts' list) that are `kept` made: each part of a step's text, between two
    cuts made, is a step from its cut's line to the line before the next part's (within the step's lines; the
    last part to the step's last line, or its own line alone). A cut step's head starts on the line `heads` gives
    for it (head_lines), where it gives one."""
    made: dict[int, list[Cut]] = {}
    for cut, keep in zip(cuts, kept, strict=True):
        if keep:
            made.setdefault(cut.step, []).append(cut)
    out = []
    for i, (first, last, text) in enumerate(steps):
        parts = sorted(made.get(i, []), key=lambda cut: cut.at)
        starts = [(heads or {}).get(i, first) if parts else first, *(cut.line for cut in parts)]
        bounds = [0, *(cut.resume for cut in parts)], [*(cut.at for cut in parts), len(text)]
        for k, (lo, hi) in enumerate(zip(*bounds, strict=True)):
            end = max(starts[k], last if k == len(parts) else min(last, starts[k + 1] - 1))
            out.append((starts[k], end, sentence(text[lo:hi]) if parts else text))
    return out
