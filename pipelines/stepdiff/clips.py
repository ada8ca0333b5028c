"""`vi clips`: clip records `{id, video, start, end, keystep, ...}`, the units StepDiff pairs.

Three sources, each made into records before the stage driver checks them:

- A StepDiff benchmark JSONL (DiffCap, DiffMCQ, DiffRank): every distinct clip id it names
  (`reference`, `candidate`, `targets`, `options`, `answer`), in order of first appearance.
  Clip ids are `<youtube_id>_<start>_<end>`; a youtube id may contain `_` itself, so ids
  split from the right. Their keystep is unknown (null) unless a segment file gives one for
  the same video and times.
- An HT-Step-style segment file: rows with a video, a start, an end and a step text
  (`SEGMENT_COLUMNS` lists the accepted column names).
- Records of `vi extract-steps`: each `steps.items[i]` becomes a clip, carrying the narration
  spoken during it when the record has a `transcript`.

Every clip is then checked by `check_clip`: start < end, the video file exists, and the clip
lies inside the video (the source record's duration, else ffprobe's). A clip that fails is an
error record; so is a source line or record that yields no clip.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vi.core import media
from vi.core.config import option
from vi.core.errors import RecordError
from vi.core.records import (
    REJECTED, Record, content_id, finite_number, has_errors, invalid_line_record, loads, with_error)
from vi.pipelines.common.transcript_text import is_speech, segments_of

STAGE = "clips"
BENCHMARK_FIELDS = ("reference", "candidate", "targets", "options", "answer")
# Accepted column names per role, in order of preference when a file has several.
# HT-Step's own CSVs use video-id, t-start, t-end and label.
SEGMENT_COLUMNS = {"video": ("video_id", "youtube_id", "video-id"), "start": ("start", "start_time", "t-start"),
                   "end": ("end", "end_time", "t-end"), "step": ("step", "keystep", "label")}
_SECONDS = re.compile(r"\d+(?:\.\d+)?")
TIME_TOLERANCE_S = 0.5  # a clip may end this far after its video: time stamps and files disagree slightly


@dataclass(frozen=True, kw_only=True)
class ClipsConfig:
    """The options of `vi clips`, checked when built (a bad one fails before any record): where the
    clips come from, and how far past its video's end a clip may reach."""

    from_benchmark: tuple[Path, ...] = option(
        (), flag="--from-benchmark", metavar="FILE",
        help="A StepDiff benchmark JSONL (repeatable): every distinct clip id in reference, candidate, targets, "
             "options and answer.")
    from_segments: Path | None = option(None, flag="--from-segments", metavar="FILE", help=(
        "An HT-Step-style segment file (.csv, .tsv, .json list or .jsonl): one clip per row."))
    video_root: Path | None = option(None, help=(
        "Folder holding <youtube_id>.mp4 (or another video extension) for --from-benchmark and --from-segments."))
    keysteps: Path | None = option(None, metavar="FILE", help=(
        "With --from-benchmark: a segment file whose rows name the keystep of benchmark clips with the same "
        "video and times (to the millisecond)."))
    transcripts: Path | None = option(
        None, metavar="FILE", exists=True, dir_okay=False,
        help="With --from-benchmark or --from-segments: vi transcribe records (JSONL) of the videos; each clip "
             "gets the narration spoken during it. A record matches a video id by its id or its video's file name.")
    tolerance: float = option(TIME_TOLERANCE_S, help=(
        "Seconds a clip may end after its video's end (time stamps and files disagree slightly)."))

    def __post_init__(self) -> None:
        if self.from_benchmark and self.from_segments is not None:
            raise ValueError("give --from-benchmark or --from-segments, not both")
        if self.keysteps is not None and not self.from_benchmark:
            raise ValueError("--keysteps names the keysteps of --from-benchmark clips; use it with --from-benchmark")
        if self.transcripts is not None and not self.annotated:
            raise ValueError("--transcripts gives narration to --from-benchmark or --from-segments clips; records "
                             "of vi extract-steps carry their own transcript")
        if self.tolerance < 0:
            raise ValueError("--tolerance must not be negative")
        if self.annotated and (self.video_root is None or not self.video_root.is_dir()):
            raise ValueError(f"--video-root must be a folder of <youtube_id>.mp4 files (got {self.video_root})")

    @property
    def annotated(self) -> bool:
        """The clips come from a benchmark or segment file, not from vi extract-steps records."""
        return bool(self.from_benchmark) or self.from_segments is not None


def rejected(record: Record, kind: str, message: str) -> Record:
    """`record` as a failure of this stage, made while reading its input (see core.records)."""
    out = with_error(record, STAGE, kind, message)
    out[REJECTED] = True
    return out


