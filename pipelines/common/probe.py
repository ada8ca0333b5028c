"""`vi probe`: video paths in, one metadata record per video out.

ids default to the file stem. Stems that collide (two `intro.mp4` in different folders),
or that equal an id given explicitly, get a suffix hashed from the path, so ids do not
depend on input order or on which shard runs them. A file named twice is probed once.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from vi.core import media
from vi.core.errors import RecordError
from vi.core.records import Record, ensure_id, parse_json_line

STAGE = "probe"
MEDIA_EXTENSIONS = media.VIDEO_EXTENSIONS + media.AUDIO_EXTENSIONS


def expand_path(path: str) -> list[str]:
    """A file stays itself; a directory becomes its media files, recursively, sorted."""
    p = Path(path)
    if p.is_dir():
        return sorted(str(f) for f in p.rglob("*")
                      if f.is_file() and f.suffix.lower() in MEDIA_EXTENSIONS)
    return [path]


def parse_line(line: str, lineno: int) -> list[Record]:
    """A line of a list or of stdin: a JSON record (with `video`) or a plain path."""
    text = line.strip()
    if not text or text.startswith("#"):
        return []
    if text.startswith("{"):
        return [parse_json_line(text, STAGE, lineno)]
    return [{"video": p} for p in expand_path(text)]


def gather(paths: Iterable[str], lines: Iterable[str] = ()) -> list[Record]:
    """Records from path arguments (files or directories) and from list/stdin lines."""
    records = [{"video": p} for path in paths for p in expand_path(path)]
    for lineno, line in enumerate(lines, start=1):
        records.extend(parse_line(line, lineno))
    unique: list[Record] = []
    seen: set[str] = set()
    for record in records:
        if isinstance(record.get("video"), str):
            record["video"] = os.path.abspath(record["video"])
            if "id" not in record:  # the same file named twice (a path and its folder): once
                if record["video"] in seen:
                    continue
                seen.add(record["video"])
        unique.append(record)
    return unique


def _path_suffix(path: str) -> str:
    return hashlib.sha1(os.path.normpath(path).encode("utf-8", "surrogateescape")).hexdigest()[:8]


def assign_ids(records: list[Record]) -> tuple[list[Record], dict[str, list[str]]]:
    """Give every record without an id one from its file stem; return the collisions."""
    taken = {str(r["id"]) for r in records if r.get("id") not in (None, "")}
    by_stem: dict[str, list[int]] = defaultdict(list)
    for i, record in enumerate(records):
        if record.get("id") in (None, "") and isinstance(record.get("video"), str):
            by_stem[Path(record["video"]).stem].append(i)
    collisions: dict[str, list[str]] = {}
    for stem, members in by_stem.items():
        paths = {records[i]["video"] for i in members}
        unique = len(paths) == 1 and stem not in taken
        for i in members:
            new_id = stem if unique else f"{stem}-{_path_suffix(records[i]['video'])}"
            records[i] = {"id": new_id, **{k: v for k, v in records[i].items() if k != "id"}}
        if not unique:
            collisions[stem] = sorted(paths)
    return [ensure_id(r, STAGE, i + 1) for i, r in enumerate(records)], collisions


def probe_record(record: Record) -> dict:
    video = record.get("video")
    if not isinstance(video, str) or not video:
        raise RecordError("missing_field", "record has no 'video' path; give vi probe a path, "
                          "a directory, or records with a 'video' field")
    return media.probe(video).as_fields()
