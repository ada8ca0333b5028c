"""Reading and writing records: JSONL, one dict per line, never an exception for a bad line.

A line that is not a JSON object becomes an error record that carries the raw line, so a
stage downstream still sees it and nothing is lost. A record without a usable `id` gets a
content-derived one (so sharding and resume still work) plus an error naming the problem.
Both are failures of the stage whose reader found them: the reader marks them with a
transient key that the driver strips (see `vi.core.stream`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

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


def invalid_line_record(stage: str, raw: str, lineno: int, reason: str,
                        kind: str = "invalid_json", raw_bytes: bytes | None = None) -> Record:
    # The id hashes the line number too: two identical bad lines stay two records.
    record = {"id": content_id("invalid-line", f"{lineno}:{raw}"), "raw": raw}
    if raw_bytes is not None:  # `raw` cannot hold them exactly: base64 can
        record["raw_base64"] = base64.b64encode(raw_bytes).decode("ascii")
    record[ERRORS_FIELD] = [make_error(stage, kind, f"input line {lineno}: {reason}")]
    record[REJECTED] = True
    return record


def undecodable_line_record(stage: str, line: bytes, lineno: int, exc: UnicodeDecodeError) -> Record:
    """A line that is not UTF-8: `raw` shows it with \\xNN escapes, `raw_base64` keeps its bytes."""
    return invalid_line_record(
        stage, line.decode("utf-8", "backslashreplace"), lineno,
        f"not UTF-8 (byte 0x{line[exc.start]:02x} at byte {exc.start + 1} of the line); its bytes "
        "are kept, base64-encoded, in 'raw_base64'. Convert the file to UTF-8 "
        "(e.g. iconv -f latin1 -t utf-8 FILE)", kind="invalid_utf8", raw_bytes=line)


_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "true/false", type(None): "null"}


def parse_json_line(text: str, stage: str, lineno: int) -> Record:
    """One JSON object, or an invalid-line error record (ids are not checked here).

    strict=False lets a raw control character (a CR, a tab) inside a string through: the
    record is still unambiguous, and `dumps` writes it back escaped.
    """
    try:
        value = json.loads(text, parse_constant=_refuse_constant, strict=False)
    except ValueError as exc:
        return invalid_line_record(stage, text, lineno, f"not JSON ({exc})")
    if not isinstance(value, dict):
        return invalid_line_record(
            stage, text, lineno, f"{_JSON_TYPES.get(type(value), 'a JSON value')}, not a JSON "
            'object; every line must be one object such as {"id": "v1", "video": "v1.mp4"}')
    return value


def decode_lines(source: IO[bytes]) -> Iterator[tuple[int, str | UnicodeDecodeError, bytes]]:
    """(line number, its text or why it is not UTF-8, its bytes without the line end) per line.

    Lines end at b"\\n" only: U+2028, U+0085 or a lone CR inside a JSON string are text, not
    line ends (str.splitlines would cut a record there). Each line is decoded on its own, so
    one bad byte costs one line. A UTF-8 byte-order mark on line 1 is dropped.
    """
    for lineno, line in enumerate(source, start=1):  # binary streams split on b"\\n" only
        if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        line = line.rstrip(b"\r\n") if line.endswith(b"\n") else line
        try:
            yield lineno, line.decode("utf-8"), line
        except UnicodeDecodeError as exc:
            yield lineno, exc, line


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
    for lineno, text, line in decode_lines(source):
        if isinstance(text, UnicodeDecodeError):
            yield undecodable_line_record(stage, line, lineno, text)
            continue
        if not text.strip():
            continue
        record = parse_json_line(text, stage, lineno)
        yield record if REJECTED in record else ensure_id(record, stage, lineno)


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


# Line separators that JSON allows raw inside a string but that many line readers (Python's
# str.splitlines, JavaScript) treat as line ends: written escaped, so a record is one line to all.
_LINE_BREAKERS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}
_BREAKER_RE = re.compile("[\u2028\u2029\x85]")


def dumps(record: Record) -> bytes:
    """One JSONL line as UTF-8. NaN/inf are refused (ValueError): they are not JSON.

    A string that cannot be encoded as UTF-8 (a lone surrogate from a `\\ud800` escape in the
    input, or a file name that is not UTF-8) is written escaped instead, which is still valid
    JSON for the same value. U+2028, U+2029 and U+0085 are always escaped (see above).
    """
    text = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
    text = _BREAKER_RE.sub(lambda m: _LINE_BREAKERS[m.group()], text)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(record, ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")