def seconds_text(value: float) -> str:
    """Shortest text for a time that reads back as the same float: 265.0 -> '265'."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def clip_id(video_id: str, start: float, end: float) -> str:
    return f"{video_id}_{seconds_text(start)}_{seconds_text(end)}"


def parse_clip_id(text: Any) -> tuple[str, float, float]:
    """`<youtube_id>_<start>_<end>` -> (youtube_id, start, end); ValueError saying what is wrong."""
    parts = text.rsplit("_", 2) if isinstance(text, str) else []
    if len(parts) != 3 or not parts[0]:
        raise ValueError(f"{text!r} is not <youtube_id>_<start>_<end>")
    for name, value in zip(("start", "end"), parts[1:]):
        if not _SECONDS.fullmatch(value):
            raise ValueError(f"{text!r}: its {name} {value!r} is not a number of seconds")
    return parts[0], float(parts[1]), float(parts[2])


def find_video(video_root: Path, video_id: str) -> str:
    """`<root>/<id>.<ext>` for the first video extension that exists, else the .mp4 path
    (whose absence check_clip reports)."""
    for extension in media.VIDEO_EXTENSIONS:
        path = video_root / f"{video_id}{extension}"
        if path.is_file():
            return os.path.abspath(path)
    return os.path.abspath(video_root / f"{video_id}.mp4")


# --- a StepDiff benchmark file --------------------------------------------------------------

def _clip_values(row: dict, lineno: int) -> list[tuple[str, Any]]:
    """(field, value) for every clip id a benchmark row names; RecordError for a bad shape."""
    found = []
    for name in BENCHMARK_FIELDS:
        value = row.get(name)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        for item in values:  # DiffMCQ: options is a list of [reference, candidate] pairs
            found += [(name, v) for v in (item if isinstance(item, list) else [item])]
    if not found:
        raise RecordError("missing_field", f"line {lineno} names no clip (none of "
                          f"{', '.join(BENCHMARK_FIELDS)}); is this a StepDiff DiffCap, DiffMCQ "
                          "or DiffRank file?")
    return found


def benchmark_clips(path: Path, video_root: Path, keysteps: dict | None = None) -> list[Record]:
    """One clip per distinct clip id in the benchmark JSONL at `path`, plus error records."""
    out: list[Record] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = loads(line)
            except ValueError as exc:
                out.append(invalid_line_record(STAGE, line.rstrip("\n"), lineno, f"not JSON in {path} ({exc})"))
                continue
            raw = {"id": content_id("benchmark-line", f"{lineno}:{line}"), "raw": line.rstrip("\n")}
            try:
                values = _clip_values(row if isinstance(row, dict) else {}, lineno)
            except RecordError as exc:
                out.append(rejected(raw, exc.kind, f"{path} {exc.message}"))
                continue
            for field, value in values:
                if isinstance(value, str) and value in seen:
                    continue
                try:
                    video_id, start, end = parse_clip_id(value)
                except ValueError as exc:
                    bad = {"id": content_id("bad-clip-id", f"{lineno}:{field}:{value}"), "raw": value}
                    out.append(rejected(bad, "bad_clip_id", f"{path} line {lineno}, field {field!r}: {exc}"))
                    continue
                seen.add(value)
                keystep = (keysteps or {}).get(segment_key(video_id, start, end))
                out.append({"id": value, "video": find_video(video_root, video_id), "start": start,
                            "end": end, "keystep": keystep, "source_id": video_id})
    return out


# --- an HT-Step-style segment file ----------------------------------------------------------

def _segment_rows(path: Path) -> Iterator[tuple[int, Any]]:
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle, delimiter="\t" if suffix == ".tsv" else ",")
            for row in reader:
                yield reader.line_num, row
    elif suffix == ".jsonl":
        with open(path, encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, start=1):
                if line.strip():
                    try:
                        yield lineno, loads(line)
                    except ValueError:
                        yield lineno, line.rstrip("\n")
    elif suffix == ".json":
        rows = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(rows, list):
            raise ValueError(f"{path}: a .json segment file must be a list of row objects")
        yield from enumerate(rows, start=1)
    else:
        raise ValueError(f"{path}: a segment file must be .csv, .tsv, .json or .jsonl")


def _columns(path: Path, names: Iterable[str]) -> dict[str, str]:
    present = list(names)
    chosen = {role: next((c for c in options if c in present), None)
              for role, options in SEGMENT_COLUMNS.items()}
    missing = [f"the {role} ({' or '.join(SEGMENT_COLUMNS[role])})" for role, column in chosen.items()
               if column is None]
    if missing:
        raise ValueError(f"{path}: no column for {', '.join(missing)} (found: {', '.join(present) or 'none'}); "
                         "a segment file needs one column of each: "
                         + "; ".join("|".join(names) for names in SEGMENT_COLUMNS.values()))
    return chosen  # type: ignore[return-value]


def _time(value: Any) -> float | None:
    if isinstance(value, str):
        value = float(value) if _SECONDS.fullmatch(value.strip()) else None
    value = finite_number(value)
    return None if value is None or value < 0 else value


def segment_clips(path: Path, video_root: Path | None) -> list[Record]:
    """One clip per row of the segment file at `path`, plus error records for bad rows."""
    out: list[Record] = []
    columns: dict[str, str] | None = None
    taken: dict[str, str] = {}
    for lineno, row in _segment_rows(path):
        raw = {"id": content_id("bad-segment", f"{path.name}:{lineno}"), "raw": row}
        if not isinstance(row, dict):
            out.append(rejected(raw, "bad_segment", f"{path} row {lineno}: not a JSON object"))
            continue
        columns = columns or _columns(path, row)  # the first row names the columns
        video_id, step = row.get(columns["video"]), row.get(columns["step"])
        if isinstance(step, int) and not isinstance(step, bool):  # a label id from a taxonomy
            step = str(step)
        start, end = _time(row.get(columns["start"])), _time(row.get(columns["end"]))
        problem = ("video" if not isinstance(video_id, str) or not video_id.strip() else
                   "start" if start is None else "end" if end is None else
                   "step" if not isinstance(step, str) or not step.strip() else None)
        if problem is not None:
            out.append(rejected(raw, "bad_segment", f"{path} row {lineno}: {columns[problem]} is "
                                f"{row.get(columns[problem])!r}; need a video id, times in seconds >= 0 "
                                "and a step text"))
            continue
        video_id, step = video_id.strip(), " ".join(step.split())
        cid = clip_id(video_id, start, end)
        if cid in taken:  # the same segment twice: harmless when the step agrees
            if taken[cid] != step:
                out.append(rejected(raw, "conflicting_segment", f"{path} row {lineno}: clip {cid} "
                                    f"was already read with step {taken[cid]!r}, here {step!r}"))
            continue
        taken[cid] = step
        video = find_video(video_root, video_id) if video_root is not None else None
        out.append({"id": cid, "video": video, "start": start, "end": end, "keystep": step,
                    "source_id": video_id})
    if columns is None and path.suffix.lower() in (".csv", ".tsv"):
        with open(path, newline="", encoding="utf-8") as handle:  # a header alone is still checked
            delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
            _columns(path, csv.DictReader(handle, delimiter=delimiter).fieldnames or [])
    return out


def segment_key(video_id: str, start: float, end: float) -> tuple[str, float, float]:
    """Times to the millisecond: the benchmark and a segment file may print them differently."""
    return video_id, round(start, 3), round(end, 3)


def keystep_lookup(path: Path) -> tuple[dict, list[Record]]:
    """{segment_key: step} from a segment file, and its unusable rows."""
    clips = segment_clips(path, None)
    good = [c for c in clips if not has_errors(c)]
    return {segment_key(c["source_id"], c["start"], c["end"]): c["keystep"] for c in good}, \
        [c for c in clips if has_errors(c)]


# --- narration for annotated clips ---------------------------------------------------------

def transcript_index(path: Path) -> dict[str, Record]:
    """{video id: record} for the `vi transcribe` records in the JSONL at `path`, under the
    record's id and its video's file name without extension (what a YouTube id names)."""
    index: dict[str, Record] = {}
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = loads(line)
            except ValueError as exc:
                raise ValueError(f"--transcripts {path} line {lineno}: not JSON ({exc})") from None
            if not isinstance(record, dict) or "transcript" not in record or has_errors(record):
                continue  # a video that failed to transcribe has no narration to give
            for key in (record.get("id"), Path(record["video"]).stem if isinstance(record.get("video"), str) else None):
                if isinstance(key, str) and key:
                    index.setdefault(key, record)
    return index


def with_narration(records: Iterable[Record], transcripts: dict[str, Record]) -> Iterator[Record]:
    """Each clip with the narration its video's transcript has during it, when there is one."""
    for record in records:
        transcript = None if has_errors(record) else transcripts.get(record.get("source_id"))
        if transcript is None:
            yield record
            continue
        try:
            yield {**record, "narration": narration(spoken_segments(transcript), record["start"], record["end"])}
        except RecordError as exc:
            yield rejected(record, exc.kind, f"clip {record['id']}: the transcript of {record['source_id']}: "
                           f"{exc.message}")


