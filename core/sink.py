"""Writing records: stdout, or a file that survives being killed at any moment.

Exactly-once after a kill rests on two facts:
- every record is appended as one complete line with one `write` on an O_APPEND file
  descriptor, only after the record is finished (a write the disk cannot hold is cut back);
- one run at a time writes the file (an exclusive lock, `vi.core.locks`);
- on `--resume`, a last line without its newline (a write torn by the kill) is cut off,
  and the ids of the complete lines left are the records that are done.
So a record is either wholly in the file, exactly once, or not there and redone.
"""

from __future__ import annotations

import errno
import os
import sys
from collections import Counter
from pathlib import Path

from vi.core.locks import lock_fd
from vi.core.records import loads


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

    def __init__(self, path: Path, resume: bool, overwrite: bool, what: str = "--output"):
        self.path, self.what = path, what
        self.done_ids: Counter[str] = Counter()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # O_APPEND and no O_TRUNC: nothing changes in FILE before the lock is ours
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise _cannot_write(path, what, exc) from None
        try:
            lock_fd(self._fd, path, what)
            has_records = os.fstat(self._fd).st_size > 0
            if has_records and not (resume or overwrite):
                raise FileExistsError(f"{what} {path} already has records; pass --resume to "
                                      "continue it or --overwrite to replace it")
            if overwrite and not resume:
                os.ftruncate(self._fd, 0)
            elif has_records:
                self.done_ids = recover_counts(path)
        except BaseException:
            os.close(self._fd)
            raise

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


def recover(path: Path) -> set[str]:
    """Cut a torn tail off `path` and return the ids of its complete records."""
    return set(recover_counts(path))


def recover_counts(path: Path) -> Counter[str]:
    """Cut a torn tail off `path` and return the ids of its complete records, with how many
    times each is there (an input may repeat an id: resume then skips as many as are done).

    Only the tail can be torn (appends are sequential): a last line without its newline, or,
    after a node crash, a tail of NUL-filled or garbled lines. A line that is not JSON but has
    valid records after it cannot come from a kill: that is an error to report, not data to cut.
    """
    done: Counter[str] = Counter()
    good_end = position = 0
    bad_line = None
    with open(path, "rb") as handle:
        for lineno, line in enumerate(handle, start=1):
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
    if good_end < path.stat().st_size:
        with open(path, "r+b") as handle:
            handle.truncate(good_end)
    return done


def open_sink(output: Path | None, resume: bool, overwrite: bool,
              what: str = "--output") -> StdoutSink | FileSink:
    if output is None or str(output) == "-":
        if resume:
            raise ValueError("--resume needs --output FILE: there is nothing to resume on stdout")
        return StdoutSink()
    return FileSink(output, resume=resume, overwrite=overwrite, what=what)
