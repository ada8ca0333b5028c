"""`vi pair-qa`: question-answer pairs that compare two clips of one keystep, by an LLM.

StepDiff (Sec. 3.2) gives an LLM the descriptions of two clips of the same keystep and asks
for question-answer pairs of three types: (1) a summary of the differences and 3 short QA
comparing the videos, (2) 3 QA of the form "Which video ...?" answered by one video, and
(3) whether the two share a similar main action, YES or NO. The reply is free text in the
paper's "Q:"/"A:" lines (not JSON-constrained: the format is part of what the paper asks),
parsed leniently, then filtered, because the generated QA is noisy (the paper loses 2.5
DiffMCQ points without its filter). Video 1 is the pair's reference clip, Video 2 its
candidate.

Each dropped QA counts under one reason, the first that applies, in this order:
- truncated: the last QA of a reply cut off by --max-new-tokens (types 1 and 2).
- malformed: a question without an answer or the reverse, or an empty one; for type 3, an
  answer that is not YES or NO.
- about_the_text: the question or answer is about the descriptions ("described", "not
  mentioned", "no information") instead of about what the videos show.
- not_which_question (type 2): the question has no "which".
- not_one_video (type 2): the answer does not name exactly one video (see VIDEO_NAMES), or
  says "both"/"neither".
- too_long (type 1): an answer of more than --max-answer-words words ("short and concise").
- unsupported (types 1, 2): fewer than half of the content words the answer adds to its
  question (Porter stems; stop words and the words that name the videos do not count) occur
  in either description. "Purple." to "What colour is the onion?" is dropped when no
  description says purple; "Video 1" adds nothing and passes. Limits: a synonym ("blade"
  for "knife") counts as unsupported, a word can occur in a description and still be
  misattributed (the wrong video, a negation), and questions are not checked, so a type 2
  question with a false premise passes on its one-word answer.
- duplicate_question: the same question as a QA already kept for this pair, up to case,
  punctuation, word order, word endings and filler words (QUESTION_FILLER): "Which video
  uses a wire brush to scrub the grates?" repeats "Which video shows scrubbing the grates
  with a wire brush?".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from vi.core.config import internal, option
from vi.core.errors import RecordError
from vi.core.models.chat import ChatBackend, LLMConfig, check_llm
from vi.core.models.chat_backend import ChatReply
from vi.core.seeding import record_seed
from vi.core.stream import RecordStage
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt
from vi.pipelines.common.word_stems import stem

STAGE = "pair-qa"
QA_TYPES = (1, 2, 3)
PROMPT_NAMES = {1: "pair_qa_differences", 2: "pair_qa_which_video", 3: "pair_qa_same_action"}
CLIPS = ("reference", "candidate")  # Video 1, Video 2
YES_NO_MAX_TOKENS = 48  # type 3 wants one word; a model that explains first is cut off here
DROP_REASONS = ("truncated", "malformed", "about_the_text", "not_which_question", "not_one_video", "too_long",
                "unsupported", "duplicate_question")  # in the order they are checked
SUPPORT_MIN = 0.5  # of the content words an answer adds to its question, found in a description

_MARKUP = re.compile(r"\*\*|__|`")
_BULLET = re.compile(r"^(?:[-*•>#]+\s*|\(?\d{1,2}[.)](?!\d)\s*|\(?[a-z]\)\s+)+")
_LABEL = re.compile(r"^(?P<kind>q(?:uestion)?|a(?:nswer)?)\s*(?:#?\s*\d{1,2}\s*[.:)：-]|[:：]|$)\s*", re.IGNORECASE)
_INLINE_ANSWER = re.compile(r"(?<=[?.!])\s+a(?:nswer)?\s*\d{0,2}\s*[:：]\s*", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_ABOUT_TEXT = re.compile(
    r"\bdescri(?:be[sd]?|ptions?)\b|(?:\bnot|n't|\bnever)\s+(?:(?:been|be|explicitly)\s+)?"
    r"(?:mentioned|specified|stated|provided|given|say|says|said)\b|\bno information\b|"
    r"\b(?:can ?not|can't) be determined\b", re.IGNORECASE)
VIDEO_NAMES = {  # how an answer may name a video: "Video 1", "video one", "the first video", "the former"
    1: re.compile(r"\bvideo\s*#?\s*(?:1|one)\b|\b(?:first|1st)\s+(?:video|clip|one)\b|"
                  r"\bthe\s+(?:first|former)\b(?!\s+\w)", re.IGNORECASE),
    2: re.compile(r"\bvideo\s*#?\s*(?:2|two)\b|\b(?:second|2nd)\s+(?:video|clip|one)\b|"
                  r"\bthe\s+(?:second|latter)\b(?!\s+\w)", re.IGNORECASE),
}
_BOTH_OR_NEITHER = re.compile(r"\b(?:both|neither|either)\b", re.IGNORECASE)
# English stop words, plus the words that name the videos or say how they relate.
_STOP_WORDS = """
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing done down during each either few for from
further had has have having he her here hers him his how i if in into is it its itself just
least less more most much my neither no nor not now of off on once one only or other our out
over own same she should so some such than that the their theirs them then there these they
this those through to too two under until up very via was we were what when where whereas which
while who whom whose why will with would yes you your instead rather using uses use used shows
show shown video videos clip clips first second former latter 1 2 1st 2nd person
"""
STOP_WORDS = frozenset(_STOP_WORDS.split())
# Words that do not make two questions different; comparatives (more, less, before) do.
_QUESTION_FILLER = """a an the which what who video videos clip clips do does did is are was were show shows shown
showing use uses used using with to of in by person"""
QUESTION_FILLER = frozenset(_QUESTION_FILLER.split())


@dataclass(frozen=True)
class QA:
    type: int
    q: str
    a: str
    cut_off: bool = False  # the last QA of a reply that hit max_tokens


def _clean(line: str) -> str:
    return _BULLET.sub("", _MARKUP.sub("", line).strip()).strip()


def _strip_quotes(text: str) -> str:
    text = " ".join(text.split())
    return text[1:-1].strip() if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'" else text


def parse_qa(text: str) -> list[tuple[str, str]]:
    """(question, answer) pairs from "Q:"/"A:" lines; "" where one is missing.

    Labels may be numbered or decorated ("1. Q:", "Q1:", "**Question 2:**", "- A:"). A label
    alone on its line takes the next lines; a question goes on until its "?" and an answer
    until a blank line or the next label. "Q: ...? A: ..." on one line is split. Text outside
    any Q/A (a summary, a closing remark) is ignored; an answer without a question, or a
    question without an answer, comes out with "" in the missing place.
    """
    items: list[dict[str, list[str] | None]] = []
    mode = None  # which part of the last item plain lines continue: "q", "a" or None
    for raw in text.splitlines():
        line = _clean(raw)
        if not line:
            if mode is not None and items[-1][mode]:  # a blank line ends a begun part
                mode = None
            continue
        label = _LABEL.match(line)
        if label and label.group("kind")[0].lower() == "q":
            question, *inline = _INLINE_ANSWER.split(line[label.end():], maxsplit=1)
            answer = ([inline[0]] if inline[0] else []) if inline else None
            items.append({"q": [question] if question else [], "a": answer})
            mode = "a" if inline else "q"
        elif label:
            rest = [line[label.end():]] if line[label.end():] else []
            if items and items[-1]["a"] is None:
                items[-1]["a"] = rest
            else:
                items.append({"q": None, "a": rest})
            mode = "a"
        elif mode == "q" and not "".join(items[-1]["q"] or []).rstrip().endswith("?"):
            items[-1]["q"].append(line)  # type: ignore[union-attr]
        elif mode == "a":
            items[-1]["a"].append(line)  # type: ignore[union-attr]
    return [(_strip_quotes(" ".join(i["q"] or [])), _strip_quotes(" ".join(i["a"] or []))) for i in items]


def yes_no(text: str) -> str | None:
    """YES or NO from "Yes.", "no, they don't", "The answer is YES"; None if neither or both."""
    found = {w for w in _WORD.findall(text.lower()) if w in ("yes", "no")}
    return found.pop().upper() if len(found) == 1 else None


def first_question(text: str) -> str:
    """The first sentence ending in "?" of a prompt turn: type 3's question."""
    match = re.search(r"[^.?!\n]*\?", text)
    return " ".join(match.group(0).split()) if match else " ".join(text.split())


