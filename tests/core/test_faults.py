"""The fault suite: the record contract under bad bytes, odd ids, broken media and hostile runs.

Every case checks exactly-once output (one line per input record), pure JSONL on stdout, the
documented exit code, and a message naming the record (its line, its path) and what to do.
`vi probe` is the stage under test where the case allows (fast, no model); the record readers
are shared by every stage. Signals, locks and the full disk: tests/core/test_faults_runs.py.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess

import pytest

from conftest import VI, ffmpeg, run_vi


def pure_jsonl(text: str) -> list[dict]:
    """stdout holds JSON objects, one per line, and nothing else."""
    lines = text.split("\n")
    assert lines[-1] == "", "stdout must end with a newline"
    records = [json.loads(line) for line in lines[:-1]]
    assert all(isinstance(r, dict) for r in records)
    return records


def kinds(record: dict) -> list[str]:
    return [e["kind"] for e in record.get("errors", [])]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 1 s video with sound: probing it is fast."""
    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=10", "-f", "lavfi", "-i", "sine",
           "-t", "1", "-shortest", str(path))
    return path


def bad_bytes_input(clip) -> bytes:
    good = json.dumps({"id": "good", "video": str(clip)}).encode()
    return b"\n".join([good, b'\xff\xfe{"id": "latin", "title": "caf\xe9"}',
                       json.dumps({"id": "after", "video": str(clip)}).encode()]) + b"\n"


@pytest.mark.parametrize("via", ["stdin", "-i"])
def test_non_utf8_line_costs_one_error_record_not_the_run(clip, tmp_path, via):
    data = bad_bytes_input(clip)
    source = tmp_path / "in.jsonl"
    source.write_bytes(data)
    args = [VI, "probe", "-q"] + (["-i", str(source)] if via == "-i" else [])
    done = subprocess.run(args, input=data if via == "stdin" else None, capture_output=True)
    records = pure_jsonl(done.stdout.decode())
    assert done.returncode == 3  # some records failed, all are there
    assert [r["id"] for r in records][::2] == ["good", "after"]
    bad = records[1]
    assert kinds(bad) == ["invalid_utf8"]
    assert base64.b64decode(bad["raw_base64"]) == data.split(b"\n")[1]  # the exact bytes
    assert "input line 2" in bad["errors"][0]["message"] and "0xff" in bad["errors"][0]["message"]


def test_every_record_reader_takes_bad_bytes_per_line(tmp_path):
    """transcribe and clips read through vi.core.records; vi eval through metrics.read_jsonl."""
    data = b'\xff{"id": "x"}\n{"id": "y", "errors": [{"stage": "s", "kind": "k", "message": "m"}]}\n'
    for stage in ("transcribe", "clips"):
        done = subprocess.run([VI, stage, "-q"], input=data, capture_output=True)
        records = pure_jsonl(done.stdout.decode())
        assert done.returncode == 3 and len(records) == 2, done.stderr
        assert kinds(records[0]) == ["invalid_utf8"] and records[1]["id"] == "y"
    from vi.evaluation.stepdiff.metrics import BenchmarkFileError, read_jsonl

    path = tmp_path / "gt.jsonl"
    path.write_bytes(b'{"a": 1}\n' + data)
    with pytest.raises(BenchmarkFileError, match="line 2: not UTF-8"):
        read_jsonl(path)


def test_line_separators_inside_strings_do_not_split_records(clip, tmp_path):
    text = json.dumps({"id": "sep", "video": str(clip)})[:-1] + ', "t": "a\u2028b\u0085c\rd"}\n'
    source = tmp_path / "in.jsonl"
    source.write_bytes(text.encode())
    done = run_vi("probe", "-q", "-i", str(source))
    (record,) = pure_jsonl(done.stdout)
    assert done.returncode == 0 and record["t"] == "a\u2028b\u0085c\rd"
    assert "\u2028" not in done.stdout and "\u0085" not in done.stdout  # written escaped
    assert len(done.stdout.splitlines()) == 1  # even str.splitlines sees one line