# --- records of vi extract-steps ------------------------------------------------------------

def spoken_segments(record: Record) -> list[dict]:
    """The transcript's segments that hold speech, in time order, their times checked."""
    segments_of(record)  # a clear error for a malformed transcript, naming the segment
    raw = record["transcript"]
    raw = raw.get("segments") if isinstance(raw, dict) else raw
    return sorted((s for s in raw if is_speech(s["text"])), key=lambda s: (s["start"], s["end"]))


WORD_OVERLAP_S = 0.15


def narration(segments: list[dict], start: float, end: float) -> str:
    """The words spoken during [start, end]: the timed words that overlap it by WORD_OVERLAP_S or
    half their length, whichever is less (Whisper stretches a last word into the pause, so a mere
    touch would hand it to the next clip too) or, for a segment without word times, the whole
    segment when it overlaps."""
    spoken: list[str] = []
    for seg in segments:
        if not (seg["start"] < end and seg["end"] > start):
            continue
        words = [w for w in seg.get("words") or [] if isinstance(w, dict) and isinstance(w.get("word"), str)
                 and finite_number(w.get("start")) is not None and finite_number(w.get("end")) is not None]
        if words:
            spoken += [w["word"].strip() for w in words
                       if min(end, w["end"]) - max(start, w["start"]) >= min(WORD_OVERLAP_S, (w["end"] - w["start"]) / 2)]
        else:
            spoken.append(seg["text"].strip())
    return " ".join(t for t in spoken if t)