def candidates(qa_type: int, reply: str, cut_off: bool, question: str) -> list[QA]:
    """The QA a reply offers, before filtering; type 3 offers exactly one."""
    pairs = parse_qa(reply)
    if qa_type == 3:  # the answer of the first Q/A, or else the whole reply ("YES")
        answer = next((a for _, a in pairs if a), reply)
        return [QA(3, question, yes_no(answer) or "")]
    return [QA(qa_type, q, a, cut_off and i == len(pairs) - 1) for i, (q, a) in enumerate(pairs)]


def content_stems(text: str) -> set[str]:
    return {stem(w) for w in _WORD.findall(text.lower()) if w not in STOP_WORDS}


def named_videos(answer: str) -> set[int]:
    return {n for n, pattern in VIDEO_NAMES.items() if pattern.search(answer)}


def question_key(question: str) -> str:
    return " ".join(sorted({stem(w) for w in _WORD.findall(question.lower()) if w not in QUESTION_FILLER}))


def drop_reason(qa: QA, descriptions: set[str], kept_questions: set[str], max_answer_words: int) -> str | None:
    """Why `qa` is dropped (see the module's docstring), or None to keep it."""
    if qa.cut_off:
        return "truncated"
    if not qa.q or not qa.a:
        return "malformed"
    if _ABOUT_TEXT.search(qa.q) or _ABOUT_TEXT.search(qa.a):
        return "about_the_text"
    if qa.type == 2 and not re.search(r"\bwhich\b", qa.q, re.IGNORECASE):
        return "not_which_question"
    if qa.type == 2 and (len(named_videos(qa.a)) != 1 or _BOTH_OR_NEITHER.search(qa.a)):
        return "not_one_video"
    if qa.type == 1 and len(qa.a.split()) > max_answer_words:
        return "too_long"
    if qa.type != 3:
        new = content_stems(qa.a) - content_stems(qa.q)  # what the answer adds to its question
        if new and len(new & descriptions) < SUPPORT_MIN * len(new):
            return "unsupported"
    if question_key(qa.q) in kept_questions:
        return "duplicate_question"
    return None