def test_a_20_mb_line_is_one_record(clip, tmp_path):
    big = {"id": "big", "video": str(clip), "pad": "x" * 20_000_000}
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps(big) + "\n")
    done = run_vi("probe", "-q", "-i", str(source), "-o", str(out))
    (record,) = pure_jsonl(out.read_text())
    assert done.returncode == 0 and done.stdout == "" and record["pad"] == big["pad"]


def test_lines_that_are_json_but_not_objects(tmp_path):
    # (vi probe reads a line that does not open with "{" as a path; a record stage cannot)
    done = run_vi("transcribe", "-q", stdin='[1, 2]\n"text"\n42\n')
    records = pure_jsonl(done.stdout)
    assert done.returncode == 3 and len(records) == 3
    for lineno, (record, what) in enumerate(zip(records, ["an array", "a string", "a number"]), 1):
        assert kinds(record) == ["invalid_json"]
        assert f"input line {lineno}: {what}, not a JSON object" in record["errors"][0]["message"]


ODD_IDS = [7, None, {"a": 1}, "", "i" * 5000, "a/b", "../up", "two\nlines", "nul\x00id"]


def test_odd_ids_each_give_exactly_one_record(clip, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "video": str(clip)}) + "\n" for i in ODD_IDS))
    done = run_vi("probe", "-q", "-i", str(source))
    records = pure_jsonl(done.stdout)
    assert len(records) == len(ODD_IDS) and done.returncode == 3
    ids = [r["id"] for r in records]
    assert len(set(map(str, ids))) == len(ids), "probe must not give two records one id"
    assert ids[0] == 7 and ids[4:] == ODD_IDS[4:]  # kept as given: ids are data, not file names
    assert ids[1].startswith("clip-") and ids[3].startswith("clip-")  # null and "": from the stem
    assert kinds(records[2]) == ["missing_id"] and "got {'a': 1}" in records[2]["errors"][0]["message"]
    assert all(not kinds(r) for i, r in enumerate(records) if i != 2)


def test_odd_ids_make_safe_file_names():
    from vi.core.paths import safe_name

    names = [safe_name(i) for i in ODD_IDS + ["é" * 300, ".."]]
    assert len(set(names)) == len(names)
    assert all(len(n.encode()) <= 255 and "/" not in n and "\0" not in n and "\n" not in n
               and not n.startswith(".") for n in names)


def test_duplicate_ids_are_written_each_time_and_resume_counts_them(clip, tmp_path):
    line = json.dumps({"id": "dup", "video": str(clip)}) + "\n"
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(line)
    run_vi("probe", "-q", "-i", str(source), "-o", str(out), check=True)  # "killed" after one
    source.write_text(line + line + json.dumps({"id": "z", "video": str(clip)}) + "\n")
    done = run_vi("probe", "-i", str(source), "-o", str(out), "--resume")
    assert done.returncode == 0, done.stderr
    assert [r["id"] for r in pure_jsonl(out.read_text())] == ["dup", "dup", "z"]
    assert "'dup' occurs more than once" in done.stderr
    again = run_vi("probe", "-q", "-i", str(source), "-o", str(out), "--resume")
    assert again.returncode == 0 and len(pure_jsonl(out.read_text())) == 3  # nothing more


