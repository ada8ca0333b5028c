"""Reading and writing records: JSONL, one dict per line, never an exception for a bad line.

A line that is not a JSON object becomes an error record that carries the raw line, so a
stage downstream still sees it and nothing is lost. A record without a usable `id` gets a
content-derived one (so sharding and resume still work) plus an error naming the problem.
Both are failures of the stage whose reader found them: the reader marks them with a
transient key that the driver strips (see `vi.core.stream`).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import jsonlines

Record = dict[str, Any]

ERRORS_FIELD = "errors"
REJECTED = "__vi_rejected_by_reader__"  # transient: never written out


def make_error(stage: str, kind: str, message: str) -> dict[str, str]:
    return {"stage": stage, "kind": kind, "message": message}


def with_error(record: Record, stage: str, kind: str, message: str) -> Record:
    """The record unchanged, plus one entry appended to its `errors` list."""
    out = dict(record)
    out[ERRORS_FIELD] = [*record.get(ERRORS_FIELD, []), make_error(stage, kind, message)]
    return out


def finite_number(value: Any) -> float | None:
    """`value` as a float when it is a finite JSON number (not a bool, not a string), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def has_errors(record: Record) -> bool:
    return bool(record.get(ERRORS_FIELD))


def content_id(prefix: str, text: str) -> str:
    return f"{prefix}-{hashlib.sha1(text.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(text: str | bytes) -> Any:
    """json.loads, but NaN and Infinity are refused: they could not be written back out."""
    return json.loads(text, parse_constant=_refuse_constant)


def invalid_line_record(stage: str, raw: str, lineno: int, reason: str) -> Record:
    # The id hashes the line number too: two identical bad lines stay two records.
    record = {
        "id": content_id("invalid-line", f"{lineno}:{raw}"),
        "raw": raw,
        ERRORS_FIELD: [make_error(stage, "invalid_json", f"input line {lineno}: {reason}")],
    }
    record[REJECTED] = True
    return record


def parse_json_line(text: str, stage: str, lineno: int) -> Record:
    """One JSON object, or an invalid-line error record (ids are not checked here)."""
    try:
        value = loads(text)
    except ValueError as exc:
        return invalid_line_record(stage, text, lineno, str(exc))
    if not isinstance(value, dict):
        return invalid_line_record(stage, text, lineno, "not a JSON object")
    return value


def ensure_id(record: Record, stage: str, lineno: int) -> Record:
    current = record.get("id")
    if isinstance(current, (str, int)) and not isinstance(current, bool) and str(current) != "":
        return record
    canonical = json.dumps(record, sort_keys=True, ensure_ascii=False)
    fixed = {"id": content_id("no-id", canonical), **{k: v for k, v in record.items() if k != "id"}}
    out = with_error(
        fixed,
        stage,
        "missing_id",
        f"input line {lineno}: record has no usable 'id' (got {current!r}); give every record "
        "a non-empty string id (vi probe assigns one per video)",
    )
    out[REJECTED] = True
    return out


def open_input(path: Path | None) -> IO[bytes]:
    if path is None or str(path) == "-":
        return sys.stdin.buffer
    return open(path, "rb")


def iter_records(source: IO[bytes], stage: str) -> Iterator[Record]:
    """Parse JSONL from a binary stream; blank lines are skipped, bad lines become error records."""
    position = [0]  # the line the reader last pulled, for messages about good lines too

    def numbered():
        for position[0], line in enumerate(source, start=1):
            yield line

    reader = jsonlines.Reader(numbered(), loads=loads)
    while True:
        try:
            record = reader.read(type=dict, skip_empty=True)
        except EOFError:
            return
        except jsonlines.InvalidLineError as exc:
            raw = exc.line if isinstance(exc.line, str) else exc.line.decode("utf-8", "backslashreplace")
            yield invalid_line_record(stage, raw.rstrip("\r\n"), exc.lineno, str(exc).split(" (line")[0])
            continue
        yield ensure_id(record, stage, position[0])


def read_records(path: Path | None, stage: str) -> Iterator[Record]:
    source = open_input(path)
    try:
        yield from iter_records(source, stage)
    finally:
        if source is not sys.stdin.buffer:
            source.close()


def count_in_shard(records: Iterable[Record], shard) -> int:
    """How many of `records` a run with `shard` will see."""
    return sum(1 for record in records if shard is None or shard.contains(record["id"]))


def count_file(path: Path | None, shard) -> int | None:
    """How many records of FILE a run will see (for the progress bar's ETA); None for stdin."""
    if path is None or str(path) == "-":
        return None
    if shard is None:  # no need to parse: count the non-blank lines
        with open(path, "rb") as handle:
            return sum(1 for line in handle if line.strip())
    return count_in_shard(read_records(path, "count"), shard)


def dumps(record: Record) -> bytes:
    """One JSONL line as UTF-8. NaN/inf are refused (ValueError): they are not JSON.

    A string that cannot be encoded as UTF-8 (a lone surrogate from a `\\ud800` escape in the
    input) is written escaped instead, which is still valid JSON for the same value.
    """
    text = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(record, ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")
