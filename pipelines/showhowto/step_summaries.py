"""Steps said on a preview or a recap: a line that lists, in order, steps the narrator does later or did before.

Why: real narration opens with the plan ("So we're going to cream the butter and sugar, add the eggs, mix in
the dry stuff, fold in the chips, and bake") and often closes on a recap ("So quick recap, old strings off,
clean the board, new strings in, stretch them and tune"). Such a line is all actions, so the label pass calls
it STEP and the 1.5B model writes a step from it: on held-out sets 11-13 most intro and outro steps left were
previews and recaps. Neither a worked example that labels one TALK (thirteenth pass) nor the line's
similarity to the other steps tells them apart: a preview's clauses are as near the other steps as a real
step's clauses are (0.5-0.7 cosine either way).

What does tell them apart is count and order. A preview names several actions that are each said again,
in the same order, on the lines of steps after it; a real step's line names at most one or two of the other
steps' actions. So a line's clauses (cut at commas, colons, semicolons, "and", "then") are compared with
the other steps' lines by the sentence embedder, and the steps it names are the most clauses matched one to
one, in order, each at cosine CLAUSE_MATCH or more (a monotonic alignment, as step_grounding.py places steps
and align-frames places frames). A line that names SUMMARY_STEPS or more steps, all after it, with at most
EDGE_STEPS steps before it, is a preview; mirrored, a recap. The position matters: a step in the middle of
the procedure that repeats earlier actions (a second screw driven like the first) is never taken for one.

A terse list's items are single words ("So: scrub, dry, sand, oil, wipe, repeat"), which an embedder reads
poorly alone; they are the steps' own verbs and nouns, so a single word names the steps whose lines say it
(by Porter stem), unless half the steps or more do (then it is a word of talk: "so", "now"). A lone word
in a line ("First, I'm going to give it a good scrub...") is a marker, not a list's item, so single words
are read only where a line has LISTED_WORDS or more of them.

On the truths of sets 1-13 and the six test narrations (89 narrations, 1,062 lines of steps) the phrases alone
read 19 lines as previews or recaps and no step's line; on the truths of sets 1-15, the six and the pressure
cooker (110 narrations) they read 27, and with the single words 36 (the 9 more: 8 recaps with single words among
their items, one preview), still no step's line. On blind set 14 the phrases dropped one recap step and no true
step, and missed two past-tense recaps of short clauses ("So we washed it, taped it off, sanded it down..."); on
blind set 15 they dropped one preview (a list of the tools) and no true step; reading each step's clauses too, at
0.5, gave the same steps there, so it was not kept. The single words were designed after set 15 (its "So: scrub,
dry, sand, oil, wipe, repeat" step) and measured on blind set 16, where they dropped one recap step more than the
phrases alone and no true step: evaluation/showhowto/RESULTS.md, fourteenth to seventeenth passes.

Unpunctuated speech runs a list together ("we'll wake up the yeast add the flour knead it and let it rise"): cut
at commas and "and", it is one or two long clauses that name no three steps. So a line with a clause of
RUN_ON_WORDS or more is also read as windows of 2-4 consecutive words (window_steps), each naming the one step it
is nearest to where that is WINDOW_MATCH or more. On the truths of the spent sets 1-18, the six test narrations and
the tune split (163 narrations, 1,921 lines of true steps) this reads 6 of the 18 intro or outro lists run together
without commas and 12 such lines in all more than the clauses alone, and no true step's line; without the
nearest-step condition, or at 0.45, it read up to 9 true steps' lines. On blind set 19 it dropped one preview step
and no true step (twenty-first pass). Still missed: lists whose words are not the steps' own ("emptied it" for
"get all the food out"), and windows that the embedder places nearer a step with the same object ("lift the
arm" nearest "lower the arm back down").

A list's short clause often sits under CLAUSE_MATCH even with its own step's lines ("taped it off" against "I'm
taping off the paint around the lens"), yet nearer that step than any other: so a clause also names the step it is
nearest to, where that is NEAREST_MATCH or more (phrase_names). On the truths of the spent sets 1-25, the six test
narrations and the tune split, this reads 16 intro or outro lines more than the bar alone (93 against 77) and no
true step's line; at 0.35 it read one (a tie-dye step's "Lay it flat, pinch the center, and twist it..."). Read off
the saved outputs of sets 4, 8, 9 and 19-25 it drops one preview step and one recap step more, and no step on a
true step's line (twenty-seventh pass).

A clause that opens on a condition ("once it's dry", "when that's cool") says when a step is done, not a step, yet
it can name one: blind set 38's drywall line "Once it's dry, sand it smooth ... and wipe off the dust." named three
steps done before it ("let that dry", a sanding, "wipe the dust off"), with two after it, and its step was moved off
its line as a recap's. With `conditions_name_nothing` (vi extract-steps --skip-conditions) such a clause names no
step. On the truths of the spent sets 1-39 it changes nothing (108 of 1,103 intro and outro lines read as previews
or recaps either way, 2 of 2,609 true steps' first lines). Off by default: on blind set 40, aimed at it, it
changed no step (thirty-eighth pass).

Everything here is a pure function of texts and an embedder passed in, so it is tested with fakes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache

from vi.pipelines.common.word_stems import stem

CLAUSE_MATCH = 0.45  # cosine a clause needs with a step's lines to name that step
NEAREST_MATCH = 0.4  # cosine a clause needs with the step's lines it is nearest to, to name that step
SUMMARY_STEPS = 3  # steps a line must name, in order, to be a preview or a recap
EDGE_STEPS = 2  # steps that may start before a preview (or after a recap): a stray greeting or outro step
LISTED_WORDS = 2  # one-word clauses a line needs for its single words to be read as a list's items
RUN_ON_WORDS = 8  # a clause this long may be a list run together without commas: its words are read as windows
WINDOW_WORDS = (2, 4)  # the fewest and most consecutive words a window of a run-together list holds
WINDOW_MATCH = 0.5  # cosine a window needs with the step it is nearest to, to name it
# A clause that opens on when or whether ("once it's dry", "when that's cool", "if it squeaks") says when a step is
# done, not a step: a list's items are actions. Words a clause may open with before it are fillers ("so once").
CONDITION = re.compile(r"^(?:(?:so|okay|ok|alright|right|now|and|then|but|just)\s+)*"
                       r"(?:once|when|whenever|after|as soon as|until|till|while|if|before)\b")
CLAUSE_BREAKS = re.compile(r"[,;:]\s*(?:and\s+)?(?:then\s+)?|\s+and then\s+|\s+then\s+|\s+and\s+")
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def clauses(text: str) -> list[str]:
    """The parts of a line between commas, colons, semicolons, "and" and "then", in order, one word or more."""
    parts = CLAUSE_BREAKS.split(text.strip().rstrip(".!?").lower())
    return [part.strip() for part in parts if part.split()]


@lru_cache(maxsize=1024)  # a step's lines are read once for every line and every one-word clause
def stems(text: str) -> frozenset[str]:
    """The Porter stems of a text's words ("sanded", "sanding" and "sand" share one)."""
    return frozenset(stem(word) for word in WORD.findall(text.lower()))


