"""Which narration lines a step of `vi extract-steps` comes from: the model's citations checked,
moved onto the lines its words come from, and judged (a step on talk only, a copied line).

The model cites each step's first and last line (`[n]` in the prompt); small models cite the line
before the one they paraphrase, repeat a step across a chunk's overlap or go round their own list
again, or list the narration itself as steps. These pure functions repair what can be repaired and
say what they did.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from vi.core.records import finite_number


def line_number(value: Any) -> int | None:
    number = finite_number(value)
    return int(number) if number is not None and number == int(number) else None


@dataclass(frozen=True)
class SegmentNames:
    """How a message names the model's line n: "segment i", i its index in transcript.segments, the
    number `steps.items[].lines` holds (0-based; docs/records.md). The model cites the speech lines
    numbered from 1 as its prompt shows them, and a transcript with a [Music] segment shifts the two
    apart, so the index comes from the lines' own indices, not n - 1. Only a citation outside the
    prompt is said in the prompt's numbers ("prompt lines"): it names no segment."""

    indices: Sequence[int] | None = None  # line n is segment indices[n - 1]; None: every segment is speech

    def index(self, line: int) -> int:
        return self.indices[line - 1] if self.indices is not None else line - 1

    def __call__(self, first: int, last: int | None = None) -> str:
        last = first if last is None else last
        if self.indices is not None and not (1 <= first <= len(self.indices) and 1 <= last <= len(self.indices)):
            return f"prompt lines {first}-{last}"  # a number the model typed outside its prompt
        if last == first:
            return f"segment {self.index(first)}"
        return f"segments {self.index(first)}-{self.index(last)}"


# Words that say nothing about which line a step comes from.
_STOPWORDS = frozenset("""a an and the to of in on into onto for with it its it's this that these
those then now so um uh just like is are be was you your we our i i'm my me they them there here
till until up down out off over at by from as or but if when while some all one bit little""".split())
SNAP_WINDOW = 2  # lines a citation may move by, at each end
SNAP_MARGIN = 0.15  # how much better (F1 of content words) the moved lines must match


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in _STOPWORDS and len(w) > 1}


def _match(step: set[str], lines: list[set[str]]) -> float:
    """F1 between a step's content words and those of a run of lines."""
    said = set().union(*lines)
    common = len(step & said)
    return 0.0 if not common else 2 * common / (len(step) + len(said))


def snap_to_lines(first: int, last: int, text: str, texts: list[str]) -> tuple[int, int]:
    """The run of lines near the cited one that the step's words come from.

    Small models cite the line before the one they paraphrase (their text is right, their
    number one off), so the cited run may move by up to SNAP_WINDOW lines at each end, to
    the run whose content words best match the step's (F1), when that is clearly better
    (SNAP_MARGIN). A step that shares no words with the lines keeps its citation."""
    words = content_words(text)
    if not words:
        return first, last
    line_words = [content_words(t) for t in texts]
    cited = _match(words, line_words[first - 1:last])
    best, where = cited, (first, last)
    span = last - first
    for a in range(max(1, first - SNAP_WINDOW), min(len(texts), first + SNAP_WINDOW) + 1):
        for b in range(a, min(len(texts), last + SNAP_WINDOW, a + span + SNAP_WINDOW) + 1):
            score = _match(words, line_words[a - 1:b])
            if score > best + 1e-9:
                best, where = score, (a, b)
    return where if best >= cited + SNAP_MARGIN else (first, last)


