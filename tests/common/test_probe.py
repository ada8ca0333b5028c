"""`vi probe` on real media, and on every kind of broken input."""

import json
import os

from conftest import jsonl, run_vi
from vi.pipelines.common.probe import assign_ids, gather


def test_probe_reports_real_metadata(tea):
    done = run_vi("probe", str(tea), check=True)
    (record,) = jsonl(done.stdout)
    assert list(record)[:2] == ["id", "video"]
    assert record["id"] == "tea" and record["video"] == str(tea.resolve())
    assert (record["width"], record["height"], record["fps"]) == (640, 360, 10.0)
    assert 25 < record["duration"] < 31
    assert record["has_video"] is True and record["has_audio"] is True
    assert "1 ok, 0 failed" in done.stderr


def test_paths_directories_lists_and_records_all_work(tea, tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text(f"# comment\n{tea}\n\n")
    from_list = jsonl(run_vi("probe", "--list", str(listing), check=True).stdout)
    from_dir = jsonl(run_vi("probe", str(tea.parent), check=True).stdout)
    from_stdin = jsonl(run_vi("probe", stdin=json.dumps({"id": "mine", "video": str(tea), "k": 1})
                              + "\n", check=True).stdout)
    assert from_list[0]["id"] == from_dir[0]["id"] == "tea"
    assert from_stdin[0]["id"] == "mine" and from_stdin[0]["k"] == 1
    assert from_stdin[0]["duration"] == from_list[0]["duration"]


def test_colliding_stems_get_deterministic_order_free_ids(tea, tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        os.symlink(tea, tmp_path / sub / "clip.mp4")
    paths = [str(tmp_path / "a" / "clip.mp4"), str(tmp_path / "b" / "clip.mp4"), str(tea)]
    forward, collisions = assign_ids(gather(paths))
    backward, _ = assign_ids(gather(paths[::-1]))
    ids = {r["video"]: r["id"] for r in forward}
    assert ids == {r["video"]: r["id"] for r in backward}
    assert len(set(ids.values())) == 3 and ids[str(tea)] == "tea"
    assert all(i.startswith("clip-") for p, i in ids.items() if "clip" in p)
    assert list(collisions) == ["clip"]
    done = run_vi("probe", *paths)
    assert "id collision" in done.stderr and "clip" in done.stderr


def test_a_derived_id_never_takes_an_explicit_one(tea):
    records, collisions = assign_ids([{"id": "tea", "video": "/x/other.mp4"},
                                      {"video": str(tea)}])
    assert records[0]["id"] == "tea" and records[1]["id"].startswith("tea-")
    assert "tea" in collisions


def test_broken_media_become_error_records_and_the_stream_goes_on(tea, broken_media):
    paths = [broken_media[k] for k in ("missing", "empty", "truncated")] + [tea]
    done = run_vi("probe", *map(str, paths))
    records = jsonl(done.stdout)
    assert done.returncode == 3  # documented: some records failed
    assert [r["id"] for r in records] == ["does_not_exist", "empty", "truncated", "tea"]
    kinds = [r["errors"][0]["kind"] for r in records[:3]]
    assert kinds == ["missing_media", "unreadable_media", "unreadable_media"]
    assert "no such file" in records[0]["errors"][0]["message"]
    assert "empty" in records[1]["errors"][0]["message"]
    assert "truncated" in records[2]["errors"][0]["message"]
    assert "errors" not in records[3] and records[3]["duration"] > 0
    assert "1 ok, 3 failed" in done.stderr


def test_video_without_audio_is_not_an_error(broken_media):
    (record,) = jsonl(run_vi("probe", str(broken_media["no_audio"]), check=True).stdout)
    assert record["has_audio"] is False and record["has_video"] is True


def test_record_without_video_field_is_an_error_record():
    # a plain line is a path (find ... | vi probe); a line opening a JSON object must be JSON
    done = run_vi("probe", stdin='{"id": "x", "title": "no path"}\n{"id": broken\nnope.mp4\n')
    records = jsonl(done.stdout)
    assert records[0]["errors"][0]["kind"] == "missing_field"
    assert "'video'" in records[0]["errors"][0]["message"]
    assert records[1]["errors"][0]["kind"] == "invalid_json" and records[1]["raw"] == '{"id": broken'
    assert records[2]["errors"][0]["kind"] == "missing_media"
    assert done.returncode == 3


def test_probe_is_deterministic(tea, broken_media):
    args = [str(tea), str(broken_media["truncated"]), str(broken_media["no_audio"])]
    assert run_vi("probe", *args).stdout == run_vi("probe", *args).stdout


def test_shards_of_probe_partition_the_videos(tea, tmp_path):
    for i in range(30):
        os.symlink(tea, tmp_path / f"v{i:02d}.mp4")
    whole = {r["id"] for r in jsonl(run_vi("probe", str(tmp_path), "-q").stdout)}
    parts = [jsonl(run_vi("probe", str(tmp_path), "--shard", f"{i}/3", "-q").stdout)
             for i in range(3)]
    ids = [r["id"] for part in parts for r in part]
    assert len(ids) == len(set(ids)) == 30 and set(ids) == whole
    slurm = run_vi("probe", str(tmp_path), "-q",
                   env={"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"})
    assert {r["id"] for r in jsonl(slurm.stdout)} == {r["id"] for r in parts[1]}


def test_a_file_named_twice_is_probed_once(tea):
    records = jsonl(run_vi("probe", str(tea), str(tea.parent), str(tea), check=True).stdout)
    assert [r["id"] for r in records] == ["tea"]
