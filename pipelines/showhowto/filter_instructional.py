"""`vi filter-instructional`: keep how-to videos, set aside talks, vlogs and reviews.

ShowHowTo (Sec. 3.1) asks an LLM whether a video "actively demonstrates or teaches how to
perform a specific task with physical steps", from its title and the beginning of its
transcript (about 1,500 characters, 2,000 more for videos over 400 s), with a few examples
of each kind. The reply is constrained to {"explanation": ..., "answer": "Yes"|"No"}, so a small
model cannot ramble its way out of the format; the explanation comes first, so that the label follows
from what the model has just said of the video (asked label first, the 1.5B model answered Yes to a
vlog it had called a vlog: evaluation/showhowto/RESULTS.md, the filter on held-out transcripts).

The 1.5B default model also prefers one answer word whatever the video: on held-out transcripts it
called a moving-day vlog and an unboxing "shows how to..." and answered Yes. So the question is
asked both ways (`--ask both`, the default), each explanation first, with the same worked examples:
- the paper's question (prompt_templates/filter_instructional.txt): does the video teach a task?
- its opposite (filter_instructional_negated.txt): is the video mainly something else: a vlog, a
  review or unboxing, a talk, news...? The examples' answers are flipped.
A preferred word now argues for "how-to" in one question and against it in the other. The label:
- where the backend scores answers (llama.cpp: `option_log_probs`), from the likelihoods: each
  question's log P(Yes) - log P(No) at the answer, read before any explanation, combined with the
  opposite question's sign flipped: score = (paper - opposite) / 2, a how-to above 0. A bias toward
  one word adds the same to both and cancels. The paper's question is written out (its explanation
  is the reason); the opposite one only scored (a prompt evaluation, no constrained reply, which is
  what costs), and written out only where the score overrules the paper's written answer, for the
  reason. Where both written answers say the opposite of the score, they decide;
- where it cannot (a server, transformers), from the two written answers: Yes to one and No to the
  other is their common answer; the same word to both is no evidence either way: not instructional,
  marked uncertain (a filter keeps how-tos; a doubtful video costs less set aside than mined).
The reason written is the explanation of a written answer that argues for the label (where the accounts decide,
of one whose account does), and `decision` records each question's answer, explanation and log-odds, the score,
and which rule decided. `--ask paper` asks the paper's question alone (one request, its answer as it is).

One account, two answer words. Where the two written answers say opposite things of the video, the
model may have given the same account of it to both questions and then its favourite word to each. On
blind sets it explained "The video demonstrates how to make overnight oats" (set 9), "...how to clean a
range hood filter" (set 14) and "The video shows how to clean oven racks" (filter set 3) to the paper's
question and to its opposite, answered Yes to both, and the opposite's Yes, near a zero score (-0.02 to
-0.10), set a how-to aside with a reason that argues for one. The answer words then say nothing; the
accounts are the written evidence, so they are read. Each explanation's head, up to its first comma,
colon or semicolon, is where the model says what the video is (what follows elaborates, "not a
demonstration..." among it); a head argues for a how-to where it says the paper's criterion in its words,
"how to", "teaches" or "step by step", not negated (claims_task). Where both heads argue the same, that
is the label (`one_account` in `decision`), and the reason is the explanation whose answer agrees with
it; where they argue differently (a how-to's account to one question, "a review of..." to the other), the
answer words and the score decide as above.

A No against its own account. Where the score agrees with the paper's written answer, the opposite question was
only scored, so a No written under an account whose head says the video teaches the task stood with that account
as its reason (blind set 29's cabinet pulls, refused in extract-steps' screen: "The video shows how to replace
cabinet knobs with pulls using a drill template, not a demonstration...", score -0.22). There the opposite question
is written too (one more reply, only then), and the two accounts are read as above: where both say how-to, that is
the label; where the opposite's says something else, the No stands, with the opposite's explanation, which argues
for it, as the reason (`word_against_account`).

A transcript without speech (empty, or only "[Music]"-style captions) is labelled false
without asking the model: there is no narration to mine steps from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from vi.core.config import check_choices, internal, option
from vi.core.errors import RecordError
from vi.core.models.chat import LLMConfig, check_llm, fresh_context, gives_likelihoods
from vi.core.seeding import record_seed
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt
from vi.pipelines.common.transcript_text import cut_text, plain_text, speech_segments

STAGE = "filter-instructional"
NO_TITLE = "(no title)"
ASK = ("both", "paper")
ANSWERS = ("Yes", "No")
ANSWER_FIRST = '{"answer": "'  # the reply read at its answer, before any explanation, for scoring
HEAD_END = re.compile(r"[,;:]")  # an explanation's head: what the model says the video is, before it elaborates
TASK_WORDS = re.compile(r"\bhow to\b|\bteach|\bstep[- ]by[- ]step\b", re.I)  # the paper's criterion, its words
NEGATION = re.compile(r"\bnot\b|n't\b|\bno\b|\bneither\b|\bnor\b", re.I)
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {  # in this order: the grammar makes the model write the explanation first
        "explanation": {"type": "string", "maxLength": 300},
        "answer": {"type": "string", "enum": ["Yes", "No"]},
    },
    "required": ["explanation", "answer"],
}


@dataclass(frozen=True, kw_only=True)
class FilterConfig(LLMConfig):
    """The options of `vi filter-instructional` (the LLM's in LLMConfig), checked when built."""

    prompt: Path | None = option(None, help=(  # None: the packaged prompt
        "Your own prompt file (see the packaged prompt_templates/filter_instructional.txt "
        "for the format); it must use ${title} and ${transcript}."))
    ask: str = option("both", choices=ASK, help=(
        "both: the paper's question and its opposite (is the video mainly a vlog, review, talk...?), "
        "combined so that a model's preferred answer word cancels (the record's decision says how); "
        "paper: the paper's question alone, one request per record."))
    negated_prompt: Path | None = option(None, help=(
        "Your own prompt for the opposite question (see the packaged prompt_templates/"
        "filter_instructional_negated.txt); Yes must mean 'not a how-to'; it must use ${title} and "
        "${transcript}."))
    max_chars: int = option(1500, help=(  # of transcript text shown to the model
        "Transcript characters shown to the model (2,000 more for videos over 400 s)."))
    long_video_s: float = internal(400.0)  # videos longer than this ...
    long_extra_chars: int = internal(2000)  # ... show this much more
    template: ChatPrompt = internal(init=False)
    negated_template: ChatPrompt = internal(init=False)

    def __post_init__(self) -> None:
        if self.max_chars < 100:
            raise ValueError(f"--max-chars must be at least 100, got {self.max_chars}")
        check_choices(self)
        check_llm(self.llm_settings)  # a bad --device or --llm, a missing model or server: before any record
        object.__setattr__(self, "template", load_prompt(
            "filter_instructional", self.prompt, needs=("title", "transcript")))
        object.__setattr__(self, "negated_template", load_prompt(
            "filter_instructional_negated", self.negated_prompt, needs=("title", "transcript")))


def transcript_excerpt(record: dict, config: FilterConfig) -> str:
    segments = speech_segments(record)
    limit = config.max_chars
    duration = record.get("duration")
    if not isinstance(duration, (int, float)) or isinstance(duration, bool):
        duration = segments[-1].end if segments else 0.0
    if duration > config.long_video_s:
        limit += config.long_extra_chars
    return cut_text(plain_text(segments), limit)


def parse_answer(text: str, record_id: object) -> tuple[bool, str]:
    try:
        reply = json.loads(text)
        answer, reason = reply["answer"], str(reply["explanation"]).strip()
        if answer not in ("Yes", "No"):
            raise ValueError(f"answer {answer!r}")
    except (ValueError, KeyError, TypeError) as exc:
        raise RecordError("llm_output_invalid", f"record {record_id}: the model's reply is not "
                          f"the expected JSON ({exc}): {text[:200]!r}") from None
    return answer == "Yes", reason


@dataclass(frozen=True)
class Answer:
    """One question's reply: whether it answered Yes (None: not asked to write one), its explanation,
    and, where the backend scores answers, log P(Yes) - log P(No) at the answer read before any
    explanation."""

    yes: bool | None
    explanation: str = ""
    log_odds: float | None = None

    def as_json(self) -> dict:
        return {**({"answer": "Yes" if self.yes else "No", "explanation": self.explanation}
                   if self.yes is not None else {}),
                **({"log_odds": round(self.log_odds, 3)} if self.log_odds is not None else {})}

    @classmethod
    def from_json(cls, asked: dict) -> Answer:
        """The inverse of as_json (log-odds as rounded there): a record's decision read back."""
        return cls({"Yes": True, "No": False}.get(asked.get("answer")), asked.get("explanation", ""),
                   asked.get("log_odds"))

    def says_howto(self, negated: bool) -> bool | None:
        """What the written answer says of the video: under the opposite question Yes means not a how-to."""
        return None if self.yes is None else self.yes != negated


def combined_score(paper: Answer, negated: Answer) -> float | None:
    """(paper's log-odds of Yes - opposite's) / 2: a bias toward one word adds the same to both and
    cancels; above 0 the two questions' likelihoods say how-to. None without both log-odds."""
    if paper.log_odds is None or negated.log_odds is None:
        return None
    return (paper.log_odds - negated.log_odds) / 2


def head(explanation: str) -> str:
    """What an explanation says the video is: its text up to the first comma, colon or semicolon."""
    return HEAD_END.split(explanation, maxsplit=1)[0].strip()


def claims_task(account: str) -> bool:
    """Whether an account's head says the paper's criterion in its words ("how to", "teaches", "step by
    step") and does not negate it."""
    said = head(account)
    return bool(TASK_WORDS.search(said)) and not NEGATION.search(said)


def word_against_account(paper: Answer) -> bool:
    """Whether the paper's written answer is No while its own account's head says the video teaches the task
    ("The video shows how to replace cabinet knobs with pulls..., not a demonstration...": the word, not the
    account, says No)."""
    return paper.yes is False and claims_task(paper.explanation)


def accounts_label(paper: Answer, negated: Answer) -> bool | None:
    """What both explanations' heads argue (claims_task) where they argue the same; None where they differ."""
    label = claims_task(paper.explanation)
    return label if claims_task(negated.explanation) == label else None


def decide(paper: Answer, negated: Answer | None, read_accounts: bool = True) -> dict:
    """The `instructional` fields from the questions' answers, pure (see the module's docstring).
    `negated` None: the paper's question alone. `read_accounts` False: the answer words decide where the two
    accounts say the same (before issue 38's sixteenth pass; for the quality script's comparison). The reason
    is an explanation whose written answer argues for the label, or, where the accounts decide, whose account does."""
    if negated is None:
        return {"label": paper.yes, "reason": paper.explanation,
                "decision": {"method": "paper", "paper": paper.as_json()}}
    asked = {"paper": paper.as_json(), "negated": negated.as_json()}
    score = combined_score(paper, negated)
    opposite = negated.says_howto(negated=True)
    read, against = None, read_accounts and word_against_account(paper)
    # the written answers disagree, or the paper's No disagrees with its own account: the two accounts, where
    # they say the same, decide
    if read_accounts and opposite is not None and (opposite != paper.yes or against):
        read = accounts_label(paper, negated)
    if read is not None:
        method = "one account, two answer words" if opposite != paper.yes else "a No against its own account"
        return {"label": read, "reason": paper.explanation if paper.yes == read else negated.explanation,
                "decision": {"method": f"{method}: the accounts read", "one_account": True,
                             **({"score": round(score, 3)} if score is not None else {}), **asked}}
    if score is not None:  # the likelihoods decide; the reason is a written answer that agrees
        label = score > 0
        scored = {"score": round(score, 3), **asked}
        if paper.yes == label and against and opposite == label:  # the opposite's account is the one that agrees
            return {"label": label, "reason": negated.explanation,
                    "decision": {"method": "log-odds of both questions; the paper's answer agrees, not its account",
                                 **scored}}
        if paper.yes == label:
            return {"label": label, "reason": paper.explanation,
                    "decision": {"method": "log-odds of both questions; the paper's answer agrees", **scored}}
        if opposite == label:
            return {"label": label, "reason": negated.explanation,
                    "decision": {"method": "log-odds of both questions; the paper's answer overruled", **scored}}
        if opposite is not None:  # both written answers say the other thing: they outweigh the scores
            return {"label": paper.yes, "reason": paper.explanation,
                    "decision": {"method": "both written answers agree, against the log-odds", **scored}}
        raise ValueError("the opposite question's written answer is needed where the paper's disagrees")
    if paper.yes == opposite:  # Yes to one, No to the other: both say the same of the video
        return {"label": paper.yes, "reason": paper.explanation,
                "decision": {"method": "both questions agree", **asked}}
    # The same word to opposite questions, and no likelihoods to weigh them: no evidence either way.
    return {"label": False, "reason": paper.explanation if not paper.yes else negated.explanation,
            "decision": {"method": "questions disagree; uncertain, set aside", "uncertain": True, **asked}}


def scored_log_odds(llm, messages: list[dict[str, str]]) -> float | None:
    """log P(Yes) - log P(No) as the reply's answer, read at its start (before any explanation), where
    the backend scores answers (llama.cpp's `option_log_probs`); None where it cannot."""
    if not gives_likelihoods(llm):
        return None
    log_yes, log_no = llm.option_log_probs(messages, list(ANSWERS), ANSWER_FIRST)
    return float(log_yes - log_no)


def written(llm, messages: list[dict[str, str]], record_id: object, seed: int) -> tuple[bool, str]:
    reply = llm.chat(messages, schema=ANSWER_SCHEMA, max_tokens=160, seed=seed)
    return parse_answer(reply.text, record_id)


def classify(record: dict, config: FilterConfig) -> dict:
    excerpt = transcript_excerpt(record, config)
    if not excerpt:
        return {"instructional": {"label": False, "model": None, "reason":
                "no narration: the transcript is empty or holds only music/noise captions"}}
    title = str(record.get("title") or NO_TITLE)
    llm = config.load_llm()
    seed = record_seed(config.seed, record["id"]) % 2**32
    asking = config.template.render(title=title, transcript=excerpt)
    negated = None
    # A record's calls in one context of their own: its scores depend on nothing evaluated for another record
    # (--shard, --resume, --concurrency), and each reuses the cache of the calls before it.
    with fresh_context(llm):
        paper = Answer(*written(llm, asking, record["id"], seed))
        if config.ask == "both":
            # scored right after its reply, the paper's answer costs a few tokens (the prompt is cached)
            paper = Answer(paper.yes, paper.explanation, scored_log_odds(llm, asking))
            opposite = config.negated_template.render(title=title, transcript=excerpt)
            negated = Answer(None, log_odds=scored_log_odds(llm, opposite))
            score = combined_score(paper, negated)
            # written (a constrained reply: the costly part) only where a reason or the vote needs it: no score,
            # a score against the paper's answer, or a No against the paper's own account (decide)
            if score is None or (score > 0) != paper.yes or word_against_account(paper):
                negated = Answer(*written(llm, opposite, record["id"], seed), log_odds=negated.log_odds)
    decided = decide(paper, negated)
    return {"instructional": {"label": decided["label"], "reason": decided["reason"], "model": config.llm,
                              "decision": decided["decision"]}}


def is_rejected(record: dict) -> bool:
    """For --drop: records labelled not instructional go to --rejects."""
    return record.get("instructional", {}).get("label") is False
