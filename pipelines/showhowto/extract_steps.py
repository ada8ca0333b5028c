"""`vi extract-steps`: WikiHow-style steps with start/end times from a timestamped transcript.

ShowHowTo (Sec. 3.1) prompts an LLM with the transcript as lines `start - end: "text"` and
asks for concise, actionable, temporally ordered steps, each with the times it is carried
out; a step may span several lines. Here the reply is constrained to a JSON schema, then
checked against the video: times inside it, start <= end, temporal order. What is safely
repairable is repaired and listed in `steps.repairs`; a reply with no usable step is an
error record.

A transcript longer than the model's context is cut into chunks of whole lines. Each chunk
owns a stretch of time (its "core") and is shown with `overlap_s` seconds of neighbouring
lines for context; a step is kept from the chunk whose core holds its start, so steps in
the overlap are neither lost nor doubled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vi.core.errors import RecordError
from vi.core.records import finite_number
from vi.core.models.llm import ChatLLM, gguf_path, llama_gpu_layers, load_chat_llm
from vi.core.seeding import record_seed
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt
from vi.pipelines.common.transcript_text import Segment, speech_segments, timestamped_lines

STAGE = "extract-steps"
NO_TITLE = "(no title)"
STEPS_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 150},
        "steps": {"type": "array", "minItems": 1, "maxItems": 40, "items": {
            "type": "object",
            "properties": {"instruction": {"type": "string", "maxLength": 300},
                           "start": {"type": "number"}, "end": {"type": "number"}},
            "required": ["instruction", "start", "end"]}},
    },
    "required": ["title", "steps"],
}
SAFETY_TOKENS = 64  # the token count of a rendered chat is estimated, not exact


@dataclass(frozen=True)
class ExtractConfig:
    model: str = "qwen2.5-coder-1.5b"
    prompt: Path | None = None
    n_ctx: int = 4096
    max_new_tokens: int = 1024
    overlap_s: float = 30.0  # context shown on each side of a chunk of a long transcript
    tolerance_s: float = 2.0  # times this far outside the video are clamped, not refused
    device: str = "auto"
    seed: int = 0
    template: ChatPrompt = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 64 or self.max_new_tokens >= self.n_ctx // 2:
            raise ValueError(f"--max-new-tokens must be between 64 and half of --n-ctx "
                             f"({self.n_ctx // 2}), got {self.max_new_tokens}")
        if self.overlap_s < 0 or self.tolerance_s < 0:
            raise ValueError("--overlap and --tolerance must not be negative")
        llama_gpu_layers(self.device)
        gguf_path(self.model)  # a missing model stops the stage before any record (exit 5)
        object.__setattr__(self, "template", load_prompt(
            "extract_steps", self.prompt, needs=("title", "transcript")))

    def llm(self) -> ChatLLM:
        return load_chat_llm(self.model, n_ctx=self.n_ctx, device=self.device, seed=self.seed)


@dataclass(frozen=True)
class Chunk:
    core_start: float  # steps starting in [core_start, core_end) belong to this chunk
    core_end: float
    segments: list[Segment]


def plan_chunks(segments: list[Segment], line_tokens: Callable[[Segment], int], budget: int,
                overlap_s: float) -> list[Chunk]:
    """Cut `segments` into chunks whose lines fit `budget` tokens, context included."""
    if sum(line_tokens(s) for s in segments) <= budget:
        return [Chunk(-math.inf, math.inf, segments)]
    core_budget = max(1, int(budget * 0.6))  # the rest is for the overlap on both sides
    cores: list[list[Segment]] = [[]]
    used = 0
    for seg in segments:
        cost = line_tokens(seg)
        if cores[-1] and used + cost > core_budget:
            cores.append([])
            used = 0
        cores[-1].append(seg)
        used += cost
    chunks = []
    for i, core in enumerate(cores):
        first, last = core[0], core[-1]
        before = [s for s in segments if first.start - overlap_s <= s.start < first.start
                  and s not in core]
        after = [s for s in segments if last.start < s.start <= last.end + overlap_s
                 and s not in core]
        shown, spent = list(core), sum(line_tokens(s) for s in core)
        for seg in reversed(before):  # nearest context first, while it fits
            if spent + line_tokens(seg) > budget:
                break
            shown.insert(0, seg)
            spent += line_tokens(seg)
        for seg in after:
            if spent + line_tokens(seg) > budget:
                break
            shown.append(seg)
            spent += line_tokens(seg)
        core_start = -math.inf if i == 0 else first.start
        core_end = math.inf if i == len(cores) - 1 else cores[i + 1][0].start
        chunks.append(Chunk(core_start, core_end, shown))
    return chunks


def parse_reply(text: str, record_id: object) -> tuple[str, list[Any]]:
    try:
        reply = json.loads(text)
        return str(reply.get("title") or "").strip(), list(reply["steps"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RecordError("llm_output_invalid", f"record {record_id}: the model's reply is not "
                          f"the steps JSON ({exc}); if it was cut off, raise --max-new-tokens: "
                          f"{text[:200]!r}") from None


def validate_steps(raw: list[Any], duration: float, tolerance: float
                   ) -> tuple[list[dict], list[str]]:
    """Steps checked against a video of `duration` s: (items, repairs made)."""
    items, repairs = [], []
    for i, step in enumerate(raw, 1):
        text = str(step.get("instruction") or step.get("text") or "").strip() if isinstance(step, dict) else ""
        start = finite_number(step.get("start")) if isinstance(step, dict) else None
        end = finite_number(step.get("end")) if isinstance(step, dict) else None
        if not text:
            repairs.append(f"step {i}: no instruction text, dropped")
            continue
        if start is None or end is None:
            repairs.append(f"step {i}: start/end are not numbers, dropped")
            continue
        if start > end:
            start, end = end, start
            repairs.append(f"step {i}: start after end, swapped")
        if end < -tolerance or start > duration + tolerance:
            repairs.append(f"step {i}: {start:.2f}-{end:.2f} s is outside the video "
                           f"(0-{duration:.2f} s), dropped")
            continue
        clamped = (min(max(start, 0.0), duration), min(max(end, 0.0), duration))
        if abs(clamped[0] - start) > 0.01 or abs(clamped[1] - end) > 0.01:
            repairs.append(f"step {i}: times clamped to the video")
        items.append({"text": text, "start": round(clamped[0], 2), "end": round(clamped[1], 2)})
    ordered = sorted(items, key=lambda s: (s["start"], s["end"]))
    if ordered != items:
        repairs.append("steps reordered by start time")
    merged: list[dict] = []
    for item in ordered:  # the same instruction twice in a row (often from chunk overlap)
        if merged and merged[-1]["text"].casefold() == item["text"].casefold():
            merged[-1]["end"] = max(merged[-1]["end"], item["end"])
            repairs.append(f"repeated step {item['text']!r} merged")
            continue
        merged.append(item)
    return merged, repairs


def video_duration(record: dict, segments: list[Segment]) -> float:
    duration = finite_number(record.get("duration"))
    return duration if duration is not None and duration > 0 else max(s.end for s in segments)


def extract(record: dict, config: ExtractConfig) -> dict:
    segments = speech_segments(record)
    if not segments:
        raise RecordError("no_narration", f"record {record['id']}: the transcript has no speech "
                          "(empty, or only music/noise captions); no steps to extract. "
                          "vi filter-instructional --drop sets such videos aside")
    title = str(record.get("title") or NO_TITLE)
    llm = config.llm()
    overhead = llm.count_message_tokens(config.template.render(title=title, transcript=""))
    budget = min(llm.n_ctx, config.n_ctx) - overhead - config.max_new_tokens - SAFETY_TOKENS
    if budget < 100:
        raise RecordError("context_too_small", f"record {record['id']}: the prompt leaves "
                          f"{budget} tokens for the transcript; raise --n-ctx or shorten --prompt")
    line_tokens = {s: llm.count_tokens(timestamped_lines([s])[0]) + 1 for s in segments}
    longest = max(line_tokens.values())
    if longest > budget:
        raise RecordError("context_too_small", f"record {record['id']}: one transcript segment is "
                          f"{longest} tokens, more than the {budget} the prompt leaves in --n-ctx "
                          f"{config.n_ctx}; raise --n-ctx (or re-run vi transcribe, which cuts "
                          "segments at sentences)")
    chunks = plan_chunks(segments, line_tokens.__getitem__, budget, config.overlap_s)
    titles, raw = [], []
    for n, chunk in enumerate(chunks):
        messages = config.template.render(
            title=title, transcript="\n".join(timestamped_lines(chunk.segments)))
        reply = llm.chat(messages, schema=STEPS_SCHEMA, max_tokens=config.max_new_tokens,
                         seed=record_seed(config.seed, f"{record['id']}#{n}") % 2**32)
        chunk_title, steps = parse_reply(reply.text, record["id"])
        titles.append(chunk_title)
        raw += [s for s in steps if not isinstance(s, dict) or finite_number(s.get("start")) is None
                or chunk.core_start <= s["start"] < chunk.core_end]
    items, repairs = validate_steps(raw, video_duration(record, segments), config.tolerance_s)
    if not items:
        raise RecordError("no_steps", f"record {record['id']}: no usable step in the model's "
                          f"reply ({'; '.join(repairs) or 'it listed none'})")
    return {"steps": {"title": next((t for t in titles if t), title), "items": items,
                      "model": config.model, "chunks": len(chunks), "repairs": repairs}}
