"""`vi extract-steps`' first pass: which narration lines are steps, and where each step starts.

Each line gets one label: STEP (starts a step of the task), MORE (goes on with the step above)
or TALK (a greeting, the intro's list of what will be done, an aside, a product's features, an
opinion, a price, the closing words). A step is then a STEP line and the MORE lines right after
it, so the number of steps and the lines each one spans come from the labels, not from how many
lines the narrator spoke.

Why a separate pass: asked for the steps with their lines in one reply, the 1.5B default model
copied every line as a step (14 steps for 6 on a bike-tyre repair, the greeting and "thanks for
watching" among them), and asked a yes/no question per line ("is this a step?") it said yes
with about the same probability to the steps and to the talk. Shown labelled examples and read
by likelihood, one line at a time with its earlier labels in the text, it labels the bike
narration's 20 lines as the truth does; it still labels some new actions MORE, so steps merge
on other narrations (python -m vi.evaluation.showhowto.extract_quality --segmentation labels).

How the labels are read depends on the backend:
- in process (llama.cpp): the examples, at most LABEL_WINDOW lines before the line with the
  model's own labels, and the line are plain text (no chat template, as in the few-shot papers),
  and the label is the likeliest of the three after "[n] text ->" (labels_from_scores says why
  the window); llama.cpp keeps the cache of the examples, so a line costs the window's tokens
  (the cache is reset at each record, so a record's labels do not depend on the one before);
  each line is read a second time alone, with no earlier line, and TALK needs the evidence of
  both readings (labels_from_scores says why: a closing line read in a run of steps); the first
  line, alone already, is read once, and its second view is a reader blind to position (the talk
  probe, given by the caller: labels_from_scores says why: a clip that opens on a step), as, where
  the caller asks, is each line of the opening until one is not TALK (a first step after a greeting)
  and, as a third view, each line of the video's closing from the last back until one stays a step (a
  closing worded as an instruction);
- a server or transformers: one chat request with the same examples, the reply constrained to
  `{"labels": [one label per line]}`.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from vi.core.errors import RecordError

LABELS = ("STEP", "MORE", "TALK")


@cache
def label_examples() -> str:
    """The packaged instructions and labelled examples (comment lines dropped)."""
    text = resources.files("vi.pipelines.common").joinpath("prompt_templates", "extract_steps_labels.txt")
    return "\n".join(line for line in text.read_text(encoding="utf-8").splitlines()
                     if not line.startswith("#")).strip() + "\n"


def video_header(title: str) -> str:
    return f'\nVideo: "{title}"\n'


def step_runs(labels: list[str]) -> list[tuple[int, int]]:
    """The steps as (first, last) line indices: a STEP line and the MORE lines right after it.
    A MORE with no step line right above it (the first line, or after TALK) starts a step: the
    narrator went back to the task."""
    runs: list[list[int]] = []
    for i, label in enumerate(labels):
        if label == "STEP" or (label == "MORE" and (not runs or runs[-1][1] != i - 1)):
            runs.append([i, i])
        elif label == "MORE":
            runs[-1][1] = i
    return [(a, b) for a, b in runs]


@dataclass(frozen=True)
class Rereading:
    """Which lines the label pass reads again with a reader blind to where the line stands (`probe(text)`: the
    line's TALK log-odds, the talk probe of narration_probe.py), beside the model's readings in its window and
    alone: the first line always, and where asked the rest of the opening (`until_step`), the video's closing
    (`back_to_step`), and a line after a window of its own label (`after_talk`, `after_more`). Without a probe no
    line is read again. labels_from_scores says why each."""
    probe: Callable[[str], float] | None = None
    until_step: bool = False
    back_to_step: bool = False
    after_talk: bool = False
    after_more: bool = False

    @property
    def sticky(self) -> frozenset[str]:
        """The labels after whose window a line is read again as a first line."""
        if self.probe is None:
            return frozenset()
        return frozenset(label for label, on in (("TALK", self.after_talk), ("MORE", self.after_more)) if on)


LABEL_WINDOW = 3  # earlier lines, with their labels, shown before the line being labelled
CONTENT_FREE = "N/A"  # the line whose label likelihoods say what the context alone favours


def labels_from_scores(score: Callable[[str], Sequence[float]], title: str, texts: list[str],
                       window: int | None = LABEL_WINDOW, calibrate: bool = False,
                       alone: bool = True, reread: Rereading = Rereading()) -> list[dict[str, Any]]:
    """One label per line from `score(text)`, the log-likelihoods of LABELS right after `text`.

    Each line is shown after the examples with at most `window` earlier lines and their chosen
    labels (None: every earlier line, as before). Why: with every earlier line in the text, the
    1.5B model labelled every line of the real pressure-cooker transcript from line 25 on TALK
    ("When they're done you just pop them out and eat them" among them): a run of its own TALK
    labels made the next TALK likelier whatever the line said. A bounded window caps how much of
    its own past the model reads. With `calibrate`, a line's scores are also divided by those of a
    content-free line (CONTENT_FREE) in the same place (contextual calibration, Zhao et al. 2021);
    off by default: "N/A" reads as talk to the model, so dividing by it called 33 of the pressure
    cooker's 47 lines STEP, 18 of its 32 talk lines among them (the window alone: none of its 15
    action lines TALK, the greeting and both outros TALK, the talk in the middle MORE).

    With `alone` (the default), each line is also read with no earlier line (`both_readings`): in its
    window the model continues the labels it has just given, so a closing line after a run of steps
    ("And that's it, you're ready to ride") reads as one more step; read alone it is talk. Alone, a
    line cannot be MORE (no step above it), so that reading only has a say on TALK.

    The first line is shown with no earlier line, so its two readings are one text, read once. Its second
    view is `reread.probe(line)`, where given: the log-odds of TALK from a reader that does not see where
    the line stands (the talk probe, narration_probe.py), added to the label pass's. Why: both labelled
    examples open on a greeting, so to the model a first line is talk: on blind set 11 every clean clip (each
    line one step, the first already a step) lost its first step, P(TALK) 0.59-0.67, while the openings of
    47 full narrations (sets 1-7, 10, 11) read 0.72-1.0. The probe reads those clips' first lines at -1.4 to
    -3.5 and the openings at -0.5 to +5.0; summed with the model's, every opening stays talk (+1.5 or more)
    and every clip's first line is a step. Counted twice, as before, the model's own reading pushed 0.6 to
    0.7. Measured on blind set 12: evaluation/showhowto/RESULTS.md, twelfth pass.

    With `reread.until_step`, each line while every line before it is labelled TALK (a greeting, an intro) has the
    probe as its second view in place of its reading alone. Why: a line read alone is read as a first line,
    so as talk; after a one-line greeting both of the model's views of the first step lean to talk (set 20's
    oil check: "Park the car on level ground..." read TALK, dropped), and 3 of set 20's 4 clean clips lost
    their first step that way. Once a line is not talk, the reading alone is the second view again: it is
    what tells a closing line after a run of steps (above). On blind set 22 (clean clips opening on a long
    greeting) it kept two first steps the first line's probe alone lost and lost one (a step with a reason
    clause the probe reads as talk); on set 21 it changed nothing (RESULTS, twenty-fourth pass).

    With `reread.back_to_step` (the chunk that ends the video), the closing is read by the probe too: from the last
    line back, each line not labelled TALK has the probe as a third view beside its two readings, until one
    stays a step. Why: a closing worded as an instruction ("Your pour-over is ready. Enjoy it while it's
    hot!", "use the trimmings for dinner and enjoy") reads as one more step both in its window and alone,
    so the model's step written on it is kept (an outro step on sets 20 and 22); the probe reads its words
    (set 22's basil closing: +2.3). Walking back only while lines turn to talk keeps the last true step's
    reading as it was wherever the line after it stays a step. On 29 spent closings it turned 3 of the 16
    outro lines read as not talk, and no last step; on blind set 23 it changed no step, the default keeping
    none of its closings, and on set 24 it kept the one the default kept ("Grab a spoon and dig in...": the
    probe reads an imperative closing as a step too) and one more (a flaw, fixed since: read_closing), so it is off
    by default (RESULTS, twenty-fifth and twenty-sixth passes).

    With `reread.after_talk`, a line labelled TALK whose window is all TALK (a story or an aside as long as the window)
    is read again as a first line is: alone, with the probe as its second view in place of its window, and that
    reading is its label where it is not TALK. Why: the window then shows only the model's own TALK labels, and
    the model goes on with them whatever the line says, strongly enough to outweigh its reading alone (blind
    set 26's radiator: the four steps after a four-line aside labelled TALK, the model's steps on them dropped).
    Heard only where the window read TALK: the reading can give back a step, never take one.

    With `reread.after_more`, the same for MORE: a line labelled MORE whose window is all MORE is read again as a first
    line, and that reading is its label where it is not MORE (a step of its own, or talk). Why: the window then
    shows only MORE, and the model goes on with it through new steps and asides alike (blind set 27's lemon curd:
    lines 10-25 all MORE, a five-line story and four steps among them, so the steps the model had written on
    those lines were folded into one as copies of MORE lines). A step's fifth line and on is read as a first
    line: a long step's detail can be split off as a step (RESULTS, twenty-eighth pass).
    """
    prefix, out, read = label_examples() + video_header(title), [], []
    for n, line in enumerate(texts, 1):
        first = 1 if window is None else max(1, n - window)
        context = prefix + "".join(f"[{m}] {texts[m - 1]} -> {out[m - 1]['label']}\n" for m in range(first, n))
        scores = [float(x) for x in score(context + f"[{n}] {line} ->")]
        if calibrate:
            scores = [a - float(b) for a, b in zip(scores, score(context + f"[{n}] {CONTENT_FREE} ->"))]
        probs = softmax(scores)
        mark = {}
        opening = n == 1 or (reread.until_step and all(m["label"] == "TALK" for m in out))
        if alone and opening and reread.probe is not None:
            seen = sigmoid(float(reread.probe(line)))
            probs = heard_with(probs, seen)
            mark["probe"] = round(seen, 3)
        elif alone and n > 1:
            read_alone = softmax(score(prefix + f"[{n}] {line} ->"))
            mark["alone"] = [round(x, 3) for x in read_alone]
            probs = both_readings(probs, read_alone)
            label = labelled(probs)["label"]
            if label in reread.sticky and window is not None and len(out) >= window \
                    and all(m["label"] == label for m in out[-window:]):
                seen = sigmoid(float(reread.probe(line)))
                as_first = heard_with(read_alone, seen)
                mark[f"after_{label.lower()}_probe"] = round(seen, 3)
                if labelled(as_first)["label"] != label:
                    probs = as_first
        out.append(labelled(probs) | mark)
        read.append(probs)
    if reread.back_to_step and alone and reread.probe is not None:
        read_closing(out, read, texts, reread.probe)
    return out


def read_closing(marks: list[dict[str, Any]], read: list[Sequence[float]], texts: list[str],
                 closing_talk: Callable[[str], float]) -> None:
    """From the last line back, each line not labelled TALK gets `closing_talk(line)`, a reader blind to
    position, as a third view of TALK beside its P(STEP, MORE, TALK) so far (`read`), until one stays a step
    (labels_from_scores says why); a line the probe has read already (an opening) ends the walk as it is.
    The view is heard only where it reads talk: the walk looks for talk, and a probe that reads a closing as a
    step would otherwise make it a surer step than its two readings did, sure enough for the stage to write a
    step the model had left out (set 24's lavender: "Use the dried buds to fill little sachets...", P(STEP)
    raised over extract_steps.STEP_SURE, a step written from the line). In place."""
    for n in range(len(marks) - 1, -1, -1):
        mark = marks[n]
        if mark["label"] == "TALK":
            continue
        if "probe" in mark:
            return
        seen = sigmoid(float(closing_talk(texts[n])))
        heard = heard_with(read[n], seen) if seen > 0.5 else read[n]
        marks[n] = mark | labelled(heard) | {"closing_probe": round(seen, 3)}
        if marks[n]["label"] != "TALK":
            return


def read_by_likelihood(marks: Iterable[dict[str, Any]]) -> bool:
    """Whether labels were read by likelihood (in process: each mark has its `probs`), so a line probe's
    reading can be summed with them; a server's labels are one reply, with none."""
    return any(mark.get("probs") for mark in marks)


def labelled(probs: Sequence[float]) -> dict[str, Any]:
    """A line's mark from its P(STEP, MORE, TALK): the likeliest label, its probability, all three."""
    best = max(range(len(LABELS)), key=probs.__getitem__)  # the first of equals, as numpy's argmax
    return {"label": LABELS[best], "p": round(probs[best], 3), "probs": [round(x, 3) for x in probs]}


# Three labels' scores are added up in plain Python: numpy's import (a third of a --help's start) would be paid by
# every `vi extract-steps --help` for arithmetic on three numbers (issue 35).
def softmax(scores: Sequence[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(float(x) - top) for x in scores]
    total = sum(exps)
    return [x / total for x in exps]


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


def both_readings(in_window: Sequence[float], alone: Sequence[float]) -> list[float]:
    """P(STEP, MORE, TALK) of a line read in its window and alone: TALK against not-TALK by the sum of
    both readings' log-odds (two views of one line, each read as evidence, as naive Bayes does with
    independent ones), then STEP against MORE as the window reads them (alone, no step is above)."""
    return heard_with(in_window, float(alone[-1]))


def heard_with(probs: Sequence[float], talk: float) -> list[float]:
    """`probs` (P(STEP, MORE, TALK)) with a second view's P(TALK) `talk` summed in (talk_of_two); STEP against
    MORE as `probs` reads them: the line alone, the talk probe."""
    return with_talk(probs, talk_of_two(float(probs[-1]), talk))


def talk_of_two(first: float, second: float) -> float:
    """P(TALK) from two views' P(TALK): their log-odds summed (the first's where the two contradict certainly)."""
    yes, no = first * second, (1.0 - first) * (1.0 - second)
    return yes / (yes + no) if yes + no > 0 else first


def with_talk(probs: Sequence[float], talk: float) -> list[float]:
    """P(STEP, MORE, TALK) with P(TALK) = `talk`, STEP against MORE shared as in `probs`."""
    step, more = float(probs[0]), float(probs[1])
    share = step / (step + more) if step + more > 0 else 0.5
    return [(1.0 - talk) * share, (1.0 - talk) * (1.0 - share), talk]


def _labels_by_likelihood(llm, title: str, texts: list[str], reread: Rereading) -> list[dict[str, Any]]:
    from vi.core.models.llm import next_token_log_probs

    first_token = {}
    for label in LABELS:  # the label's first token after " " tells the three apart
        tokens = llm.llama.tokenize(f" {label}".encode(), add_bos=False, special=False)
        first_token[label] = tokens[0]
    if len(set(first_token.values())) < len(LABELS):
        raise RecordError("llm_unsupported", f"{llm.name}: the labels {LABELS} share their first token")

    def score(text: str) -> list[float]:
        log_probs = next_token_log_probs(llm, text)
        return [float(log_probs[first_token[label]]) for label in LABELS]

    with llm.fresh_context():  # a record's labels never depend on the record before (resume, shards)
        return labels_from_scores(score, title, texts, reread=reread)


def labels_schema(count: int) -> dict:
    return {"type": "object", "properties": {"labels": {
        "type": "array", "minItems": count, "maxItems": count, "items": {"enum": list(LABELS)}}},
        "required": ["labels"]}


def _labels_by_reply(llm, title: str, texts: list[str], record_id: object) -> list[dict[str, Any]]:
    lines = "".join(f"[{n}] {line}\n" for n, line in enumerate(texts, 1))
    messages = [{"role": "system", "content": label_examples()},
                {"role": "user", "content": f"Label every line of this video, in order.{video_header(title)}{lines}"
                 f'Reply with {{"labels": [...]}}: {len(texts)} labels, one per line.'}]
    schema = labels_schema(len(texts))
    # every backend constrains the reply to the schema, or validates it and asks again
    reply = llm.chat(messages, schema=schema, max_tokens=8 * len(texts) + 32)
    try:
        labels = json.loads(reply.text)["labels"]
        if len(labels) != len(texts) or any(label not in LABELS for label in labels):
            raise ValueError(f"{len(labels)} labels for {len(texts)} lines, or one not in {LABELS}")
    except (ValueError, KeyError, TypeError) as exc:
        raise RecordError("llm_output_invalid", f"record {record_id}: the model's line labels are not "
                          f"usable ({exc}): {reply.text[:200]!r}") from None
    return [{"label": label} for label in labels]


def label_lines(llm, title: str, texts: list[str], record_id: object = None, reread: Rereading = Rereading()
                ) -> list[dict[str, Any]]:
    """One `{"label", "p"?}` per line of `texts` (p: the label's probability, in process only), the lines
    `reread` names read again by its probe (in process only; labels_from_scores says why)."""
    from vi.core.models.llm import ChatLLM

    if not texts:
        return []
    if isinstance(llm, ChatLLM):
        return _labels_by_likelihood(llm, title, texts, reread)
    return _labels_by_reply(llm, title, texts, record_id)
