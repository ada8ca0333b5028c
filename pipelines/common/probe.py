"""`vi probe`: video paths in, one metadata record per video out.

ids default to the file stem. Stems that collide (two `intro.mp4` in different folders),
or that equal an id given explicitly, get a suffix hashed from the path, so ids do not
depend on input order or on which shard runs them. A file named twice is probed once.
Files are probed `--concurrency` at a time (ffprobe processes, from the stage driver's threads);
the records still come out in input order.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vi.core import media
from vi.core.config import option
from vi.core.devices import usable_cpus
from vi.core.errors import RecordError
from vi.core.records import (Record, decode_lines, ensure_id, parse_json_line,
                             undecodable_line_record)

STAGE = "probe"
MEDIA_EXTENSIONS = media.VIDEO_EXTENSIONS + media.AUDIO_EXTENSIONS


@dataclass(frozen=True, kw_only=True)
class ProbeConfig:
    """The options of `vi probe` beyond the record contract."""

    # ffprobe spends a file's time starting and reading headers, one core each: one at a time
    # leaves the other cores idle, and 200 files take twice as long on 2 cores.
    concurrency: int | None = option(
        None, min=1, help="Files probed at once, each by its own ffprobe process (default: the cores this "
                          "process may use, e.g. a Slurm task's, at most 8). Output order stays the input order.")

    @property
    def workers(self) -> int:
        return self.concurrency or usable_cpus()


def expand_path(path: str) -> list[str]:
    """A file stays itself; a directory becomes its media files, recursively, sorted."""
    p = Path(path)
    if p.is_dir():
        return sorted(str(f) for f in p.rglob("*")
                      if f.is_file() and f.suffix.lower() in MEDIA_EXTENSIONS)
    return [path]


def read_lines(path: Path | None) -> list[str | bytes]:
    """The lines of FILE (None: stdin), each decoded on its own: text, or the line's bytes
    when it is not UTF-8 (a path in another encoding is still a path; a record is not)."""
    with (open(sys.stdin.fileno(), "rb", closefd=False) if path is None else open(path, "rb")) as handle:
        return [line if isinstance(text, UnicodeDecodeError) else text
                for _, text, line in decode_lines(handle)]


def parse_line(line: str | bytes, lineno: int) -> list[Record]:
    """A line of a list or of stdin: a JSON record (with `video`) or a plain path.

    A line that is not UTF-8 (bytes) is a file name in the file system's own bytes when it
    is a path, and an invalid_utf8 error record when it opens a JSON object.
    """
    if isinstance(line, bytes):
        if line.lstrip(b" \t\xef\xbb\xbf\xff\xfe").startswith(b"{"):  # a record after stray BOM bytes
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return [undecodable_line_record(STAGE, line, lineno, exc)]
        elif not os.path.lexists(line.strip()):  # no such file: not a path in another encoding, bad bytes
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return [undecodable_line_record(STAGE, line, lineno, exc)]
        line = os.fsdecode(line)
    text = line.strip()
    if not text or text.startswith("#"):
        return []
    if text.startswith("{"):
        return [parse_json_line(text, STAGE, lineno)]
    return [{"video": p} for p in expand_path(text)]


def _no_id(record: Record) -> bool:
    return record.get("id") is None or record.get("id") == ""


def _canonical(record: Record) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=True)


def gather(paths: Iterable[str], lines: Iterable[str | bytes] = ()) -> list[Record]:
    """Records from path arguments (files or directories) and from list/stdin lines.

    A file named twice (a path and its folder), or the same record without an `id` key twice,
    is probed once; records that differ, or that carry an id (even null or ""), are all kept.
    """
    records = [{"video": p} for path in paths for p in expand_path(path)]
    for lineno, line in enumerate(lines, start=1):
        records.extend(parse_line(line, lineno))
    unique: list[Record] = []
    seen: set[str] = set()
    for record in records:
        if isinstance(record.get("video"), str):
            record["video"] = os.path.abspath(record["video"])
            if "id" not in record:
                key = _canonical(record)
                if key in seen:
                    continue
                seen.add(key)
        unique.append(record)
    return unique


def _path_suffix(path: str) -> str:
    return hashlib.sha1(os.path.normpath(path).encode("utf-8", "surrogateescape")).hexdigest()[:8]


def assign_ids(records: list[Record]) -> tuple[list[Record], dict[str, list[str]]]:
    """Give every record without an id one from its file stem; return the collisions."""
    taken = {str(r["id"]) for r in records if not _no_id(r)}
    by_stem: dict[str, list[int]] = defaultdict(list)
    for i, record in enumerate(records):
        if _no_id(record) and isinstance(record.get("video"), str):
            # a file name that is not UTF-8: its bytes as \xNN in the id, which strict JSON readers take
            stem = Path(record["video"]).stem.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            by_stem[stem].append(i)
    collisions: dict[str, list[str]] = {}
    for stem, members in by_stem.items():
        paths = [records[i]["video"] for i in members]
        unique = len(members) == 1 and stem not in taken
        repeats: dict[str, int] = defaultdict(int)
        for i in members:
            # one file in several records: the suffix hashes the record too, and the k-th copy
            # of an identical record its k (identical records are interchangeable, so ids
            # still do not depend on input order)
            key = _canonical(records[i])
            repeats[key] += 1
            suffix = (_path_suffix(records[i]["video"]) if paths.count(records[i]["video"]) == 1
                      else _path_suffix(f"{records[i]['video']}\0{key}\0{repeats[key]}"))
            new_id = stem if unique else f"{stem}-{suffix}"
            records[i] = {"id": new_id, **{k: v for k, v in records[i].items() if k != "id"}}
        if not unique:
            collisions[stem] = sorted(set(paths))
    return [ensure_id(r, STAGE, i + 1) for i, r in enumerate(records)], collisions


def probe_record(record: Record) -> dict:
    video = record.get("video")
    if not isinstance(video, str) or not video:
        raise RecordError("missing_field", "record has no 'video' path; give vi probe a path, "
                          "a directory, or records with a 'video' field")
    return media.probe(video).as_fields()
