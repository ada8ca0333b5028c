"""Reading records: JSONL in, one dict per line, never an exception for a bad line.

A line that is not a JSON object becomes an error record that carries the raw line, so a
stage downstream still sees it and nothing is lost. A record without an `id` gets a
content-derived one (so sharding and resume still work) plus an error naming the problem.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import jsonlines

Record = dict[str, Any]

ERRORS_FIELD = "errors"


def make_error(stage: str, kind: str, message: str) -> dict[str, str]:
    return {"stage": stage, "kind": kind, "message": message}


def with_error(record: Record, stage: str, kind: str, message: str) -> Record:
    """The record unchanged, plus one entry appended to its `errors` list."""
    out = dict(record)
    out[ERRORS_FIELD] = [*record.get(ERRORS_FIELD, []), make_error(stage, kind, message)]
    return out


def has_errors(record: Record) -> bool:
    return bool(record.get(ERRORS_FIELD))


def content_id(prefix: str, text: str) -> str:
    return f"{prefix}-{hashlib.sha1(text.encode('utf-8', 'surrogateescape')).hexdigest()[:12]}"


def invalid_line_record(stage: str, raw: str, lineno: int, reason: str) -> Record:
    # The id hashes the line number too: two identical bad lines stay two records.
    return {
        "id": content_id("invalid-line", f"{lineno}:{raw}"),
        "raw": raw,
        ERRORS_FIELD: [make_error(stage, "invalid_json", f"input line {lineno}: {reason}")],
    }


def ensure_id(record: Record, stage: str, lineno: int) -> Record:
    if "id" in record and isinstance(record["id"], (str, int)) and str(record["id"]) != "":
        return record
    canonical = json.dumps(record, sort_keys=True, ensure_ascii=False)
    fixed = {"id": content_id("no-id", canonical), **record}
    return with_error(
        fixed,
        stage,
        "missing_id",
        f"input line {lineno}: record has no usable 'id' (a non-empty string); "
        "give every record an id (vi probe assigns one per video)",
    )


def open_input(path: Path | None) -> IO[bytes]:
    if path is None or str(path) == "-":
        return sys.stdin.buffer
    return open(path, "rb")


def iter_records(source: IO[bytes], stage: str) -> Iterator[Record]:
    """Parse JSONL from a binary stream; blank lines are skipped, bad lines become error records."""
    for lineno, raw_bytes in enumerate(source, start=1):
        raw = raw_bytes.decode("utf-8", "surrogateescape").rstrip("\r\n")
        if not raw.strip():
            continue
        reader = jsonlines.Reader(io.StringIO(raw))
        try:
            record = reader.read(type=dict)
        except (jsonlines.InvalidLineError, UnicodeDecodeError) as exc:
            yield invalid_line_record(stage, raw, lineno, str(exc).split(" (line")[0])
            continue
        yield ensure_id(record, stage, lineno)


def read_records(path: Path | None, stage: str) -> Iterator[Record]:
    source = open_input(path)
    try:
        yield from iter_records(source, stage)
    finally:
        if source is not sys.stdin.buffer:
            source.close()


def count_in_shard(path: Path | None, shard) -> int | None:
    """How many records of FILE a run will see (for the progress bar's ETA); None for stdin."""
    if path is None or str(path) == "-":
        return None
    if shard is None:
        with open(path, "rb") as handle:
            return sum(1 for line in handle if line.strip())
    return sum(1 for record in read_records(path, "count") if shard.contains(record["id"]))


def dumps(record: Record) -> str:
    """One JSONL line. NaN/inf are not JSON, so they are refused here rather than emitted."""
    return json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"


def iter_file_records(paths: Iterable[Path], stage: str) -> Iterator[Record]:
    for path in paths:
        yield from read_records(path, stage)
