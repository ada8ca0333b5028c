"""The files of `vi export showhowto`: the official strip layout, webdataset shards, the skipped list.

Every file is written under a hidden temporary name, synced and renamed, so a final name always
holds a whole file; a sequence counts as done once its last file (the sidecar json, or the tar
holding it) has its final name. `vi.pipelines.showhowto.export` decides what goes in them
(a `Sequence`, or a `Skip` saying why not; both are defined here, so the dependency runs one way).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vi.core.progress import log
from vi.core.sharding import Shard
from vi.core.sink import recover

KEY_MAX_CHARS = 100  # a file name stays far below the 255-byte limit of most filesystems


@dataclass(frozen=True)
class Sequence:
    """The aligned steps of one record: what goes into one strip."""

    id: str
    prompts: list[str]
    times: list[float]
    paths: list[str | None]  # a saved JPEG of the frame, or None: decode it from `video`
    video: str | None
    title: str | None

    def sidecar(self) -> dict[str, Any]:
        return {"id": self.id, "prompts": self.prompts, "times": self.times, "video": self.video,
                "title": self.title}


@dataclass(frozen=True)
class Skip:
    reason: str  # export's TOO_FEW_STEPS, UPSTREAM_ERROR, MALFORMED, or a RecordError kind
    detail: str


def safe_key(record_id: str) -> str:
    """The id as a file name and webdataset key: letters, digits, `_` and `-` only.

    webdataset splits a member name at its first dot, and ShowHowTo's loader strips every
    `.jpg` from a name, so other ids get their other characters replaced and a hash of the
    id appended (the sidecar keeps the real id).
    """
    if re.fullmatch(rf"[A-Za-z0-9_-]{{1,{KEY_MAX_CHARS}}}", record_id):
        return record_id
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", record_id)[:KEY_MAX_CHARS]
    return f"{cleaned}-{hashlib.sha1(record_id.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def _json_bytes(value: Any) -> bytes:
    """UTF-8 JSON; escaped ASCII when a string holds a lone surrogate (still the same value)."""
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value).encode("ascii")


def write_atomic(path: Path, data: bytes) -> None:
    """`data` under `path`, or nothing there: a hidden temporary file, synced, then renamed."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def shard_suffix(shard: Shard | None) -> str:
    return "" if shard is None else f"-{shard.index}-of-{shard.count}"