def word_names(word: str, steps: Sequence[str]) -> list[bool]:
    """Which of `steps` a one-word clause names: those whose lines say the word (by stem), unless they are half
    the steps or more. An embedder reads one word alone poorly, and a recap's "scrub, dry, sand, oil" is the
    steps' own verbs; a word said on most steps ("so", "now", "it") names none of them."""
    said = [stems(text) for text in steps]
    key = stem(word)
    hits = [key in words for words in said]
    return hits if 2 * sum(hits) < len(steps) else [False] * len(steps)


def steps_named(matches: Sequence[Sequence[bool]]) -> int:
    """The most (clause, step) pairs of `matches` (clauses x steps, in order) taken one to one and in order
    on both sides: the longest common subsequence, by dynamic programming."""
    steps = len(matches[0]) if matches else 0
    best = [[0] * (steps + 1) for _ in range(len(matches) + 1)]
    for i, row in enumerate(matches, 1):
        for j in range(1, steps + 1):
            best[i][j] = max(best[i - 1][j], best[i][j - 1], best[i - 1][j - 1] + bool(row[j - 1]))
    return best[-1][-1]


def summary_kind(line: str, before: Sequence[str], after: Sequence[str],
                 embed: Callable[[list[str]], object], conditions_name_nothing: bool = False) -> str | None:
    """"preview", "recap" or None for `line`, given the lines said on the steps that start `before` it and
    `after` it (each step's lines as one text, in order); `embed(texts)` gives unit-length vectors. A clause
    of two words or more names a step by the embedder, a single word by the step's own words (word_names)."""
    sides = [(kind, named, other) for kind, named, other in (("preview", after, before), ("recap", before, after))
             if len(named) >= SUMMARY_STEPS and len(other) <= EDGE_STEPS]
    parts = [part for part in clauses(line) if not (conditions_name_nothing and CONDITION.match(part))]
    run_on = any(len(part.split()) >= RUN_ON_WORDS for part in parts)
    if not sides or (len(parts) < SUMMARY_STEPS and not run_on):
        return None
    phrases = [part for part in parts if len(part.split()) >= 2]
    listed = len(parts) - len(phrases) >= LISTED_WORDS  # a lone word is a "first" or "so", not a list's item
    for kind, named, other in sides:
        everyone = list(other) + list(named)
        if len(parts) >= SUMMARY_STEPS:
            similar = iter(phrase_names(phrases, everyone, len(other), embed))
            matches = [next(similar) if len(part.split()) >= 2
                       else word_names(part, everyone)[len(other):] if listed else [False] * len(named)
                       for part in parts]
            if steps_named(matches) >= SUMMARY_STEPS:
                return kind
        if run_on and window_steps(WORD.findall(line.lower()), everyone, len(other), embed) >= SUMMARY_STEPS:
            return kind
    return None


