"""The narration of a record's `transcript` as text for an LLM prompt.

Shared by the LLM stages: which segments are speech (Whisper writes "[Music]" or "♪" over
music), the plain text cut to a length, and the timestamped lines ShowHowTo's prompts use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vi.core.errors import RecordError
from vi.core.records import finite_number

# Whisper's non-speech captions: [Music], (applause), ♪ lyrics ♪, *laughs*, and the like.
_NON_SPEECH = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*|♪[^♪]*♪|[♪♫♬#~]")
_LETTERS = re.compile(r"[^\W\d_]", re.UNICODE)


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    text: str


def _time(value: Any, where: str, record_id: Any) -> float:
    if finite_number(value) is None:
        raise RecordError("bad_transcript", f"record {record_id}: {where} is {value!r}, not a "
                          "number of seconds; re-run vi transcribe")
    return float(value)


def transcript_segments(record: dict) -> Any:
    """`transcript.segments` as the record holds it, unchecked (a bare list is accepted too)."""
    transcript = record["transcript"]
    return transcript.get("segments") if isinstance(transcript, dict) else transcript


def segments_of(record: dict) -> list[Segment]:
    """Every segment of `record['transcript']` with its times checked, in time order."""
    transcript = record.get("transcript")
    if transcript is None:
        raise RecordError("missing_field", f"record {record.get('id')}: no 'transcript' field; "
                          "run vi transcribe first (vi probe ... | vi transcribe | ...)")
    segments = transcript_segments(record)
    if not isinstance(segments, list):
        raise RecordError("bad_transcript", f"record {record.get('id')}: 'transcript.segments' "
                          "must be a list of {start, end, text}")
    out = []
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict) or not isinstance(seg.get("text"), str):
            raise RecordError("bad_transcript", f"record {record.get('id')}: transcript segment "
                              f"{i} has no 'text' string")
        start = _time(seg.get("start"), f"transcript segment {i} 'start'", record.get("id"))
        end = _time(seg.get("end"), f"transcript segment {i} 'end'", record.get("id"))
        out.append(Segment(start, max(start, end), seg["text"].strip()))
    return sorted(out, key=lambda s: (s.start, s.end))


def is_speech(text: str) -> bool:
    return bool(_LETTERS.search(_NON_SPEECH.sub(" ", text)))


def speech_segments(record: dict) -> list[Segment]:
    """The segments that hold words, not only music or noise captions."""
    return [s for s in segments_of(record) if is_speech(s.text)]


def cut_text(text: str, limit: int) -> str:
    """`text` cut at a word boundary to at most `limit` characters, "..." marking a cut."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip() + "..."


def plain_text(segments: list[Segment]) -> str:
    return " ".join(s.text for s in segments if s.text)


def timestamped_lines(segments: list[Segment]) -> list[str]:
    """ShowHowTo's transcript lines: `12.30 - 15.70: "text"`."""
    return [f'{s.start:.2f} - {s.end:.2f}: "{s.text}"' for s in segments]