def _step_clips(record: Record) -> list[Record]:
    steps = record.get("steps")
    items = steps.get("items") if isinstance(steps, dict) else None
    if not isinstance(items, list) or not items:
        raise RecordError("missing_field", f"record {record['id']}: no 'steps.items'; run vi extract-steps "
                          "first, or give --from-benchmark / --from-segments")
    video = record.get("video")
    if not isinstance(video, str) or not video:
        raise RecordError("missing_field", f"record {record['id']}: no 'video' path; run vi probe first")
    duration = finite_number(record.get("duration"))
    segments = spoken_segments(record) if record.get("transcript") is not None else None
    clips: list[Record] = []
    for i, item in enumerate(items):
        text = item.get("text") if isinstance(item, dict) else None
        start, end = (finite_number(item.get(k)) if isinstance(item, dict) else None for k in ("start", "end"))
        if not isinstance(text, str) or not text.strip() or start is None or end is None:
            raise RecordError("bad_steps", f"record {record['id']}: steps.items[{i}] needs 'text' and "
                              "numeric 'start' and 'end'; re-run vi extract-steps")
        cid = clip_id(str(record["id"]), start, end)
        if any(c["id"] == cid for c in clips):  # two steps on the same times: keep both, apart
            cid = f"{cid}~{i}"
        clip = {"id": cid, "video": video, "start": start, "end": end, "keystep": text.strip(),
                "source_id": record["id"], "step_index": i}
        if segments is not None:
            clip["narration"] = narration(segments, start, end)
        if duration is not None and duration > 0:
            clip["video_duration"] = duration
        clips.append(clip)
    return clips


def step_clips(records: Iterable[Record]) -> Iterator[Record]:
    """The clips of each record; a record that has none, or errors, comes out as itself."""
    for record in records:
        if has_errors(record):
            yield record
            continue
        try:
            clips = _step_clips(record)
        except RecordError as exc:
            yield rejected(record, exc.kind, exc.message)
            continue
        yield from clips


# --- the check every clip goes through ------------------------------------------------------

class VideoLengths:
    """Each video's duration from ffprobe, asked once per file however many clips it has."""

    def __init__(self) -> None:
        self._known: dict[str, float | RecordError] = {}

    def __call__(self, video: str) -> float:
        if video not in self._known:
            try:
                self._known[video] = media.probe(video).duration
            except RecordError as exc:
                self._known[video] = exc
        found = self._known[video]
        if isinstance(found, RecordError):
            raise found
        return found


def check_clip(record: Record, lengths: VideoLengths, tolerance: float) -> dict:
    """The clip's `video_duration`, or a RecordError saying why the clip is unusable."""
    start, end, video = record["start"], record["end"], record.get("video")
    if not start < end or start < 0:
        raise RecordError("bad_interval", f"clip {record['id']}: start {start} s must be >= 0 and "
                          f"before end {end} s")
    if not isinstance(video, str) or not video:
        raise RecordError("missing_field", f"clip {record['id']}: no 'video' path; give --video-root")
    media.check_readable(video)  # a missing file is an error even when the duration is known
    duration = finite_number(record.get("video_duration"))
    duration = duration if duration is not None and duration > 0 else lengths(video)
    if end > duration + tolerance:
        raise RecordError("clip_outside_video", f"clip {record['id']}: ends at {end} s, after the end of "
                          f"{video} ({duration:.2f} s); wrong video file, or wrong times?")
    return {"video_duration": duration}
