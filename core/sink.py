"""Writing records: stdout, or a file that survives being killed at any moment.

Exactly-once after a kill rests on two facts:
- every record is appended as one complete line with one `write` on an O_APPEND file
  descriptor, only after the record is finished;
- on `--resume`, a last line without its newline (a write torn by the kill) is cut off,
  and the ids of the complete lines left are the records that are done.
So a record is either wholly in the file, exactly once, or not there and redone.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from vi.core.records import Record, dumps


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


class StdoutSink:
    """JSONL to stdout, flushed per record so a downstream stage starts at once."""

    def __init__(self) -> None:
        self._out = claim_stdout()

    def write(self, record: Record) -> None:
        self._out.write(dumps(record).encode("utf-8", "surrogateescape"))
        self._out.flush()

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

    def write(self, record: Record) -> None:
        data = memoryview(dumps(record).encode("utf-8", "surrogateescape"))
        while data:  # os.write may write less than asked (signals, pipes); finish the line
            written = os.write(self._fd, data)
            data = data[written:]

    def close(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)


def recover(path: Path) -> set[str]:
    """Cut a torn last line off `path` and return the ids of its complete records.

    Only the last line can be torn (appends are sequential), and a torn line has no newline.
    A complete line that is not JSON cannot come from a torn write, so it is an error to
    report, not data to cut.
    """
    done: set[str] = set()
    good_end = 0
    with open(path, "rb") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.endswith(b"\n"):
                break  # torn by a kill mid-write: cut below
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(
                    f"{path} line {lineno} is not JSON, so it is not a vi output file "
                    "that a kill left behind; fix or remove it before --resume"
                ) from None
            good_end += len(line)
            if isinstance(record, dict) and "id" in record:
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
