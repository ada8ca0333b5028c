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


# What a file that is not JSONL starts with (offset, bytes, what it is, the advice). A video or an
# image given where records are expected would otherwise become hundreds of invalid_utf8 records.
_MEDIA = "vi probe takes media and makes the records the other stages read"
_PACKED = "an archive: unpack it, then give vi the JSONL file inside"
SIGNATURES = (
    (4, b"ftyp", "an MP4/MOV video", _MEDIA), (0, b"\x1a\x45\xdf\xa3", "a Matroska/WebM video", _MEDIA),
    (8, b"AVI ", "an AVI video", _MEDIA), (8, b"WAVE", "a WAV audio file", _MEDIA),
    (8, b"WEBP", "a WebP image", _MEDIA), (0, b"\xff\xd8\xff", "a JPEG image", _MEDIA),
    (0, b"\x89PNG\r\n\x1a\n", "a PNG image", _MEDIA), (0, b"GIF8", "a GIF image", _MEDIA),
    (0, b"ID3", "an MP3 audio file", _MEDIA), (0, b"fLaC", "a FLAC audio file", _MEDIA),
    (0, b"OggS", "an Ogg audio/video file", _MEDIA), (0, b"\x00\x00\x01\xba", "an MPEG video", _MEDIA),
    (0, b"PK\x03\x04", "a zip archive (or a file in a zip container: .npz, .pt)", _PACKED),
    (0, b"\x1f\x8b", "a gzip-compressed file", "compressed: give vi its text (zcat FILE | vi ...)"),
    (0, b"\xfd7zXZ\x00", "an xz-compressed file", "compressed: give vi its text (xzcat FILE | vi ...)"),
    (0, b"\x28\xb5\x2f\xfd", "a zstd-compressed file", "compressed: give vi its text (zstdcat FILE | vi ...)"),
    (0, b"BZh", "a bzip2-compressed file", "compressed: give vi its text (bzcat FILE | vi ...)"),
    (0, b"7z\xbc\xaf\x27\x1c", "a 7z archive", _PACKED), (257, b"ustar", "a tar archive", _PACKED),
    (0, b"%PDF", "a PDF document", "not records"), (0, b"PAR1", "a Parquet file", "not records: write it "
     "out as JSON lines (pandas: df.to_json(FILE, orient='records', lines=True))"),
    (0, b"\x93NUMPY", "a NumPy array file", "not records"), (0, b"\x7fELF", "a program", "not records"),
)
SNIFF_BYTES = 8192


class NotRecords(ValueError):
    """An input that is not JSONL records at all (a video, an archive): refused before any record,
    exit 2, saying what it is and what takes it."""


def _name(path: Path | None) -> str:
    return "stdin" if path is None or str(path) == "-" else f"--input {path}"


def refuse_binary(head: bytes, path: Path | None, stage: str) -> None:
    """Raise NotRecords when `head`, the input's first bytes, is a known binary format or holds a NUL
    byte (UTF-8 text never does); a text file in another encoding is left to the line reader,
    which says so line by line (invalid_utf8)."""
    for offset, magic, what, advice in SIGNATURES:
        if head[offset:offset + len(magic)] == magic:
            break
    else:
        if b"\x00" not in head:
            return
        what, advice = "a binary file", "not records"
    shown = "FILE" if path is None or str(path) == "-" else str(path)
    if advice == _MEDIA:
        advice += f": vi probe {shown} | vi {stage}"
    raise NotRecords(f"{_name(path)} is {what}, not JSONL records (one JSON object per line); {advice}")


def is_json_document(head: bytes) -> bool:
    """True when the input opens as a JSON document, not JSON lines: an array of objects (`[{` on one
    line, or `[` alone), or an object printed over several lines (a first line that is `{` alone, as
    `json.dump(indent=...)` and `jq .` write it). None of these can be a record line, so nothing that
    is JSONL is taken for one; a line such as `[1, 2]` stays a bad line of JSONL (invalid_json)."""
    first = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n").split(b"\n", 1)[0].rstrip(b" \t\r")
    return first in (b"{", b"[") or (first.startswith(b"[") and first[1:].lstrip(b" \t").startswith(b"{"))


def iter_document(source: IO[bytes], stage: str, path: Path | None = None) -> Iterator[Record]:
    """The records of a JSON document: each object it holds, each object of an array it holds (a
    stream of several documents, `jq .`'s output, too). An element that is not an object becomes an
    invalid_json error record, as a bad line does; a document that is not JSON is refused whole."""
    data = source.read().removeprefix(b"\xef\xbb\xbf")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotRecords(f"{_name(path)} is a JSON document that is not UTF-8 (byte {exc.start + 1}); convert "
                         "it (iconv -f latin1 -t utf-8 FILE)") from None
    decoder = json.JSONDecoder(parse_constant=_refuse_constant, strict=False)
    position, values = 0, []
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position >= len(text):
            break
        try:
            value, end = decoder.raw_decode(text, position)
        except ValueError as exc:
            raise NotRecords(f"{_name(path)} is a JSON document (it opens with {text[position]!r}, not one object "
                             f"per line) and is not valid JSON ({exc}); fix it, or give JSON lines "
                             "(jq -c '.[]' FILE for an array, jq -c . FILE for objects)") from None
        values.append((text.count("\n", 0, position) + 1, value))
        position = end
    for lineno, value in values:
        for item in value if isinstance(value, list) else [value]:
            raw = json.dumps(item, ensure_ascii=False)
            record = (item if isinstance(item, dict) else
                      invalid_line_record(stage, raw, lineno, f"{_JSON_TYPES.get(type(item), 'a JSON value')} "
                                          "in the JSON document, not a JSON object"))
            yield record if REJECTED in record else ensure_id(record, stage, lineno)


def open_records(path: Path | None, stage: str) -> tuple[IO[bytes], bool]:
    """The input opened, refused at once when it is not records (refuse_binary), and whether it is a
    JSON document rather than JSON lines (its first bytes peeked, nothing consumed)."""
    source = open_input(path)
    try:
        head = source.peek(SNIFF_BYTES)[:SNIFF_BYTES] if hasattr(source, "peek") else b""
        refuse_binary(head, path, stage)
    except BaseException:
        if source is not sys.stdin.buffer:
            source.close()
        raise
    return source, is_json_document(head)


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
    """The records of FILE (None or "-": stdin). The input is checked here, before a record is asked
    for: a video, an image or an archive is refused at once (NotRecords, exit 2); a JSON document (a
    pretty-printed object, an array) is read as the records it holds, since what it means is plain
    and refusing it would only send the user to `jq -c` for the same records."""
    source, document = open_records(path, stage)
    if not document:
        return _read(source, stage)
    try:  # read whole now (a document is one value): a broken one is refused before anything is written
        records = list(iter_document(source, stage, path))
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    from vi.core.progress import log

    log.info("%s is a JSON document, not JSON lines: read as the %d records it holds", _name(path), len(records))
    return iter(records)


def _read(source: IO[bytes], stage: str) -> Iterator[Record]:
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
    with open(path, "rb") as handle:
        document = is_json_document(handle.read(SNIFF_BYTES))
    if shard is None and not document:  # no need to parse: count the non-blank lines
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
