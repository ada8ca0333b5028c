"""`vi probe --concurrency N`: N ffprobe processes at once, the records still in input order, and
--resume and --shard as for any stage."""

import os
import shutil
import stat

from conftest import jsonl, run_vi


def links(tea, folder, count: int) -> list[str]:
    folder.mkdir()
    paths = [folder / f"clip{i:02d}.mp4" for i in range(count)]
    for path in paths:
        path.symlink_to(tea)
    return [str(p) for p in paths]


def test_files_are_probed_at_once_and_written_in_input_order(tea, tmp_path):
    # An ffprobe that waits (up to 20 s) until another ffprobe has started: one left alone says so
    # in a file. Probing one file at a time would leave the first alone.
    seen = tmp_path / "seen"
    seen.mkdir()
    fake = tmp_path / "bin" / "ffprobe"
    fake.parent.mkdir()
    fake.write_text(f"""#!/bin/sh
touch "{seen}/started.$$"
i=0
while [ "$(ls "{seen}" | grep -c started)" -lt 2 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
[ $i -ge 200 ] && touch "{seen}/alone.$$"
exec {shutil.which("ffprobe")} "$@"
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    paths = links(tea, tmp_path / "videos", 7)
    broken = tmp_path / "videos" / "clip03.mp4"
    broken.unlink()
    broken.write_bytes(b"not a video")  # an error record, in its place
    env = {"PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    done = run_vi("probe", *paths, "--concurrency", "3", env=env)
    assert done.returncode == 3, done.stderr  # one record failed
    records = jsonl(done.stdout)
    assert [r["id"] for r in records] == [f"clip{i:02d}" for i in range(7)]
    assert [bool(r.get("errors")) for r in records] == [i == 3 for i in range(7)]
    assert all(r["duration"] == records[0]["duration"] for r in records if not r.get("errors"))
    started = [p for p in os.listdir(seen) if p.startswith("started")]
    assert len(started) == 7
    assert not [p for p in os.listdir(seen) if p.startswith("alone")]


def test_resume_and_shards_keep_their_contract_with_concurrency(tea, tmp_path):
    paths = links(tea, tmp_path / "videos", 9)
    whole = jsonl(run_vi("probe", *paths, "--concurrency", "1", check=True).stdout)
    out = tmp_path / "out.jsonl"
    run_vi("probe", *paths, "--concurrency", "4", "-o", str(out), check=True)
    lines = out.read_text().splitlines(keepends=True)
    assert jsonl("".join(lines)) == whole  # same records, same order, whatever the concurrency
    out.write_text("".join(lines[:4]) + lines[4][:20])  # killed mid-line
    run_vi("probe", *paths, "--concurrency", "4", "-o", str(out), "--resume", check=True)
    assert [r["id"] for r in jsonl(out.read_text())] == [r["id"] for r in whole]
    shards = [jsonl(run_vi("probe", *paths, "--concurrency", "3", "--shard", f"{i}/2", check=True).stdout)
              for i in range(2)]
    assert sorted(r["id"] for shard in shards for r in shard) == sorted(r["id"] for r in whole)
