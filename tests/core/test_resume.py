"""SIGKILL a real stage mid-run, resume, and get every record exactly once."""

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import VI, run_vi


def make_videos(tea, folder, count):
    folder.mkdir()
    for i in range(count):
        os.symlink(tea, folder / f"v{i:03d}.mp4")
    return folder


def lines_of(path):
    return path.read_bytes().split(b"\n") if path.exists() else []


@pytest.mark.parametrize("kill_after", [3, 40])
def test_sigkill_then_resume_gives_exactly_once(tea, tmp_path, kill_after):
    videos = make_videos(tea, tmp_path / "videos", 120)
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen([VI, "probe", str(videos), "-q", "-o", str(out)],
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while len(lines_of(out)) <= kill_after and time.time() < deadline and proc.poll() is None:
        time.sleep(0.005)
    assert proc.poll() is None, "the run finished before it could be killed; use more videos"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = [line for line in lines_of(out) if line]
    assert kill_after <= len(before) < 120
    done = run_vi("probe", str(videos), "-q", "-o", str(out), "--resume")
    assert done.returncode == 0, done.stderr
    text = out.read_bytes()
    assert text.endswith(b"\n")
    ids = [json.loads(line)["id"] for line in text.splitlines()]
    assert sorted(ids) == sorted(f"v{i:03d}" for i in range(120))  # no loss, no duplicate
    assert "already done (resume)" in done.stderr


def test_resume_after_a_torn_write(tea, tmp_path):
    videos = make_videos(tea, tmp_path / "videos", 5)
    out = tmp_path / "out.jsonl"
    run_vi("probe", str(videos), "-q", "-o", str(out), check=True)
    complete = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(complete[:2]) + complete[2][:17])  # a kill inside line 3
    run_vi("probe", str(videos), "-q", "-o", str(out), "--resume", check=True)
    assert sorted(out.read_bytes().splitlines()) == sorted(line.rstrip(b"\n") for line in complete)


def test_an_existing_output_needs_resume_or_overwrite(tea, tmp_path):
    out = tmp_path / "out.jsonl"
    run_vi("probe", str(tea), "-q", "-o", str(out), check=True)
    done = run_vi("probe", str(tea), "-q", "-o", str(out))
    assert done.returncode == 2 and "--resume" in done.stderr and "--overwrite" in done.stderr
    assert run_vi("probe", str(tea), "-q", "-o", str(out), "--overwrite").returncode == 0
    assert len(out.read_text().splitlines()) == 1
