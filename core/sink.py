"""Writing records: stdout, or a file that survives being killed at any moment.

Exactly-once after a kill rests on two facts:
- every record is appended as one complete line with one `write` on an O_APPEND file
  descriptor, only after the record is finished;
- on `--resume`, a last line without its newline (a write torn by the kill) is cut off,
  and the ids of the complete lines left are the records that are done.
So a record is either wholly in the file, exactly once, or not there and redone.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

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


class FileSink:
    def __init__(self, path: Path, resume: bool, overwrite: bool):
        self.path = path
        self.done_ids: set[str] = set()
        exists = path.exists() and path.stat().st_size > 0
        if exists and not (resume or overwrite):
            raise FileExistsError(
                f"{path} already has records; pass --resume to continue it "
                "or --overwrite to replace it"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        if resume and exists:
            self.done_ids = recover(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if not resume else 0)
        self._fd = os.open(path, flags, 0o644)

    def write(self, line: bytes) -> None:
        data = memoryview(line)
        while data:  # os.write may write less than asked (signals, pipes); finish the line
            written = os.write(self._fd, data)
            data = data[written:]

    def close(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:  # /dev/null, pipes and some FUSE mounts cannot fsync
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EROFS):
                raise
        os.close(self._fd)


def recover(path: Path) -> set[str]:
    """Cut a torn tail off `path` and return the ids of its complete records.

    Only the tail can be torn (appends are sequential): a last line without its newline, or,
    after a node crash, a tail of NUL-filled or garbled lines. A line that is not JSON but has
    valid records after it cannot come from a kill: that is an error to report, not data to cut.
    """
    done: set[str] = set()
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
                done.add(str(record["id"]))
    if good_end < path.stat().st_size:
        with open(path, "r+b") as handle:
            handle.truncate(good_end)
    return done


def open_sink(output: Path | None, resume: bool, overwrite: bool) -> StdoutSink | FileSink:
    if output is None or str(output) == "-":
        if resume:
            raise ValueError("--resume needs --output FILE: there is nothing to resume on stdout")
        return StdoutSink()
    return FileSink(output, resume=resume, overwrite=overwrite)