def drop_reasons(items: list[QA], d1: str, d2: str, max_answer_words: int) -> list[str | None]:
    """For each QA of one pair, in order, why it is dropped, or None where it is kept."""
    descriptions, kept_questions, reasons = content_stems(f"{d1} {d2}"), set(), []
    for qa in items:
        reasons.append(drop_reason(qa, descriptions, kept_questions, max_answer_words))
        if reasons[-1] is None:
            kept_questions.add(question_key(qa.q))
    return reasons


def filter_qa(items: list[QA], d1: str, d2: str, max_answer_words: int) -> tuple[list[QA], Counter]:
    """The QA kept, in order, and the count of those dropped by reason."""
    reasons = drop_reasons(items, d1, d2, max_answer_words)
    return [qa for qa, r in zip(items, reasons) if r is None], Counter(r for r in reasons if r)


def clip_text(clip: dict, keystep: str) -> tuple[str, str]:
    """(text shown to the LLM, its source) for one clip.

    The source is "description" (`description.step` from vi describe, or a `description`
    string), else "keystep+narration" (the keystep and what the narrator says during the clip,
    as vi clips writes it), else "keystep" alone.
    """
    description = clip.get("description")
    step = description.get("step") if isinstance(description, dict) else description
    if isinstance(step, str) and step.strip():
        return " ".join(step.split()), "description"
    narration = " ".join(clip["narration"].split()) if isinstance(clip.get("narration"), str) else ""
    if narration:
        return f'Step: {keystep}. The narrator says: "{narration}"', "keystep+narration"
    return f"Step: {keystep}.", "keystep"


