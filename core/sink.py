"""Writing records: stdout, or a file that survives being killed at any moment.

Exactly-once after a kill rests on two facts:
- every record is appended as one complete line with one `write` on an O_APPEND file
  descriptor, only after the record is finished (a write the disk cannot hold is cut back);
- one run at a time writes the file (an exclusive lock, `vi.core.locks`);
- on `--resume`, a last line without its newline (a write torn by the kill) is cut off,
  and the ids of the complete lines left are the records that are done.
So a record is either wholly in the file, exactly once, or not there and redone.

`--retry-errors` (FileSink.retry) keeps that: the failed lines to retry are taken out of FILE by
writing the lines that stay to a new file beside it and renaming it over FILE (atomic on POSIX),
then the run appends their new lines as any resume does. A kill before the rename leaves FILE as
it was; one after leaves FILE without those records, which the next --resume redoes. FILE stays
plain JSONL with one line per record, so no reader (vi eval, vi export, vi view, jq, `cat`) needs
to know a retry happened; an append-only log read last-wins would have asked that of every one.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from vi.core.locks import lock_fd
from vi.core.records import ERRORS_FIELD, loads


_real_stdout = None


def claim_stdout():
    """Reserve the process's stdout for records; everything else printed there goes to stderr.

    Libraries print to stdout (whisperx's logger, C++ engines writing to fd 1), which would
    corrupt a record stream, or clutter a terminal when records go to a file. So the real
    stdout is kept on a private duplicate descriptor, and fd 1 itself is pointed at stderr
    for the rest of the process. Idempotent.
    """
    global _real_stdout
    if _real_stdout is None:
        sys.stdout.flush()
        _real_stdout = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
    return _real_stdout


class DownstreamClosed(Exception):
    """The reader of our stdout went away (`| head`): stop quietly, it is not a failure."""


class StdoutSink:
    """JSONL to stdout, flushed per record so a downstream stage starts at once."""

    def __init__(self) -> None:
        self._out = claim_stdout()

    def write(self, line: bytes) -> None:
        try:
            self._out.write(line)
            self._out.flush()
        except BrokenPipeError:
            # Point our stdout at /dev/null so the interpreter's final flush stays quiet.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._out.fileno())
            raise DownstreamClosed() from None

    def close(self) -> None:
        try:
            self._out.flush()
        except BrokenPipeError:  # a downstream `head` closed the pipe: not our failure
            pass


def _cannot_write(path: Path, what: str, exc: OSError) -> OSError:
    """The OSError of opening `path` for writing, with a message that says what to do."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, IsADirectoryError) or path.is_dir():
        hint = f"{what} names a folder; give a file path such as {path / 'out.jsonl'}"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = f"the folder {path.parent} is not writable; choose a {what} in a writable folder"
    elif exc.errno == errno.ENOSPC:
        hint = f"free space on the disk of {path.parent}, then run again"
    else:
        hint = f"check the {what} path"
    return OSError(exc.errno, f"cannot write {what} {path} ({reason}): {hint}")


class FileSink:
    """Appends whole lines to FILE, holding an exclusive lock on it from open to close."""

    def __init__(self, path: Path, resume: bool, overwrite: bool, what: str = "--output",
                 stage: str | None = None):
        self.path, self.what = path, what
        self.recovered = Recovered()
        self._fd = self._open_locked()
        try:
            has_records = os.fstat(self._fd).st_size > 0
            if has_records and not (resume or overwrite):
                raise FileExistsError(f"{what} {path} already has records; pass --resume to "
                                      "continue it or --overwrite to replace it")
            if overwrite and not resume:
                os.ftruncate(self._fd, 0)
            elif has_records:
                self.recovered = recover_output(path, stage)
        except BaseException:
            os.close(self._fd)
            raise

    @property
    def done_ids(self) -> Counter[str]:
        return self.recovered.done

    def _open_locked(self) -> int:
        """FILE opened for appending and locked; if FILE was replaced between the open and the lock
        (another run's --retry-errors renamed a new one over it), the new file is opened instead:
        a lock on the old one would guard nothing."""
        while True:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # O_APPEND and no O_TRUNC: nothing changes in FILE before the lock is ours
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as exc:
                raise _cannot_write(self.path, self.what, exc) from None
            try:
                lock_fd(fd, self.path, self.what)
                if os.path.samestat(os.fstat(fd), os.stat(self.path)):
                    return fd
            except FileNotFoundError:
                pass
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    def retry(self, kinds: frozenset[str] | None) -> Counter[str]:
        """Take the records this stage failed with one of `kinds` (None: any) out of FILE, so that
        this run does them again; return how many of each kind were taken out.

        The lines that stay are written to a new file beside FILE, synced, and renamed over it;
        this run then holds the lock on the new file. See the module's docstring for why a kill at
        any point still leaves every record exactly once."""
        drop = [line for line in self.recovered.failed if kinds is None or line.kinds & kinds]
        if not drop:
            return Counter()
        spans = sorted((line.start, line.end) for line in drop)
        temporary = self.path.with_name(f".{self.path.name}.vi-retry")
        with open(self.path, "rb") as source, open(temporary, "wb") as target:
            position = 0
            for start, end in spans + [(None, None)]:
                source.seek(position)
                remaining = (start if start is not None else self.recovered.size) - position
                while remaining > 0:
                    block = source.read(min(remaining, 1 << 20))
                    if not block:
                        break
                    target.write(block)
                    remaining -= len(block)
                position = end if end is not None else position
            target.flush()
            os.fsync(target.fileno())
        os.chmod(temporary, os.stat(self.path).st_mode & 0o7777)
        os.replace(temporary, self.path)
        _sync_folder(self.path.parent)
        old, self._fd = self._fd, self._open_locked()  # the old file's lock is held until the new one is ours
        os.close(old)
        taken: Counter[str] = Counter()
        for line in drop:
            self.recovered.done[line.id] -= 1
            taken.update(sorted(line.kinds if kinds is None else line.kinds & kinds)[:1])
        self.recovered.done = +self.recovered.done
        self.recovered.failed = [line for line in self.recovered.failed if line not in drop]
        return taken

    def write(self, line: bytes) -> None:
        """Append `line` whole, or not at all: a write the disk cannot hold is taken back."""
        data = memoryview(line)
        start = None
        try:
            while data:  # os.write may write less than asked (signals, a full disk); finish the line
                written = os.write(self._fd, data)
                if start is None:
                    start = os.lseek(self._fd, 0, os.SEEK_CUR) - written
                data = data[written:]
        except OSError as exc:
            if start is not None:
                os.ftruncate(self._fd, start)  # no torn line left behind
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise OSError(exc.errno, f"{self.what} {self.path}: no space left on its disk "
                              f"({exc.strerror}); the records before this one are complete. "
                              "Free space, then rerun with --resume") from None
            raise OSError(exc.errno, f"writing {self.what} {self.path} failed ({exc.strerror}); "
                          "the records before this one are complete: rerun with --resume") from None

    def close(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:  # /dev/null, pipes and some FUSE mounts cannot fsync
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EROFS):
                raise
        finally:
            os.close(self._fd)  # releases the lock


def _sync_folder(folder: Path) -> None:
    """fsync a folder, so a rename in it survives a crash of the machine (where the OS allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class FailedLine:
    """A complete line of --output whose record `stage` failed: where it is, and its error kinds."""

    id: str
    start: int
    end: int
    kinds: frozenset[str]


@dataclass
class Recovered:
    """What resuming FILE needs from it: the ids done (with how many times each is there), the
    fingerprints `stage` wrote (canonical JSON -> (lines, an id that has it)), the lines `stage`
    failed, and FILE's size once a torn tail is cut."""

    done: Counter[str] = field(default_factory=Counter)
    fingerprints: dict[str, tuple[int, str]] = field(default_factory=dict)
    unmarked: int = 0  # lines `stage` finished that carry no fingerprint (written before vi had them)
    failed: list[FailedLine] = field(default_factory=list)
    size: int = 0


def recover(path: Path) -> set[str]:
    """Cut a torn tail off `path` and return the ids of its complete records."""
    return set(recover_counts(path))


def recover_counts(path: Path) -> Counter[str]:
    """Cut a torn tail off `path` and return the ids of its complete records, with how many
    times each is there (an input may repeat an id: resume then skips as many as are done)."""
    return recover_output(path).done


def _note(found: Recovered, record: dict, stage: str, start: int, end: int) -> None:
    """Count `record`'s fingerprint by `stage`, and remember it when `stage` failed it."""
    from vi.core.provenance import FIELD

    mine = (record.get(FIELD) or {}).get(stage) if isinstance(record.get(FIELD), dict) else None
    errors = record.get(ERRORS_FIELD)
    kinds = frozenset(str(e.get("kind")) for e in errors if isinstance(e, dict) and e.get("stage") == stage) \
        if isinstance(errors, list) else frozenset()
    if mine is not None:
        key = json.dumps(mine, sort_keys=True, ensure_ascii=False)
        count, first = found.fingerprints.get(key, (0, str(record.get("id"))))
        found.fingerprints[key] = (count + 1, first)
    elif kinds or not errors:
        found.unmarked += 1
    if kinds and "id" in record:
        found.failed.append(FailedLine(str(record["id"]), start, end, kinds))


def recover_output(path: Path, stage: str | None = None) -> Recovered:
    """Cut a torn tail off `path` and return what resuming it needs (Recovered); with `stage`,
    also the fingerprints that stage wrote and the lines it failed.

    Only the tail can be torn (appends are sequential): a last line without its newline, or,
    after a node crash, a tail of NUL-filled or garbled lines. A line that is not JSON but has
    valid records after it cannot come from a kill: that is an error to report, not data to cut.
    """
    found = Recovered()
    done = found.done
    good_end = position = 0
    bad_line = None
    with open(path, "rb") as handle:
        for lineno, line in enumerate(handle, start=1):
            start = position
            position += len(line)
            try:
                record = loads(line) if line.endswith(b"\n") else None
            except ValueError:
                record = None
            if not isinstance(record, dict):
                bad_line = bad_line or lineno
                continue
            if bad_line is not None:
                raise ValueError(
                    f"{path} line {bad_line} is not a JSON record, and complete records follow "
                    "it, so it is not what a kill leaves behind; fix or remove it before --resume")
            good_end = position
            if "id" in record:
                done[str(record["id"])] += 1
            if stage is not None:
                _note(found, record, stage, start, position)
    if good_end < path.stat().st_size:
        with open(path, "r+b") as handle:
            handle.truncate(good_end)
    found.size = good_end
    return found


def open_sink(output: Path | None, resume: bool, overwrite: bool,
              what: str = "--output", stage: str | None = None) -> StdoutSink | FileSink:
    if output is None or str(output) == "-":
        if resume:
            raise ValueError("--resume needs --output FILE: there is nothing to resume on stdout")
        return StdoutSink()
    return FileSink(output, resume=resume, overwrite=overwrite, what=what, stage=stage)
