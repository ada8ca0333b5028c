"""`vi view`'s report folder: a static page over any stage's records, opened from disk.

    REPORT/index.html, view.js, view.css   the page (no server, no network, no CDN)
    REPORT/data/index.js                   one short entry per record: id, kind, ok, title, where it
                                           came from, the text the filter searches, its chunk
    REPORT/data/chunk-NNNNN.js             CHUNK records' blocks and raw JSON, loaded by the page only
                                           when it shows them, so 10,000 records open as fast as 20
    REPORT/thumbs/                         thumbnails, kept and reused by the next run

The data files are scripts (`viewIndex(...)`, `viewChunk(n, ...)`) rather than JSON because a
page opened from file:// may not fetch() its neighbours, but it may load scripts.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Iterator

from vi.core.records import REJECTED, invalid_line_record, loads, undecodable_line_record
from vi.evaluation.view.kinds import recognise, search_text, title_of, view_blocks
from vi.evaluation.view.thumbs import Thumbnails

STAGE = "view"
CHUNK = 250
RAW_LIMIT = 20_000  # characters of a record's JSON the page shows; the rest is in the file
ASSETS = ("index.html", "view.js", "view.css")


@dataclass
class Source:
    name: str             # as the user gave it
    path: Path | None     # None: stdin
    href: str | None = None


@dataclass
class ReportSummary:
    out: Path
    records: int = 0
    errors: int = 0
    kinds: Counter = field(default_factory=Counter)
    thumbs_made: int = 0
    thumbs_reused: int = 0
    thumbs_failed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def page(self) -> Path:
        return self.out / "index.html"


def read_lines(source: Source) -> Iterator[tuple[int, dict]]:
    """(line number, record) for each non-blank line; a bad line becomes an error record, as every
    stage's reader makes it, so the report lists it instead of stopping."""
    handle: IO[bytes] = sys.stdin.buffer if source.path is None else open(source.path, "rb")
    try:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                record = undecodable_line_record(STAGE, raw.rstrip(b"\r\n"), number, exc)
            else:
                try:
                    value = loads(line)
                except ValueError as exc:
                    value, reason = None, f"not JSON ({exc})"
                else:
                    reason = "not a JSON object"
                record = value if isinstance(value, dict) else \
                    invalid_line_record(STAGE, line.rstrip("\r\n"), number, reason)
            record.pop(REJECTED, None)
            yield number, record
    finally:
        if source.path is not None:
            handle.close()


def raw_json(record: dict, source: Source, line: int) -> str:
    shown = json.dumps(record, ensure_ascii=False, separators=(",", ":"))  # the page indents it
    if len(shown) > RAW_LIMIT:
        shown = shown[:RAW_LIMIT] + f"\n… {len(shown) - RAW_LIMIT} more characters: {source.name} line {line}"
    return shown


def write_report(sources: list[Source], out: Path, *, title: str, media_roots: list[Path] = (),
                 workers: int = 2, on_record=lambda: None) -> ReportSummary:
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    data.mkdir(exist_ok=True)
    thumbs = Thumbnails(out, roots=list(media_roots))
    summary = ReportSummary(out)
    index, chunk, chunk_number = [], [], 0
    for s, source in enumerate(sources):
        if source.path is not None:
            source.href = Path(os.path.relpath(source.path.resolve(), out.resolve())).as_posix()
        roots = [source.path.resolve().parent] if source.path is not None else []
        for line, record in read_lines(source):
            record_id = str(record.get("id") or f"{source.name}:{line}")
            kind = recognise(record)
            blocks = view_blocks(record, kind, thumbs, roots)
            ok = not record.get("errors")
            heading = title_of(record, kind)
            index.append([record_id, kind, ok, heading, s, line, search_text(record_id, heading, blocks), chunk_number])
            chunk.append({"blocks": blocks, "raw": raw_json(record, source, line)})
            summary.records += 1
            summary.errors += not ok
            summary.kinds[kind] += 1
            on_record()
            if len(chunk) == CHUNK:
                (data / f"chunk-{chunk_number:05d}.js").write_text(_call("viewChunk", chunk_number, chunk))
                chunk, chunk_number = [], chunk_number + 1
    if chunk:
        (data / f"chunk-{chunk_number:05d}.js").write_text(_call("viewChunk", chunk_number, chunk))
        chunk_number += 1
    for stale in data.glob("chunk-*.js"):  # a longer earlier run's chunks
        if int(stale.stem.split("-")[1]) >= chunk_number:
            stale.unlink()
    thumbs.make_missing(workers)
    meta = {"title": title, "chunk": CHUNK, "sources": [{"name": s.name, "href": s.href} for s in sources],
            "kinds": dict(summary.kinds), "made": time.strftime("%Y-%m-%d %H:%M:%S")}
    (data / "index.js").write_text(_call("viewIndex", {"meta": meta, "records": index}))
    package = resources.files("vi.evaluation.view") / "assets"
    for name in ASSETS:  # the page last: a report whose index.html is there is whole
        with resources.as_file(package / name) as asset:
            shutil.copyfile(asset, out / name)
    summary.thumbs_made, summary.thumbs_reused, summary.thumbs_failed = thumbs.made, thumbs.reused, thumbs.failed
    summary.seconds = time.perf_counter() - start
    return summary


def _call(function: str, *values) -> str:
    # `<` escaped (only strings can hold it): a record's "</script>" or "<!--" stays inert text.
    args = ",".join(json.dumps(v, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c") for v in values)
    return f"{function}({args});\n"