def phrase_names(phrases: Sequence[str], steps: Sequence[str], skip: int,
                 embed: Callable[[list[str]], object]) -> list[list[bool]]:
    """Which of `steps[skip:]` each phrase of a line names: every step at cosine CLAUSE_MATCH or more, and the one
    step of all `steps` it is nearest to where that is NEAREST_MATCH or more. The nearest step is a relative
    reading: a list's short clause ("taped it off", "pop the new sticks in") is often nearer its own step than
    any other while under the absolute bar."""
    if not phrases:
        return []
    import numpy as np

    vectors = np.asarray(embed(list(phrases) + list(steps)))
    similarity = vectors[:len(phrases)] @ vectors[len(phrases):].T
    named = similarity >= CLAUSE_MATCH
    nearest = similarity.argmax(axis=1)
    named[np.arange(len(phrases)), nearest] |= similarity.max(axis=1) >= NEAREST_MATCH
    return named[:, skip:].tolist()


def window_steps(words: Sequence[str], steps: Sequence[str], skip: int, embed: Callable[[list[str]], object]) -> int:
    """How many of `steps[skip:]` the `words` of a line name when read as a list run together ("we'll wake up the
    yeast add the flour knead it and let it rise"): every window of WINDOW_WORDS consecutive words names the one
    step of all `steps` it is nearest to, where that cosine is WINDOW_MATCH or more; counted are the most steps
    named one to one and in order by windows that do not overlap. Nearest, not every step above a bar: a window
    is a few words cut from anywhere, and one that says the task's object ("the hinge from") is near every step
    about it, so alone it would name several and make a real step's line a plan of the rest."""
    import numpy as np

    shortest, longest = WINDOW_WORDS
    windows = [(i, size) for size in range(shortest, longest + 1) for i in range(len(words) - size + 1)]
    if not windows or len(steps) <= skip:
        return 0
    vectors = np.asarray(embed([" ".join(words[i:i + size]) for i, size in windows] + list(steps)))
    similarity = vectors[:len(windows)] @ vectors[len(windows):].T
    nearest = similarity.argmax(axis=1)
    names = {}  # (first word, named step) -> the sizes of the windows there that name it
    for (i, size), step, cosine in zip(windows, nearest.tolist(), similarity.max(axis=1).tolist()):
        if step >= skip and cosine >= WINDOW_MATCH:
            names.setdefault((i, step - skip), []).append(size)
    # best[p][j]: the most steps j.. named in order by windows of words p.. (a dynamic programme from the end)
    count = len(steps) - skip
    best = [[0] * (count + 1) for _ in range(len(words) + 1)]
    for p in range(len(words) - 1, -1, -1):
        for j in range(count - 1, -1, -1):
            best[p][j] = max([best[p + 1][j], best[p][j + 1]]
                             + [1 + best[p + size][j + 1] for size in names.get((p, j), [])])
    return best[0][0]


def drop_summaries(steps: list[tuple[int, int, str]], lines: Sequence[str], embed: Callable[[list[str]], object],
                   repairs: list[str], names, conditions_name_nothing: bool = False) -> list[tuple[int, int, str]]:
    """`steps` (first line, last line, text; 1-based line numbers into `lines`, in order) less those said on a
    preview or a recap: a step whose first line is one is dropped, or starts on its next line where that line
    is no other step's; each is listed in `repairs`."""
    said = [" ".join(lines[n - 1].strip() for n in range(first, last + 1)) for first, last, _ in steps]
    kinds: dict[int, str | None] = {}
    for first in sorted({first for first, _, _ in steps}):
        before = [text for (a, _, _), text in zip(steps, said) if a < first]
        after = [text for (a, _, _), text in zip(steps, said) if a > first]
        kinds[first] = summary_kind(lines[first - 1], before, after, embed, conditions_name_nothing)
    kept = []
    for k, (first, last, text) in enumerate(steps):
        kind = kinds[first]
        if kind is None:
            kept.append((first, last, text))
            continue
        elsewhere = {n for j, (a, b, _) in enumerate(steps) if j != k for n in range(a, b + 1)}
        rest = [n for n in range(first + 1, last + 1) if n not in elsewhere]
        listed = "ahead" if kind == "preview" else "done"
        if rest and rest[0] == first + 1:
            repairs.append(f"step {text!r}: {names(first, first)} lists the steps {listed} (a {kind}), so the step "
                           f"starts on {names(first + 1, first + 1)}")
            kept.append((first + 1, last, text))
        else:
            repairs.append(f"step {text!r}: said on {names(first, last)}, a {kind} (a list of the steps {listed}), "
                           "not one of them: dropped")
    return kept
