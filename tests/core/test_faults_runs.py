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


# --- a server outage, then --retry-errors; a changed configuration on --resume -------------------

def filter_run(stub, out, *extra, stdin):
    from test_llm_backends import FAST

    return run_vi("filter-instructional", "-q", "--ask", "paper", "--llm", f"openai:stub@{stub.url}",
                  "-o", str(out), *extra, stdin=stdin, env={**FAST, "VI_LLM_RETRIES": "1"}, timeout=120)


def test_a_server_outage_then_retry_errors_completes_every_record_exactly_once(tmp_path):
    from test_llm_backends import StubLLM, records

    out, ids = tmp_path / "out.jsonl", Counter(f"v{i}" for i in range(6))
    with StubLLM() as stub:
        assert filter_run(stub, out, stdin=records(2)).returncode == 0  # the first records, server up
        stub.fail_first = 10**6  # the server goes down: every request a 500
        down = filter_run(stub, out, "--resume", stdin=records(6))
        assert down.returncode == 3, down.stderr
        failed = [r["id"] for r in map(json.loads, out.read_text().splitlines()) if r.get("errors")]
        assert sorted(failed) == ["v2", "v3", "v4", "v5"] and ids_in(out) == ids
        assert "--retry-errors" in json.loads(out.read_text().splitlines()[-1])["errors"][0]["message"]
        still = filter_run(stub, out, "--resume", stdin=records(6))  # plain --resume: they stay failed
        assert still.returncode == 0 and "6 already done" in still.stderr
        stub.fail_first = 0  # the server is back
        asked = len(stub.requests)
        again = filter_run(stub, out, "--resume", "--retry-errors", stdin=records(6))
        assert again.returncode == 0, again.stderr
        assert "4 failed record(s) (4 llm_unavailable) taken out" in again.stderr
        assert len(stub.requests) - asked == 4  # only the failed ones were asked again
    final = [json.loads(line) for line in out.read_text().splitlines()]
    assert ids_in(out) == ids and not any(r.get("errors") for r in final)
    assert all(r["instructional"]["reason"] == f"video {r['id'][1:]}" for r in final)
    assert not list(tmp_path.glob(".*vi-retry"))


def test_a_kill_during_retry_errors_then_resume_gives_exactly_once(tmp_path):
    from test_llm_backends import FAST, StubLLM, records

    out, count = tmp_path / "out.jsonl", 30
    with StubLLM(fail_first=10**6) as stub:
        assert filter_run(stub, out, stdin=records(count)).returncode == 3  # every record llm_unavailable
        stub.fail_first, stub.delay = 0, (lambda body: 0.1)
        args = [VI, "filter-instructional", "-q", "--ask", "paper", "--llm", f"openai:stub@{stub.url}", "-o",
                str(out), "--resume", "--retry-errors", "llm_unavailable"]
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env={**os.environ, **FAST})
        proc.stdin.write(records(count))
        proc.stdin.close()
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            if out.exists() and sum(1 for line in out.read_text().splitlines() if '"errors"' not in line) >= 3:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        redone = [json.loads(line) for line in out.read_bytes().split(b"\n")[:-1]]  # the torn tail aside
        assert 3 <= sum(not r.get("errors") for r in redone) < count  # killed mid-retry
        done = filter_run(stub, out, "--resume", stdin=records(count))  # plain --resume finishes it
    assert done.returncode == 0, done.stderr
    assert ids_in(out) == Counter(f"v{i}" for i in range(count))
    assert not any(json.loads(line).get("errors") for line in out.read_text().splitlines())


def test_resume_with_a_changed_prompt_is_refused_unless_allow_mixed(tmp_path):
    from importlib import resources

    from test_llm_backends import StubLLM, records

    prompt = tmp_path / "prompt.txt"
    prompt.write_text(resources.files("vi.pipelines.common").joinpath(
        "prompt_templates", "filter_instructional.txt").read_text())
    out = tmp_path / "out.jsonl"
    with StubLLM() as stub:
        assert filter_run(stub, out, "--prompt", str(prompt), stdin=records(2)).returncode == 0
        before = out.read_bytes()
        made = json.loads(before.splitlines()[0])["provenance"]["filter-instructional"]
        assert made["llm"] == "openai:stub" and made["prompt"].startswith("sha256:") and "concurrency" not in made
        prompt.write_text(prompt.read_text() + "\nAnswer carefully.\n")  # the prompt is edited
        refused = filter_run(stub, out, "--prompt", str(prompt), "--resume", stdin=records(4))
        assert refused.returncode == 2 and out.read_bytes() == before
        assert "another configuration" in refused.stderr and "prompt: \"sha256:" in refused.stderr
        assert "--allow-mixed" in refused.stderr
        mixed = filter_run(stub, out, "--prompt", str(prompt), "--resume", "--allow-mixed", stdin=records(4))
        assert mixed.returncode == 0, mixed.stderr
        # the same configuration resumes as before, whichever server address it runs on
        same = filter_run(stub, tmp_path / "other.jsonl", "--prompt", str(prompt), stdin=records(1))
        assert same.returncode == 0
    with StubLLM() as moved:
        again = filter_run(moved, tmp_path / "other.jsonl", "--prompt", str(prompt), "--concurrency", "2",
                           "--resume", stdin=records(3))
    assert again.returncode == 0, again.stderr
    assert ids_in(out) == Counter(f"v{i}" for i in range(4))