@pytest.fixture(scope="module")
def bad_media(clip, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    (folder / "folder.mp4").mkdir()
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48", "-frames:v", "1", str(folder / "photo.jpg"))
    (folder / "photo.jpg").rename(folder / "photo.mp4")
    ffmpeg("-f", "lavfi", "-i", "sine", "-t", "1", str(folder / "audio.m4a"))
    os.symlink(folder / "gone.mp4", folder / "dangling.mp4")
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=10", "-f", "lavfi", "-i", "sine", "-t", "4",
           "-shortest", "-movflags", "+faststart", str(folder / "full.mp4"))
    data = (folder / "full.mp4").read_bytes()
    (folder / "cut.mp4").write_bytes(data[: len(data) // 2])  # index at the front, data cut
    return folder


def test_broken_media_become_error_records_naming_the_file(bad_media):
    names = ["folder", "photo", "audio", "dangling", "cut"]
    paths = [str(bad_media / (n + (".m4a" if n == "audio" else ".mp4"))) for n in names]
    # as records: a folder given as an argument is searched for videos, not probed
    done = run_vi("probe", "-q", stdin="".join(json.dumps({"id": n, "video": p}) + "\n"
                                               for n, p in zip(names, paths)))
    records = {r["id"]: r for r in pure_jsonl(done.stdout)}
    assert sorted(records) == sorted(names) and done.returncode == 3
    message = {n: (records[n].get("errors") or [{"message": ""}])[0]["message"] for n in names}
    assert "is a directory" in message["folder"]
    assert records["audio"]["has_video"] is False and not kinds(records["audio"])
    assert "symbolic link" in message["dangling"] and "gone.mp4" in message["dangling"]
    assert "truncated" in message["cut"] and "re-download" in message["cut"]
    # a still image renamed .mp4: ffprobe reads it as one frame, or refuses it; never a crash
    assert kinds(records["photo"]) in ([], ["unreadable_media"])
    assert all(paths[i] in message[n] for i, n in enumerate(names) if n not in ("audio", "photo"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file whatever its mode")
def test_unreadable_file_says_permission(clip, tmp_path):
    locked = tmp_path / "locked.mp4"
    locked.write_bytes(clip.read_bytes())
    locked.chmod(0)
    (record,) = pure_jsonl(run_vi("probe", "-q", str(locked)).stdout)
    assert "permission denied" in record["errors"][0]["message"]


def test_variable_frame_rate_frames_come_by_their_own_timestamps(tmp_path):
    from vi.core.media import read_frames

    path = tmp_path / "vfr.mp4"  # 2 s red at 2 fps, then 2 s blue at 30 fps (average 13 fps)
    ffmpeg("-f", "lavfi", "-i", "color=red:s=64x48:r=2:d=2", "-f", "lavfi",
           "-i", "color=blue:s=64x48:r=30:d=2", "-filter_complex", "[0][1]concat=n=2:v=1",
           "-fps_mode", "vfr", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(path))
    frames = read_frames(path, [1.0, 1.5, 3.0])
    red, blue = frames[:, 24, 32, 0] > 128, frames[:, 24, 32, 2] > 128
    assert list(red) == [True, True, False] and list(blue) == [False, False, True]


def test_messages_that_point_the_right_way(clip, tmp_path):
    records = json.dumps({"id": "a", "video": str(clip)}) + "\n"
    seed = run_vi("probe", "-q", "--seed", "99999999999999999999", stdin=records)
    assert seed.returncode == 2 and seed.stdout == "" and "--seed" in seed.stderr
    folder = run_vi("probe", "-q", "-o", str(tmp_path), stdin=records)
    assert folder.returncode == 2 and "names a folder" in folder.stderr and "--resume" not in folder.stderr
    from vi.core.errors import SetupError
    from vi.pipelines.common.transcribe import asr_model_path

    with pytest.raises(SetupError, match="not a CTranslate2 Whisper model"):
        asr_model_path("/etc/passwd")


# --- the wrong kind of input: a JSON document, a video, a path where records are expected ---------

@pytest.mark.parametrize("indent", [2, None])
def test_a_json_document_given_as_input_is_read_as_its_records(tmp_path, indent):
    """A pretty-printed object (the release's transcripts), or an array of records, is read as the
    records it holds, not as one invalid_json record per line."""
    # records an earlier stage failed pass through untouched: the reader is what is tested, no model runs
    upstream = [{"stage": "probe", "kind": "missing_media", "message": "gone"}]
    cooker = {"id": "cooker", "transcript": {"segments": [{"start": 0, "end": 2, "text": "Hi."}]}, "errors": upstream}
    single, many = tmp_path / "one.json", tmp_path / "many.json"
    single.write_text(json.dumps(cooker, indent=2) + "\n")
    many.write_text(json.dumps([cooker, {**cooker, "id": "other"}], indent=indent))
    for path, ids in ((single, ["cooker"]), (many, ["cooker", "other"])):
        done = run_vi("transcribe", "-q", "-i", str(path))
        assert done.returncode == 0, done.stderr
        records = pure_jsonl(done.stdout)
        assert [r["id"] for r in records] == ids and records[0]["transcript"] == cooker["transcript"]


def test_a_broken_json_document_is_refused_at_once_with_jq_advice(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "id": "x",\n  "transcript": \n}\n')
    out = tmp_path / "out.jsonl"
    done = run_vi("extract-steps", "-q", "-i", str(broken), "-o", str(out))
    assert done.returncode == 2 and done.stdout == "" and not out.exists()
    assert "JSON document" in done.stderr and "jq -c" in done.stderr


@pytest.mark.parametrize("stage", ["transcribe", "extract-steps"])
def test_a_video_given_as_input_is_refused_at_once_saying_what_takes_it(clip, tmp_path, stage):
    out = tmp_path / "out.jsonl"
    done = run_vi(stage, "-i", str(clip), "-o", str(out))
    assert done.returncode == 2 and done.stdout == "" and not out.exists()
    assert f"--input {clip} is an MP4/MOV video, not JSONL records" in done.stderr
    assert f"vi probe {clip} | vi {stage}" in done.stderr
    piped = subprocess.run([VI, stage, "-q"], input=clip.read_bytes(), capture_output=True)
    assert piped.returncode == 2 and piped.stdout == b"" and b"stdin is an MP4/MOV video" in piped.stderr


def test_an_archive_and_a_binary_file_are_refused(tmp_path):
    import gzip

    packed = tmp_path / "records.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"id": "a"}\n'))
    done = run_vi("transcribe", "-i", str(packed))
    assert done.returncode == 2 and "gzip-compressed" in done.stderr and "zcat" in done.stderr
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x01\x02\x00\x00" * 100)
    done = run_vi("transcribe", "-i", str(blob))
    assert done.returncode == 2 and "a binary file, not JSONL records" in done.stderr


def test_a_path_given_to_a_stage_that_reads_records_says_where_it_goes(clip, tmp_path):
    done = run_vi("transcribe", str(clip))
    assert done.returncode == 2 and "unexpected extra argument" not in done.stderr
    assert f"vi probe {clip} | vi transcribe" in done.stderr
    records = tmp_path / "in.jsonl"
    records.write_text('{"id": "a"}\n')
    done = run_vi("transcribe", str(records))
    assert done.returncode == 2 and f"vi transcribe -i {records}" in done.stderr


def test_probe_list_given_a_folder_says_to_pass_it_as_an_argument(tmp_path):
    done = run_vi("probe", "--list", str(tmp_path))
    assert done.returncode == 2 and "Is a directory" not in done.stderr
    assert f"vi probe {tmp_path}" in done.stderr


def test_a_line_of_bad_bytes_that_names_no_file_is_an_invalid_utf8_record():
    done = subprocess.run([VI, "probe", "-q"], input=b"\xc3( x\n", capture_output=True)
    (record,) = pure_jsonl(done.stdout.decode())
    assert done.returncode == 3 and kinds(record) == ["invalid_utf8"]
    assert base64.b64decode(record["raw_base64"]) == b"\xc3( x"
    json.loads(done.stdout, strict=True)  # no lone surrogate anywhere
    assert "\\ud" not in done.stdout.decode()
