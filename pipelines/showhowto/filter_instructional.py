"""`vi filter-instructional`: keep how-to videos, set aside talks, vlogs and reviews.

ShowHowTo (Sec. 3.1) asks an LLM whether a video "actively demonstrates or teaches how to
perform a specific task with physical steps", from its title and the beginning of its
transcript (about 1,500 characters, 2,000 more for videos over 400 s), with a few examples
of each kind. The reply is constrained to {"explanation": ..., "answer": "Yes"|"No"}, so a small
model cannot ramble its way out of the format; the explanation comes first, so that the label follows
from what the model has just said of the video (asked label first, the 1.5B model answered Yes to a
vlog it had called a vlog: evaluation/showhowto/RESULTS.md, the filter on held-out transcripts).

A transcript without speech (empty, or only "[Music]"-style captions) is labelled false
without asking the model: there is no narration to mine steps from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from vi.core.config import internal, option
from vi.core.errors import RecordError
from vi.core.models.chat import LLMConfig, check_llm
from vi.core.seeding import record_seed
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt
from vi.pipelines.common.transcript_text import cut_text, plain_text, speech_segments

STAGE = "filter-instructional"
NO_TITLE = "(no title)"
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
    max_chars: int = option(1500, help=(  # of transcript text shown to the model
        "Transcript characters shown to the model (2,000 more for videos over 400 s)."))
    long_video_s: float = internal(400.0)  # videos longer than this ...
    long_extra_chars: int = internal(2000)  # ... show this much more
    template: ChatPrompt = internal(init=False)

    def __post_init__(self) -> None:
        if self.max_chars < 100:
            raise ValueError(f"--max-chars must be at least 100, got {self.max_chars}")
        check_llm(self.llm_settings)  # a bad --device or --llm, a missing model or server: before any record
        object.__setattr__(self, "template", load_prompt(
            "filter_instructional", self.prompt, needs=("title", "transcript")))


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


def classify(record: dict, config: FilterConfig) -> dict:
    excerpt = transcript_excerpt(record, config)
    if not excerpt:
        return {"instructional": {"label": False, "model": None, "reason":
                "no narration: the transcript is empty or holds only music/noise captions"}}
    title = str(record.get("title") or NO_TITLE)
    llm = config.load_llm()
    messages = config.template.render(title=title, transcript=excerpt)
    reply = llm.chat(messages, schema=ANSWER_SCHEMA, max_tokens=160,
                     seed=record_seed(config.seed, record["id"]) % 2**32)
    label, reason = parse_answer(reply.text, record["id"])
    return {"instructional": {"label": label, "reason": reason, "model": config.llm}}


def is_rejected(record: dict) -> bool:
    """For --drop: records labelled not instructional go to --rejects."""
    return record.get("instructional", {}).get("label") is False