def cited_steps(raw: list[Any], count: int, texts: list[str] | None = None, names: SegmentNames = SegmentNames()
                ) -> tuple[list[tuple[int, int, str]], list[str]]:
    """The model's steps as (first line, last line, text), lines numbered 1..`count`: checked,
    moved onto the lines their words come from (`texts`, the lines' text, when given), in
    order, without overlaps or repeats: (steps, repairs made, naming segments by `names`)."""
    cited, repairs = [], []
    for i, step in enumerate(raw, 1):
        step = step if isinstance(step, dict) else {}
        text = str(step.get("text") or step.get("instruction") or "").strip()
        first, last = line_number(step.get("first_line")), line_number(step.get("last_line"))
        if not text:
            repairs.append(f"step {i}: no text, dropped")
            continue
        if first is None and last is None:
            repairs.append(f"step {i}: cites no line number, dropped")
            continue
        if first is None or last is None:
            first = last = first if last is None else last
            repairs.append(f"step {i}: cites one line only, used for both ends")
        if first > last:
            first, last = last, first
            repairs.append(f"step {i}: first line after last line, swapped")
        if last < 1 or first > count:
            repairs.append(f"step {i}: cites prompt lines {first}-{last}, outside the {count} "
                           "lines numbered from 1 in its prompt, dropped")
            continue
        if first < 1 or last > count:
            first, last = max(first, 1), min(last, count)
            repairs.append(f"step {i}: citation cut to the prompt's lines 1-{count}, {names(first, last)}")
        if texts is not None and not step.get("fixed_lines"):
            moved = snap_to_lines(first, last, text, texts)
            if moved != (first, last):
                repairs.append(f"step {i}: cited {names(first, last)}, moved to {names(*moved)}, "
                               "where its words come from")
                first, last = moved
        cited.append((first, last, text))
    ordered = sorted(cited, key=lambda c: (c[0], c[1]))
    if ordered != cited:
        repairs.append("steps reordered by their lines")
    steps: list[list] = []
    kept: dict[str, list] = {}  # each step kept, by its text's casefold
    for first, last, text in ordered:
        if steps and steps[-1][2].casefold() == text.casefold():  # often from chunk overlap
            steps[-1][1] = max(steps[-1][1], last)
            repairs.append(f"repeated step {text!r} merged")
            continue
        if (same := kept.get(text.casefold())) is not None:
            # the 1.5B model can go round its list again (set 8's guacamole: four steps written twice, the copies
            # pushed onto one late line); none of the 199 hand-written true step lists has a text twice: the first
            # stays
            repairs.append(f"step {text!r} ({names(first, last)}) repeats the step on {names(same[0], same[1])}, "
                           "dropped")
            continue
        if steps and first < steps[-1][1]:  # two steps may share one line, no more
            repairs.append(f"step {steps[-1][2]!r} ({names(steps[-1][0], steps[-1][1])}) overlapped "
                           f"the next one; cut to end at {names(max(steps[-1][0], first))}")
            steps[-1][1] = max(steps[-1][0], first)
        steps.append([first, last, text])
        kept[text.casefold()] = steps[-1]
    return [tuple(s) for s in steps], repairs


def all_talk(first: int, last: int, labels: dict[int, str]) -> bool:
    """Whether the label pass called every line first..last TALK (a line with no label, in a
    chunk's overlap, counts as not talk)."""
    return all(labels.get(line) == "TALK" for line in range(first, last + 1))


def drop_talk(cited: list[tuple[int, int, str]], labels: dict[int, str], repairs: list[str],
              names: SegmentNames = SegmentNames()) -> list[tuple[int, int, str]]:
    """The model's steps less those whose every cited line the label pass called TALK:
    `segmentation="filtered"`."""
    kept = []
    for first, last, text in cited:
        if all_talk(first, last, labels):
            repairs.append(f"step {text!r}: {names(first, last)} all labelled TALK, dropped")
            continue
        kept.append((first, last, text))
    return kept


COPY_RATIO = 0.97  # difflib's ratio at which a step's text is a narration line (up to case and a comma)
COPY_SHARE = 0.5  # more than this share of copied steps: the model listed lines instead of steps


def copied_steps(steps: list[Any], labels: dict[int, str], texts: list[str]) -> tuple[int, int]:
    """(how many of `steps` copy a narration line word for word, how many were looked at).

    The 1.5B default model sometimes answers with the narration itself, one line per "step"
    ("There it is, a tiny puncture right here", "I found a little piece of glass in mine"); its
    citations then say nothing about which lines make one step. Steps whose cited lines are all
    TALK (`labels`, line number to label) are not counted: they are dropped anyway. A step is a
    copy when its text matches a line within SNAP_WINDOW of its citation at COPY_RATIO or more."""
    copied = counted = 0
    for step in steps:
        if not isinstance(step, dict):
            continue
        first, last = line_number(step.get("first_line")), line_number(step.get("last_line"))
        text = str(step.get("text") or "").casefold().strip()
        if first is None or last is None or not text:
            continue
        first, last = min(first, last), max(first, last)
        if all_talk(first, last, labels):
            continue
        near = range(max(1, first - SNAP_WINDOW), min(len(texts), last + SNAP_WINDOW) + 1)
        counted += 1
        copied += any(SequenceMatcher(None, text, texts[i - 1].casefold().strip()).ratio() >= COPY_RATIO
                      for i in near)
    return copied, counted


def is_copy(text: str, line: str) -> bool:
    """Whether a step's text is the narration line word for word (up to case and a comma)."""
    return SequenceMatcher(None, text.casefold().strip(), line.casefold().strip()).ratio() >= COPY_RATIO


def copies_talk(steps: list[Any], labels: dict[int, str], texts: list[str], anywhere: bool = False) -> bool:
    """Whether one of `steps` copies, word for word, a line the label pass calls TALK that it
    cites (copied_talk_lines says which)."""
    return bool(copied_talk_lines(steps, labels, texts, anywhere))


