"""Where a run stands, read from its output files: records done, failed (by error kind), left.

Read only: nothing is locked, cut or written, so it is safe while an array job still writes the
files. A last line without its newline is a record being written (or torn by a kill), counted as
`partial`, not as done: --resume would redo it. Knows no stage: it reads the record contract
(`id`, `errors`) only.
"""

from __future__ import annotations

import glob
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from vi.core.records import read_records
from vi.core.sharding import shard_of


@dataclass
class FileStatus:
    path: str
    done: int = 0  # complete lines whose record has no errors
    failed: Counter[str] = field(default_factory=Counter)  # by the kind of the record's last error
    partial: int = 0  # a last line without its newline: being written now
    bad_lines: int = 0  # complete lines that are not a JSON object (not from vi)
    shard: int | None = None  # the shard its ids fall in, when the run was sharded and it is one shard
    left: int | None = None  # records of --input in this shard not in any output
    ids: Counter[str] = field(default_factory=Counter, repr=False)

    def row(self) -> dict:
        out = {"output": self.path, "shard": self.shard, "done": self.done, "failed": sum(self.failed.values()),
               "failed_by_kind": dict(self.failed.most_common()), "left": self.left, "partial": self.partial}
        if self.bad_lines:
            out["bad_lines"] = self.bad_lines
        return out


def expand(patterns: list[str]) -> list[Path]:
    """The files named, each glob expanded (quoted, so the shell did not: `vi status 'out/*.jsonl'`), in
    order, each once; a pattern that matches nothing is a ValueError naming it."""
    paths: list[Path] = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not found:
            raise ValueError(f"{pattern} matches no file: check the pattern (the shards may not have started)")
        for name in found:
            path = Path(name)
            if path.is_dir():
                raise ValueError(f"{path} is a folder: give the output files (e.g. '{path}/*.jsonl')")
            if not path.exists():
                raise ValueError(f"{path}: no such file")
            if path not in paths:
                paths.append(path)
    return paths


def read_output(path: Path) -> FileStatus:
    status = FileStatus(str(path))
    with open(path, "rb") as handle:
        for line in handle:
            if not line.endswith(b"\n"):
                status.partial += 1
                continue
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict) or "id" not in record:
                status.bad_lines += 1
                continue
            status.ids[str(record["id"])] += 1
            errors = record.get("errors")
            if errors and isinstance(errors, list) and isinstance(errors[-1], dict):
                status.failed[str(errors[-1].get("kind"))] += 1
            elif errors:
                status.failed["unknown"] += 1
            else:
                status.done += 1
    return status


def status(outputs: list[Path], input_path: Path | None = None, shards: int | None = None) -> dict:
    """Each output's counts and the total; with `input_path`, what is left, per shard when the outputs
    are the `shards` shards of a sharded run (by default their number, when more than one)."""
    files = [read_output(path) for path in outputs]
    count = shards if shards is not None else (len(files) if len(files) > 1 else None)
    if count:
        for item in files:
            owners = {shard_of(i, count) for i in item.ids}
            item.shard = owners.pop() if len(owners) == 1 else None
    total = {"outputs": len(files), "done": sum(f.done for f in files),
             "failed": sum(sum(f.failed.values()) for f in files),
             "failed_by_kind": dict(sum((f.failed for f in files), Counter()).most_common()),
             "partial": sum(f.partial for f in files), "left": None, "input": None}
    if input_path is not None:
        wanted = Counter(str(r["id"]) for r in read_records(input_path, "status"))
        have = sum((f.ids for f in files), Counter())
        missing = wanted - have
        total["input"], total["left"] = sum(wanted.values()), sum(missing.values())
        total["not_in_input"] = sum((have - wanted).values())
        if count:
            by_shard = Counter()
            for key, n in missing.items():
                by_shard[shard_of(key, count)] += n
            for item in files:
                item.left = by_shard.get(item.shard, 0) if item.shard is not None else None
            seen = {f.shard for f in files}
            total["not_started"] = {f"{s}/{count}": n for s, n in sorted(by_shard.items()) if s not in seen}
    return {"files": [f.row() for f in files], "total": total}