def parse_types(text: str) -> tuple[int, ...]:
    """--types "1,2,3" as (1, 2, 3)."""
    try:
        return tuple(int(t) for t in text.replace(" ", "").split(",") if t)
    except ValueError:
        raise ValueError(f"--types must list prompt types among 1, 2, 3, like 1,2,3; got {text!r}") from None


def prompt_overrides(specs: Iterable[str | tuple[int, Path]], types: tuple[int, ...]) -> tuple[tuple[int, Path], ...]:
    """--prompt values as (type, file): "2=FILE", or a bare FILE when --types names one type (a
    (type, file) pair is kept as it is)."""
    out: dict[int, Path] = {}
    for spec in specs:
        if isinstance(spec, tuple):
            out[spec[0]] = Path(spec[1])
            continue
        typed = re.fullmatch(r"([123])=(.+)", spec)
        if typed:
            out[int(typed.group(1))] = Path(typed.group(2))
        elif len(types) == 1:
            out[types[0]] = Path(spec)
        else:
            raise ValueError(f"--prompt {spec}: say which prompt type it replaces, like --prompt 2={spec}")
    return tuple(out.items())


@dataclass(frozen=True, kw_only=True)
class PairQAConfig(LLMConfig):
    """The options of `vi pair-qa`, checked when built: a bad one fails before any record (exit 2), a
    missing model or a server that does not answer too (exit 5)."""

    types: tuple[int, ...] = option(
        QA_TYPES, cli_type=str, cli_default=",".join(map(str, QA_TYPES)), parse=parse_types,
        help="Prompt types to ask, comma-separated: 1 differences, 2 \"Which video ...?\", 3 same main action "
             "(YES/NO). One LLM call per type and pair.")
    # (type, prompt file) replacing packaged prompts; given as the command line's specs ("2=FILE",
    # or FILE), made pairs when built since a bare FILE needs `types`
    prompts: tuple[tuple[int, Path], ...] = option(
        (), flag="--prompt", metavar="[TYPE=]FILE", cli_type=Optional[list[str]], parse=lambda specs: tuple(specs or ()),
        help="Your own prompt for a type, as TYPE=FILE (repeat for several types; a bare FILE when --types names "
             "one type). See the packaged prompt_templates/pair_qa_*.txt for the format; it must use ${d1} and "
             "${d2}.")
    max_new_tokens: int = option(384, help=(
        f"Longest reply, in tokens (type 3 at most {YES_NO_MAX_TOKENS}). The last QA of a reply cut off here is "
        "dropped as truncated."))
    temperature: float = option(0.0, help="0 decodes greedily; above 0 samples, seeded per record from --seed and "
                                          "its id.")
    max_answer_words: int = option(30, help=(
        "Type 1 answers longer than this are dropped as too_long (the prompt asks for short answers)."))
    templates: dict[int, ChatPrompt] = internal(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompts", prompt_overrides(self.prompts, self.types))
        if not self.types or not set(self.types) <= set(QA_TYPES) or len(set(self.types)) != len(self.types):
            raise ValueError(f"--types must list prompt types among 1, 2, 3 once each, like 1,2,3; got {self.types}")
        overrides = dict(self.prompts)
        if not set(overrides) <= set(self.types):
            raise ValueError(f"--prompt: type {min(set(overrides) - set(self.types))} is not among --types")
        if self.max_new_tokens < 16 or self.max_new_tokens >= self.n_ctx // 2:
            raise ValueError(f"--max-new-tokens must be between 16 and half of --n-ctx "
                             f"({self.n_ctx // 2}), got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"--temperature must not be negative, got {self.temperature}")
        if self.max_answer_words < 1:
            raise ValueError(f"--max-answer-words must be at least 1, got {self.max_answer_words}")
        check_llm(self.llm_settings)  # a bad --device or --llm, a missing model or server: before any record
        object.__setattr__(self, "templates", {
            t: load_prompt(PROMPT_NAMES[t], overrides.get(t), needs=("d1", "d2")) for t in self.types})


def pair_texts(record: dict) -> tuple[str, str, dict[str, str]]:
    """(text of Video 1, text of Video 2, source of each) for a pair record."""
    keystep = record.get("keystep")
    texts, sources = [], {}
    for name in CLIPS:
        clip = record.get(name)
        if not isinstance(clip, dict):
            raise RecordError("missing_field", f"record {record['id']}: no '{name}' clip object; "
                              "pair-qa reads the pairs that vi pair writes")
        step = clip.get("keystep") or keystep
        text, sources[name] = clip_text(clip, str(step or "(unknown step)"))
        texts.append(text)
    if set(sources.values()) == {"keystep"}:
        raise RecordError("missing_description", f"record {record['id']}: neither clip has a "
                          "description.step (vi describe) or a narration; there is nothing to "
                          "compare but the shared keystep")
    return texts[0], texts[1], sources


def ask(llm: ChatBackend, config: PairQAConfig, qa_type: int, d1: str, d2: str, record_id: object
        ) -> tuple[ChatReply, list[QA]]:
    """One LLM call for one prompt type: the reply and the QA it offers, before filtering."""
    template = config.templates[qa_type]
    messages = template.render(d1=d1, d2=d2)
    max_tokens = min(config.max_new_tokens, YES_NO_MAX_TOKENS) if qa_type == 3 else config.max_new_tokens
    if llm.count_message_tokens(messages) + max_tokens > llm.n_ctx:
        raise RecordError("context_too_small", f"record {record_id}: the descriptions and prompt "
                          f"{qa_type} do not fit --n-ctx {config.n_ctx} with {max_tokens} new "
                          "tokens; raise --n-ctx")
    reply = llm.chat(messages, max_tokens=max_tokens, temperature=config.temperature,
                     seed=record_seed(config.seed, record_id) % 2**32)
    return reply, candidates(qa_type, reply.text, reply.finish_reason == "length",
                             first_question(template.turns[-1][1]))


def pair_qa(record: dict, config: PairQAConfig) -> dict:
    d1, d2, sources = pair_texts(record)
    llm = config.load_llm()
    offered: list[QA] = []
    for qa_type in config.types:
        offered += ask(llm, config, qa_type, d1, d2, record["id"])[1]
    reasons = drop_reasons(offered, d1, d2, config.max_answer_words)
    kept = [qa for qa, r in zip(offered, reasons) if r is None]
    dropped = Counter(r for r in reasons if r)
    count = {str(t): sum(qa.type == t for qa in offered) for t in config.types}
    # The dropped QA themselves, with the reason, so the filter can be read (vi view shows them).
    dropped_items = [{"type": qa.type, "q": qa.q, "a": qa.a, "reason": r} for qa, r in zip(offered, reasons) if r]
    return {"qa": [{"type": qa.type, "q": qa.q, "a": qa.a} for qa in kept],
            "qa_stats": {"model": config.llm, "sources": sources, "generated": count,
                         "kept": {str(t): sum(qa.type == t for qa in kept) for t in config.types},
                         "dropped": dict(sorted(dropped.items())), "dropped_items": dropped_items}}


PAIR_QA = RecordStage(
    STAGE,
    reads="[cyan]reference[/cyan] and [cyan]candidate[/cyan] clips (from vi pair): their "
          "[cyan]description.step[/cyan] (vi describe), else their keystep and "
          "[cyan]narration[/cyan]. The reference is Video 1, the candidate Video 2.",
    writes="[cyan]qa[/cyan] = [{type, q, a}], the QA the filter kept (type 1: differences, "
           "2: \"Which video ...?\", 3: same main action, YES/NO); [cyan]qa_stats[/cyan] = "
           "{model, sources: {reference, candidate}, generated: {type: n}, kept: {type: n}, "
           "dropped: {reason: n}, dropped_items: [{type, q, a, reason}]}. A pair whose QA are all dropped gets qa: []; one where "
           "neither clip has a description or narration is a missing_description error.",
    example="vi clips -i steps.jsonl | vi describe | vi pair | vi pair-qa --types 1,2,3 -o pair_qa.jsonl",
    config=PairQAConfig, fields=("qa", "qa_stats"), process=pair_qa)
