"""`vi extract-steps`: WikiHow-style steps with start/end times from a timestamped transcript.

ShowHowTo (Sec. 3.1) prompts an LLM with the transcript's lines and asks for concise,
actionable, temporally ordered steps, each with the times it is carried out; a step may span
several lines. Here the lines are numbered (`[n] text`) and each step cites the first and
last line that state it; the model never types a time, and each step's start and end are the
start of its first line and the end of its last. (A small model asked to type times copies
the time of a neighbouring line.)

Which lines make a step (`segmentation`):
- "filtered" (the default): the model picks each step's lines itself, from an enum of the lines
  shown, at most MAX_STEPS per chunk; a first pass labels each line STEP, MORE or TALK
  (narration_labels.py), and a step whose every cited line is TALK (a greeting, an aside, the
  outro) is dropped, listed in `steps.repairs`. A chunk whose lines are all talk costs no request.
- "model": the model's citations as they are, with no label pass.
- "labels": the labels make the steps (a STEP line and the MORE lines after it) and the model only
  writes one instruction per step, the reply's schema fixing each step's lines.
On the hand-written narrations (README, vi extract-steps) the labels alone drop the talk the 1.5B
model copies as steps but merge some steps, and the model alone keeps the steps apart but copies
talk; filtered keeps the model's steps and the labels' verdict on talk, and meets the issue's bar
on 4 of 6 transcripts where model meets it on 1 and labels on 3. The citations are checked
either way: order, overlap, repeats; what is repaired is listed in `steps.repairs`, and a reply
with no usable step is an error record.

A transcript longer than the model's context is cut into chunks of whole lines. Each chunk
owns a stretch of time (its "core") and is shown with `overlap_s` seconds of neighbouring
lines for context; a step is kept from the chunk whose core holds its start, so steps in
the overlap are neither lost nor doubled.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vi.core.errors import RecordError
from vi.core.records import finite_number
from vi.core.models.chat import UsesLLM, check_llm
from vi.core.seeding import record_seed
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt
from vi.pipelines.common.transcript_text import Segment, is_speech, speech_segments, transcript_segments
from vi.pipelines.showhowto.narration_labels import label_lines, step_runs

STAGE = "extract-steps"
NO_TITLE = "(no title)"
MAX_STEPS = 15  # per chunk; ShowHowTo's videos have 7.7 +- 2.8 steps
SAFETY_TOKENS = 64  # the token count of a rendered chat is estimated, not exact
SEGMENTATIONS = ("filtered", "labels", "model")


def steps_schema(line_numbers: list[int]) -> dict:
    """The reply's JSON schema; a cited line can only be one of `line_numbers` (llama.cpp's
    grammar has no integer bounds, so they are an enum)."""
    line = {"enum": list(line_numbers)}
    return {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 150},
            "steps": {"type": "array", "minItems": 0, "maxItems": MAX_STEPS, "items": {
                "type": "object",
                "properties": {"first_line": line, "last_line": line,
                               "text": {"type": "string", "maxLength": 300}},
                "required": ["first_line", "last_line", "text"]}},
        },
        "required": ["title", "steps"],
    }


def opening_words(text: str, count: int = 8) -> str:
    words = text.split()
    return " ".join(words[:count]) + (" ..." if len(words) > count else "")


def labelled_steps_schema(runs: list[tuple[int, int]], said: list[str] | None = None) -> dict:
    """The reply's schema when the labels fixed the steps: step i cites exactly `runs[i]`
    (line numbers) and, with `said`, first repeats the opening words of what was said then, so
    the model writes each instruction right after the words it is about (without them, the
    1.5B model wrote step 3's instruction at step 2's lines)."""
    def step(k: int, first: int, last: int) -> dict:
        fields = {"first_line": {"const": first}, "last_line": {"const": last}}
        if said is not None:
            fields["said"] = {"const": opening_words(said[k])}
        return {"type": "object", "properties": {**fields, "text": {"type": "string", "maxLength": 300}},
                "required": [*fields, "text"]}
    return {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 150},
            "steps": {"type": "array", "minItems": len(runs), "maxItems": len(runs),
                      "prefixItems": [step(k, a, b) for k, (a, b) in enumerate(runs)]},
        },
        "required": ["title", "steps"],
    }


def numbered_lines(segments: list[Segment], first: int = 1) -> list[str]:
    """The transcript lines as the prompt shows them: `[n] text`, numbered from `first`."""
    return [f"[{n}] {s.text}" for n, s in enumerate(segments, first)]


@dataclass(frozen=True)
class ExtractConfig(UsesLLM):
    model: str = "qwen2.5-coder-1.5b"
    prompt: Path | None = None
    n_ctx: int = 4096
    max_new_tokens: int = 1024
    overlap_s: float = 30.0  # context shown on each side of a chunk of a long transcript
    tolerance_s: float = 2.0  # times this far outside the video are clamped, not refused
    device: str = "auto"
    seed: int = 0
    threads: int | None = None  # llama.cpp's CPU threads
    concurrency: int = 1  # requests in flight (server) or batch (transformers)
    segmentation: str = "filtered"  # which lines make a step: see the module's docstring
    template: ChatPrompt = field(init=False, compare=False)
    write_template: ChatPrompt = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 64 or self.max_new_tokens >= self.n_ctx // 2:
            raise ValueError(f"--max-new-tokens must be between 64 and half of --n-ctx "
                             f"({self.n_ctx // 2}), got {self.max_new_tokens}")
        if self.segmentation not in SEGMENTATIONS:
            raise ValueError(f"--segmentation must be one of {', '.join(SEGMENTATIONS)}, got {self.segmentation!r}")
        if self.overlap_s < 0 or self.tolerance_s < 0:
            raise ValueError("--overlap and --tolerance must not be negative")
        check_llm(self.llm_settings)  # a bad --device or --llm, a missing model or server: before any record
        object.__setattr__(self, "template", load_prompt(
            "extract_steps", self.prompt if self.segmentation != "labels" else None,
            needs=("title", "transcript")))
        object.__setattr__(self, "write_template", load_prompt(
            "extract_steps_write", self.prompt if self.segmentation == "labels" else None,
            needs=("title", "steps")))


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


def line_number(value: Any) -> int | None:
    number = finite_number(value)
    return int(number) if number is not None and number == int(number) else None


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


def cited_steps(raw: list[Any], count: int, texts: list[str] | None = None
                ) -> tuple[list[tuple[int, int, str]], list[str]]:
    """The model's steps as (first line, last line, text), lines numbered 1..`count`: checked,
    moved onto the lines their words come from (`texts`, the lines' text, when given), in
    order, without overlaps or repeats: (steps, repairs made)."""
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
            repairs.append(f"step {i}: cites lines {first}-{last}, outside the transcript's "
                           f"1-{count}, dropped")
            continue
        if first < 1 or last > count:
            first, last = max(first, 1), min(last, count)
            repairs.append(f"step {i}: cited lines cut to the transcript's 1-{count}")
        if texts is not None:
            moved = snap_to_lines(first, last, text, texts)
            if moved != (first, last):
                repairs.append(f"step {i}: cited lines {first}-{last}, moved to {moved[0]}-{moved[1]}, "
                               "the lines its words come from")
                first, last = moved
        cited.append((first, last, text))
    ordered = sorted(cited, key=lambda c: (c[0], c[1]))
    if ordered != cited:
        repairs.append("steps reordered by their lines")
    steps: list[list] = []
    for first, last, text in ordered:
        if steps and steps[-1][2].casefold() == text.casefold():  # often from chunk overlap
            steps[-1][1] = max(steps[-1][1], last)
            repairs.append(f"repeated step {text!r} merged")
            continue
        if steps and first < steps[-1][1]:  # two steps may share one line, no more
            repairs.append(f"step {steps[-1][2]!r} (lines {steps[-1][0]}-{steps[-1][1]}) overlapped "
                           f"the next one; cut to end at line {max(steps[-1][0], first)}")
            steps[-1][1] = max(steps[-1][0], first)
        steps.append([first, last, text])
    return [tuple(s) for s in steps], repairs


def timed_steps(cited: list[tuple[int, int, str]], segments: list[Segment], indices: list[int],
                duration: float, tolerance: float, repairs: list[str]) -> list[dict]:
    """Items `{text, start, end, lines}`: start of the first cited line, end of the last one,
    inside the video; `lines` are indices into the record's transcript.segments."""
    items = []
    for first, last, text in cited:
        start, end = segments[first - 1].start, segments[last - 1].end
        if end < -tolerance or start > duration + tolerance:
            repairs.append(f"step {text!r}: its lines ({start:.2f}-{end:.2f} s) are outside the "
                           f"video (0-{duration:.2f} s), dropped")
            continue
        clamped = (min(max(start, 0.0), duration), min(max(end, 0.0), duration))
        if abs(clamped[0] - start) > 0.01 or abs(clamped[1] - end) > 0.01:
            repairs.append(f"step {text!r}: times clamped to the video")
        items.append({"text": text, "start": round(clamped[0], 2), "end": round(clamped[1], 2),
                      "lines": [indices[first - 1], indices[last - 1]]})
    return items


def drop_talk(cited: list[tuple[int, int, str]], labels: dict[int, str], repairs: list[str]
              ) -> list[tuple[int, int, str]]:
    """The model's steps less those whose every cited line the label pass called TALK (a line
    with no label, in a chunk's overlap, counts as not talk): `segmentation="filtered"`."""
    kept = []
    for first, last, text in cited:
        if all(labels.get(line) == "TALK" for line in range(first, last + 1)):
            repairs.append(f"step {text!r}: lines {first}-{last} all labelled TALK, dropped")
            continue
        kept.append((first, last, text))
    return kept


def speech_lines(record: dict) -> tuple[list[Segment], list[int]]:
    """The speech segments in time order, and the index of each in `transcript.segments`."""
    segments = speech_segments(record)  # checks the transcript
    raw = transcript_segments(record)
    order = sorted(range(len(raw)), key=lambda i: (float(raw[i]["start"]),  # as segments_of sorts
                                                   max(float(raw[i]["start"]), float(raw[i]["end"]))))
    indices = [i for i in order if is_speech(raw[i]["text"].strip())]
    return segments, indices


def owned_by(chunk: Chunk, step: Any, segments: list[Segment]) -> bool:
    """Whether `step` belongs to `chunk`: its first cited line starts in the chunk's core
    (a step citing no usable line is kept, for cited_steps to report)."""
    first = line_number(step.get("first_line")) if isinstance(step, dict) else None
    if first is None or not 1 <= first <= len(segments):
        return True
    return chunk.core_start <= segments[first - 1].start < chunk.core_end


def video_duration(record: dict, segments: list[Segment]) -> float:
    duration = finite_number(record.get("duration"))
    return duration if duration is not None and duration > 0 else max(s.end for s in segments)


def extract(record: dict, config: ExtractConfig) -> dict:
    segments, indices = speech_lines(record)
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
    number = {id(s): n for n, s in enumerate(segments, 1)}  # the line numbers the model cites
    line_tokens = {id(s): llm.count_tokens(numbered_lines([s], number[id(s)])[0]) + 1
                   for s in segments}
    longest = max(line_tokens.values())
    if longest > budget:
        raise RecordError("context_too_small", f"record {record['id']}: one transcript segment is "
                          f"{longest} tokens, more than the {budget} the prompt leaves in --n-ctx "
                          f"{config.n_ctx}; raise --n-ctx (or re-run vi transcribe, which cuts "
                          "segments at sentences)")
    chunks = plan_chunks(segments, lambda s: line_tokens[id(s)], budget, config.overlap_s)
    titles, raw, labels = [], [], {}
    for n, chunk in enumerate(chunks):
        first = number[id(chunk.segments[0])]  # a chunk's lines are consecutive
        if config.segmentation in ("labels", "filtered"):
            shown = label_lines(llm, title, [s.text for s in chunk.segments], record["id"])
            labels |= {first + i: mark for i, mark in enumerate(shown)
                       if chunk.core_start <= chunk.segments[i].start < chunk.core_end}
        if config.segmentation == "filtered" and all(m["label"] == "TALK" for m in shown):
            continue  # no step of this chunk could survive the filter: no request
        if config.segmentation == "labels":
            runs = [(first + a, first + b) for a, b in step_runs([m["label"] for m in shown])
                    if chunk.core_start <= chunk.segments[a].start < chunk.core_end]
            if not runs:  # nothing but talk here: no step to write
                continue
            said = [" ".join(s.text for s in segments[a - 1:b]) for a, b in runs]
            schema = labelled_steps_schema(runs, said)
            messages = config.write_template.render(title=title, steps="\n".join(
                f"Step {k} (lines {a}-{b}): {words}" for k, ((a, b), words) in enumerate(zip(runs, said), 1)))
        else:
            messages = config.template.render(
                title=title, transcript="\n".join(numbered_lines(chunk.segments, first)))
            schema = steps_schema(list(range(first, first + len(chunk.segments))))
        reply = llm.chat(messages, schema=schema, max_tokens=config.max_new_tokens,
                         seed=record_seed(config.seed, f"{record['id']}#{n}") % 2**32)
        chunk_title, steps = parse_reply(reply.text, record["id"])
        titles.append(chunk_title)
        raw += [s for s in steps if owned_by(chunk, s, segments)]
    if labels and all(mark["label"] == "TALK" for mark in labels.values()):
        raise RecordError("no_steps", f"record {record['id']}: every narration line was labelled "
                          "TALK (a greeting, an aside, an opinion...): the video teaches no task. "
                          "vi filter-instructional sets such videos aside")
    # The labels' lines are kept as they are; the model's own citations are moved onto the lines
    # their words come from (snap_to_lines).
    texts = [s.text for s in segments] if config.segmentation != "labels" else None
    cited, repairs = cited_steps(raw, len(segments), texts)
    if config.segmentation == "filtered":
        kept = drop_talk(cited, {line: mark["label"] for line, mark in labels.items()}, repairs)
        if cited and not kept:
            raise RecordError("no_steps", f"record {record['id']}: every step the model gave cites only lines "
                              "labelled TALK (a greeting, an aside, an opinion...): the video teaches no "
                              f"task ({'; '.join(repairs)}). vi filter-instructional sets such videos aside")
        cited = kept
    items = timed_steps(cited, segments, indices, video_duration(record, segments),
                        config.tolerance_s, repairs)
    if not items:
        why = "; ".join(repairs) or ("it listed none: does the video teach a task? "
                                     "vi filter-instructional sets aside those that do not")
        raise RecordError("no_steps", f"record {record['id']}: no usable step in the model's "
                          f"reply ({why})")
    extra = {}
    if labels:  # one label per transcript segment (null: not speech), for reading the steps
        line_labels: list[str | None] = [None] * len(transcript_segments(record))
        for line, mark in labels.items():
            line_labels[indices[line - 1]] = mark["label"]
        extra["line_labels"] = line_labels
    return {"steps": {"title": next((t for t in titles if t), title), "items": items,
                      "model": config.model, "segmentation": config.segmentation,
                      "chunks": len(chunks), "repairs": repairs, **extra}}
