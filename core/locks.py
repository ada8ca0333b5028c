"""Exclusive locks on what a run writes, so that a second run on the same file stops at once.

Two runs appending to one `--output` (a requeued Slurm task while the first still runs, a
user starting it twice) would each write every record, and `--resume` would then believe
all of it done. So a run holds an exclusive `flock` on each file it writes for as long as it
writes it, and a second run is refused (exit 2) with the file's name and, where /proc/locks
tells, the process that holds it. The lock goes with the process: a killed run leaves none.

Shared file systems: Linux's NFS client (v3 with lockd, and v4) emulates flock with POSIX
byte-range locks that the server arbitrates, so runs on different nodes exclude each other.
Lustre does so only when mounted with `-o flock` (`localflock` excludes only runs on the same
node); without either, and on file systems without locks at all, flock fails with
ENOSYS/EOPNOTSUPP/ENOLCK: vi then warns once per file and runs unlocked.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from vi.core.progress import log

UNSUPPORTED = {errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL}
FOLDER_LOCK = ".vi-lock"


class Locked(OSError):
    """Another process is writing this file: exit 2, never a second writer."""


def holder(fd: int) -> str | None:
    """'pid 123 (vi transcribe ...)' for the process holding a flock on `fd`'s file, if the OS says."""
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[5] != key:
            continue
        pid = fields[4]
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            command = " ".join(os.path.basename(a.decode(errors="replace")) if i == 0 else
                               a.decode(errors="replace") for i, a in enumerate(argv) if a)
            return f"pid {pid} ({command[:200]})"
        except OSError:
            return f"pid {pid}"
    return None


def lock_fd(fd: int, path: Path, what: str) -> None:
    """Take an exclusive flock on open `fd` (the file at `path`), or raise Locked."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        who = holder(fd)
        raise Locked(errno.EWOULDBLOCK,
                     f"{what} {path} is being written by another run"
                     f"{f' ({who})' if who else ''}; two runs on one file would write records twice. "
                     "Wait for it to finish (or stop it), then rerun with --resume") from None
    except OSError as exc:
        if exc.errno not in UNSUPPORTED:
            raise
        log.warning("%s %s: this file system does not support locks (%s); nothing stops a second "
                    "run from writing it at the same time", what, path, exc.strerror)


def lock_folder(folder: Path, what: str, name: str = FOLDER_LOCK) -> int:
    """Hold an exclusive lock on FOLDER (through the file FOLDER/NAME) until the returned fd is
    closed or the process ends. Give each of several writers that may share a folder (shards)
    its own NAME."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o644)  # NFS: an exclusive lock needs write
    try:
        lock_fd(fd, folder, what)
    except BaseException:
        os.close(fd)
        raise
    return fd