class ImgseqWriter:
    """`ROOT/imgseqs[-I-of-N]/KEY.jpg` plus the sidecar `KEY.json`, the official layout."""

    def __init__(self, root: Path, shard: Shard | None):
        self.folder = root / f"imgseqs{shard_suffix(shard)}"

    def has_data(self) -> bool:
        return self.folder.is_dir() and any(self.folder.iterdir())

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def prepare_resume(self) -> None:
        """Delete temporary files and strips without a sidecar: a kill interrupted them."""
        if not self.folder.is_dir():
            return
        for entry in self.folder.iterdir():
            orphan = entry.suffix == ".jpg" and not entry.with_suffix(".json").exists()
            if entry.name.endswith(".tmp") or orphan:
                entry.unlink()

    def is_done(self, record_id: str) -> bool:
        return (self.folder / f"{safe_key(record_id)}.json").exists()

    def write(self, sequence: Sequence, jpeg: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        key = safe_key(sequence.id)
        write_atomic(self.folder / f"{key}.jpg", jpeg)
        write_atomic(self.folder / f"{key}.json", _json_bytes(sequence.sidecar()))  # last: marks done

    def close(self) -> None:
        pass


class TarShardWriter:
    """webdataset shards `ROOT/showhowto[-I-of-N]-K.tar` of at most `maxcount` sequences.

    A shard is written as `.tar.tmp` and renamed when closed, so a final name always holds
    a whole tar. A resumed run deletes the `.tar.tmp` a kill left (its sequences are
    redone) and starts new shards after the highest index there.
    """

    def __init__(self, root: Path, shard: Shard | None, maxcount: int):
        self.root, self.maxcount = root, maxcount
        self.prefix = f"showhowto{shard_suffix(shard)}"
        self._pattern = re.compile(rf"{re.escape(self.prefix)}-(\d{{6}})\.tar(\.tmp)?")
        self._done: set[str] = set()
        self._next = 0
        self._file: io.BufferedWriter | None = None
        self._tar: tarfile.TarFile | None = None
        self._count = 0

    def _own_files(self) -> list[tuple[Path, re.Match]]:
        if not self.root.is_dir():
            return []
        return [(p, m) for p in sorted(self.root.iterdir()) if (m := self._pattern.fullmatch(p.name))]

    def has_data(self) -> bool:
        return bool(self._own_files())

    def clear(self) -> None:
        for path, _ in self._own_files():
            path.unlink()

    def prepare_resume(self) -> None:
        for path, match in self._own_files():
            if match.group(2):
                path.unlink()
                continue
            self._next = max(self._next, int(match.group(1)) + 1)
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.name.endswith(".json"):
                        self._done.add(str(json.load(tar.extractfile(member))["id"]))

    def is_done(self, record_id: str) -> bool:
        return record_id in self._done

    def _path(self, index: int) -> Path:
        return self.root / f"{self.prefix}-{index:06d}.tar"

    def write(self, sequence: Sequence, jpeg: bytes) -> None:
        if self._tar is None:
            self.root.mkdir(parents=True, exist_ok=True)
            # Open across calls, until `maxcount` sequences are in: closed by close().
            self._file = open(f"{self._path(self._next)}.tmp", "wb")  # noqa: SIM115
            self._tar = tarfile.open(fileobj=self._file, mode="w")  # noqa: SIM115
        key = safe_key(sequence.id)
        for name, data in ((f"{key}.jpg", jpeg), (f"{key}.json", _json_bytes(sequence.sidecar()))):
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = len(data), 0o644, 0  # reproducible bytes
            self._tar.addfile(member, io.BytesIO(data))
        self._done.add(sequence.id)
        self._count += 1
        if self._count >= self.maxcount:
            self.close()

    def close(self) -> None:
        """Finish the open shard under its final name (only after a run that did not crash)."""
        if self._tar is None or self._file is None:
            return
        self._tar.close()  # writes the end-of-archive blocks; the file stays open
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._file.name, self._path(self._next))
        self._file, self._tar, self._count, self._next = None, None, 0, self._next + 1


class SkippedLog:
    """`ROOT/skipped[-I-of-N].jsonl`: one `{"id", "reason", "detail"}` per record not exported.

    Appended across resumed runs; its ids count as done on resume (as failed records do in
    every vi stage), so no id is listed twice. Delete a line to retry that record.
    """

    def __init__(self, root: Path, shard: Shard | None):
        self.path = root / f"skipped{shard_suffix(shard)}.jsonl"
        self.ids: set[str] = set()

    def has_data(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def prepare_resume(self) -> None:
        if self.path.exists():
            self.ids = recover(self.path)  # cuts a line torn by a kill

    def add(self, record_id: str, skip: Skip) -> None:
        if record_id in self.ids:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = _json_bytes({"id": record_id, "reason": skip.reason, "detail": skip.detail}) + b"\n"
        with open(self.path, "ab") as handle:  # one write of one whole line, as vi's sinks do
            handle.write(line)
        self.ids.add(record_id)


def rebuild_prompts_index(root: Path) -> int:
    """Write `ROOT/prompts.json` from every sidecar under `ROOT/imgseqs*/`; return its size.

    Held under an exclusive lock and scanned inside it, so when shards of an array job
    finish one after another, the last rebuild sees every sidecar: no merge step needed.
    """
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".prompts.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        index: dict[str, list[str]] = {}
        where: dict[str, Path] = {}
        for folder in sorted(p for p in root.glob("imgseqs*") if p.is_dir()):
            for sidecar in sorted(folder.glob("*.json")):
                key = sidecar.stem
                if not sidecar.with_suffix(".jpg").exists():
                    continue
                if key in index:
                    log.warning("sequence %s is in both %s and %s: ShowHowTo's loader would read it "
                                "twice; delete one of the folders", key, where[key], folder)
                    continue
                try:
                    index[key] = json.loads(sidecar.read_bytes())["prompts"]
                except (ValueError, KeyError) as exc:
                    log.warning("%s: not a sidecar (%s); left out of prompts.json", sidecar, exc)
                    continue
                where[key] = folder
        write_atomic(root / "prompts.json", _json_bytes(index))
    return len(index)
