"""The fault suite, part 2: runs that are signalled, doubled, refused a folder, or run out of disk.

Each ends with the output holding every input record exactly once, as whole lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

import pytest

from conftest import VI, ffmpeg, run_vi

COUNT = 40


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """COUNT links to one 1 s clip: probing them takes a few seconds, long enough to interrupt."""
    folder = tmp_path_factory.mktemp("runs")
    clip = folder / "clip.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=10", "-t", "1", str(clip))
    links = folder / "videos"
    links.mkdir()
    for i in range(COUNT):
        os.symlink(clip, links / f"v{i:03d}.mp4")
    return links


def ids_in(path) -> Counter:
    data = path.read_bytes() if path.exists() else b""
    assert data == b"" or data.endswith(b"\n"), "the output must hold whole lines only"
    return Counter(json.loads(line)["id"] for line in data.split(b"\n") if line)


def default_sigint() -> None:
    # A job started in the background by a non-interactive shell (`cmd &`, as a CI runner may
    # start the suite) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt
    # handler: the run would not see the test's Ctrl-C. A user's foreground run has it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(videos, out, *extra):
    return subprocess.Popen([VI, "probe", str(videos), "-q", "-o", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_sigint)


def ids_in_when_done(proc, path) -> Counter:
    proc.wait(timeout=60)
    return ids_in(path)


def wait_for_lines(path, proc, count=3):
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.01)
    pytest.fail("the run ended before it could be interrupted")


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130)])
def test_signal_mid_run_then_resume_gives_exactly_once(videos, tmp_path, sig, code):
    out = tmp_path / "out.jsonl"
    for attempt in range(3):  # on a loaded machine the run may finish before the signal lands
        out.unlink(missing_ok=True)
        proc = start(videos, out)
        wait_for_lines(out, proc)
        proc.send_signal(sig)
        if sum(ids_in_when_done(proc, out).values()) < COUNT:
            break
    err = proc.stderr.read()
    assert proc.returncode == code, err
    if sig == signal.SIGINT:
        assert b"--resume" in err
    assert 3 <= sum(ids_in(out).values()) < COUNT
    done = run_vi("probe", str(videos), "-q", "-o", str(out), "--resume")
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert ids_in(out) == Counter({f"v{i:03d}": 1 for i in range(COUNT)})


def test_a_second_writer_of_one_output_is_refused(videos, tmp_path):
    from vi.core.sink import FileSink

    out = tmp_path / "out.jsonl"
    # This process holds the output as a first run would, for as long as the test needs: a real
    # first run may finish before a second `vi` has even started on a loaded machine.
    first = FileSink(out, resume=False, overwrite=False)
    try:
        second = run_vi("probe", str(videos), "-q", "-o", str(out), "--resume")
    finally:
        first.close()
    assert second.returncode == 2 and second.stdout == ""
    assert str(out) in second.stderr and f"pid {os.getpid()}" in second.stderr
    assert "being written by another run" in second.stderr
    done = run_vi("probe", str(videos), "-q", "-o", str(out), "--resume")  # free once the first closes
    assert done.returncode == 0, done.stderr
    assert ids_in(out) == Counter({f"v{i:03d}": 1 for i in range(COUNT)})


def test_a_second_writer_of_rejects_is_refused(tmp_path):
    from vi.core.locks import Locked
    from vi.core.sink import FileSink

    rejects = tmp_path / "rejects.jsonl"
    holder = FileSink(rejects, resume=False, overwrite=False, what="--rejects")
    try:
        with pytest.raises(Locked, match="--rejects .*rejects.jsonl is being written"):
            FileSink(rejects, resume=True, overwrite=False, what="--rejects")
    finally:
        holder.close()
    FileSink(rejects, resume=True, overwrite=False).close()  # free again once closed


def test_a_second_export_into_one_folder_and_shard_is_refused(tmp_path):
    """vi export's folder: the lock of another process (here: another open file, which flock
    treats alike) on ROOT/.vi-lock refuses a second writer of that shard, not another shard."""
    from vi.core.locks import Locked, lock_folder
    from vi.core.sharding import Shard
    from vi.pipelines.showhowto.export import open_export

    root = tmp_path / "dataset"
    held = lock_folder(root, "--out", name=".vi-lock-0-of-2")  # shard 0 of 2, running elsewhere
    try:
        with pytest.raises(Locked, match="--out .*dataset is being written by another run"):
            open_export(root, "showhowto", Shard(0, 2), maxcount=10, resume=True, overwrite=False)
        writer, skipped = open_export(root, "showhowto", Shard(1, 2), maxcount=10, resume=False,
                                      overwrite=False)  # shard 1 has its own lock
        writer.close()
    finally:
        os.close(held)


@pytest.fixture
def small_disk(tmp_path):
    """A 4 KiB tmpfs (root only): room for about 25 probe records."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(mount)]).returncode:
        pytest.skip("this machine refuses tmpfs mounts (a container without CAP_SYS_ADMIN)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_keeps_whole_lines_and_resume_completes(videos, small_disk):
    out = small_disk / "out.jsonl"
    full = run_vi("probe", str(videos), "-q", "-o", str(out))
    assert full.returncode == 2 and full.stdout == ""
    assert "no space left" in full.stderr and str(out) in full.stderr and "--resume" in full.stderr
    assert "record 'v" in full.stderr  # names the record that did not fit
    kept = ids_in(out)
    assert 0 < sum(kept.values()) < COUNT and max(kept.values()) == 1
    subprocess.run(["mount", "-o", "remount,size=1m", str(small_disk)], check=True)
    done = run_vi("probe", str(videos), "-q", "-o", str(out), "--resume")
    assert done.returncode == 0, done.stderr
    assert ids_in(out) == Counter({f"v{i:03d}": 1 for i in range(COUNT)})


def test_output_in_a_read_only_folder_is_refused_before_any_work(videos, small_disk):
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    out = small_disk / "out.jsonl"
    done = run_vi("probe", str(videos), "-q", "-o", str(out))
    assert done.returncode == 2 and done.stdout == ""
    assert f"cannot write --output {out}" in done.stderr and "not writable" in done.stderr