def copied_talk_lines(steps: list[Any], labels: dict[int, str], texts: list[str], anywhere: bool = False
                      ) -> list[int]:
    """The lines (numbered from 1) that `steps` copy, word for word, of those the label pass calls TALK that it
    cites, from between the steps (an aside, a price: a line with non-talk lines before and after
    it): the model listed the narration, talk and all, rather than choosing the action lines. A
    greeting or closing line copied as a first or last step is not counted: a model writing the
    steps of a clean narration copies those too (its intro/outro habit), and the talk filter drops
    them; counting them made the clean tea clip's copied actions read as a listed narration.
    `anywhere`: a copied greeting or closing line counts too (whether to ask if there is a task at
    all: a vlog's copied lines come with its greeting)."""
    spoken = sorted(n for n, label in labels.items() if label != "TALK")
    if anywhere:
        inside = range(1, len(texts) + 1)
    elif spoken:
        inside = range(spoken[0] + 1, spoken[-1])
    else:  # no line but talk: nothing lies between steps
        return []
    found: set[int] = set()
    for step in steps:
        if not isinstance(step, dict):
            continue
        first, last = line_number(step.get("first_line")), line_number(step.get("last_line"))
        text = str(step.get("text") or "")
        if first is None or last is None or not text.strip():
            continue
        first, last = min(first, last), max(first, last)
        found.update(n for n in range(first, last + 1)
                     if labels.get(n) == "TALK" and n in inside and n <= len(texts) and is_copy(text, texts[n - 1]))
    return sorted(found)


# A line that opens, past the fillers and a correction ("oh wait, no,"), on a word that orders steps or on a
# condition clause ("once it's dry,") starts a step. On the truths of every spent narration set (sets 1-41, the six
# test narrations, the tune split) such a line is a true step's first line 0.82 ("then") to 0.93 ("next",
# "first") of the time; "once/when/after/as soon as ..., " 31 of 34, where "while ..., " opens an aside (18 of 18)
# and is not taken. Without its comma the condition's end is not found, so it is not taken either.
_FILLERS = r"(?:(?:and|so|okay|ok|alright|all right|um|uh|oh|no|wait|sorry|actually|right|well|yeah)[,.!]?\s+)*"
STEP_OPENING = re.compile(_FILLERS + r"(?:(?:(?:and\s+)?then|now|next|after that|first)\b|once\b[^,]{1,60},|"
                          r"when\b[^,]{1,60},|after\b[^,]{1,60},|as soon as\b[^,]{1,60},)(?=\W*\w)", re.I)


def opens_a_step(text: str) -> bool:
    """Whether `text` opens on a word that orders steps or on a condition clause (STEP_OPENING says why)."""
    return STEP_OPENING.match(text.strip()) is not None


def fold_copies(steps: list[Any], labels: dict[int, str], texts: list[str], notes: list[str],
                names: SegmentNames = SegmentNames(), keep: frozenset[int] = frozenset(),
                talk: frozenset[str] = frozenset(), folded: list[tuple[int, str]] | None = None) -> list[Any]:
    """The model's steps (dicts citing line numbers) less those that copy the one line they
    cite, a line the label pass calls MORE (it goes on with the step above), right after the step
    before: that line is folded into the step before. Not into a step whose lines are all TALK: as
    in step_runs, a MORE line right after talk starts a step (the narrator went back to the task);
    folded into the talk, a run of copies labelled MORE became one step on the intro's list of
    what will be done, which the talk filter then kept for its MORE lines.

    Only for a model that listed the narration (copies_talk): a copied line is a fine step when
    it states one action, and a model that copied only the action lines of a clean narration
    (one sentence per step) chose its steps, which the labels must not merge. A model that copied
    the greeting and the asides too chose nothing, and then the labels say where a step ends.
    ("There it is, a tiny puncture right here", copied as a step by the 1.5B model, goes on with
    finding the hole.) The copies of the lines in `keep` stay steps (--read-folds: they read as actions of
    their own, and the label pass's MORE was wrong there). Nothing is folded into a step whose text is in
    `talk` (--read-fold-targets: it reads as talk, an aside the model copied as a step, and a step folded into
    it was lost with it). Each line folded is added to `folded` when given, with the text of the step it
    went into (a run with no notes kept tells the readings which copies, and which steps, to read)."""
    out: list[Any] = []
    for step in steps:
        previous = next((s for s in reversed(out) if isinstance(s, dict)), None)
        if isinstance(step, dict) and previous is not None:
            first, last = line_number(step.get("first_line")), line_number(step.get("last_line"))
            end = line_number(previous.get("last_line"))
            text, into = str(step.get("text") or ""), str(previous.get("text") or "")
            start = line_number(previous.get("first_line"))
            on_talk = start is not None and end is not None and all(
                labels.get(n) == "TALK" for n in range(min(start, end), max(start, end) + 1))
            if (first is not None and first == last and end is not None and end in (first - 1, first) and not on_talk
                    and labels.get(first) == "MORE" and 1 <= first <= len(texts) and is_copy(text, texts[first - 1])
                    and first not in keep and into not in talk):
                out[out.index(previous)] = {**previous, "last_line": first}
                if folded is not None:
                    folded.append((first, into))
                notes.append(f"step {text.strip()!r} ({names(first)}) copies a line labelled MORE: folded into "
                             f"the step before, {into.strip()!r}")
                continue
        out.append(step)
    return out
