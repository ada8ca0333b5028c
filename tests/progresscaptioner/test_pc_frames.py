"""`vi frames`: all / window / kmeans on a sample clip with known stages, FrameCapEval input,
resume, shard and bad input. Runs the command function in-process (the CLI start-up is
seconds) and the real `vi` once for the exit codes."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import jsonl, run_vi, shared
from vi.cli.frames import frames_command
from vi.core.sharding import Shard
from vi.core.stream import StreamOptions
from vi.evaluation.progresscaptioner.samples import make_progress_sample
from vi.pipelines.progresscaptioner.frame_selection import kmeans_selection, window_bounds
from vi.pipelines.progresscaptioner.frames import FramesConfig

DEFAULTS = dict(device="cpu")  # the rest: FramesConfig's own defaults, those of the CLI


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("progress")
    make_progress_sample(out)
    return out, json.loads((out / "progress.json").read_text())


def frames(tmp: Path, records: list[dict] | None = None, *, out: str = "out.jsonl", seed: int = 0,
           resume: bool = False, shard: str | None = None, **options) -> list[dict]:
    """Run vi frames in-process; the records it wrote."""
    source = None
    if records is not None:
        source = tmp / f"in-{out}"
        source.write_text("".join(json.dumps(r) + "\n" for r in records))
    target = tmp / out
    opts = StreamOptions(input=source, output=target, resume=resume, overwrite=not resume, quiet=True, seed=seed,
                         shard=Shard.parse(shard) if shard else None)
    framecap = options.pop("framecap", None)
    config = FramesConfig(**{**DEFAULTS, "seed": seed, **options})
    frames_command.stage_function(opts, config, framecap=framecap)
    return jsonl(target.read_text())


def video_record(sample, **extra) -> dict:
    out, truth = sample
    return {"id": "progress", "video": str(out / truth["video"]), "action": truth["action"], **extra}


def test_all_frames_at_1fps_saved_once(sample, tmp_path):
    _, truth = sample
    [record] = frames(tmp_path, [video_record(sample)], frames_dir=tmp_path / "f")
    assert [f["time"] for f in record["frames"]] == truth["frame_times"]
    assert all(Path(f["path"]).is_file() and Path(f["path"]).parent.name == "progress" for f in record["frames"])
    assert record["frame_select"] == {"method": "all", "fps": 1.0, "count": len(truth["frame_times"])}
    assert record["action"] == truth["action"] and record["source"] is None


def test_clip_frames_start_at_the_clip(sample, tmp_path):
    [record] = frames(tmp_path, [video_record(sample, start=3.5, end=8.5)], frames_dir=tmp_path / "f", fps=0.5)
    assert [f["time"] for f in record["frames"]] == [3.5, 5.5, 7.5]


def test_window_fans_out_and_covers_every_frame(sample, tmp_path):
    _, truth = sample
    n = len(truth["frame_times"])
    out = frames(tmp_path, [video_record(sample)], frames_dir=tmp_path / "f", select="window", window=4, stride=3)
    assert [r["id"] for r in out] == ["progress/w0-3", "progress/w3-6", "progress/w6-9", "progress/w9-12",
                                      f"progress/w{n - 4}-{n - 1}"]
    assert all(r["parent"] == "progress" and len(r["frames"]) == 4 for r in out)
    assert out[1]["frames"][0] == out[0]["frames"][-1]  # one file per frame, shared by windows
    assert out[-1]["frame_select"]["last"] == n - 1 and out[-1]["frame_select"]["of"] == n
    assert window_bounds(3, 6, 1) == [(0, 2)] and window_bounds(5, 2, 2) == [(0, 1), (2, 3), (3, 4)]


def test_kmeans_one_frame_per_stage_plus_a_near_duplicate(sample, tmp_path):
    _, truth = sample
    stage_at = dict(zip(truth["frame_times"], truth["frame_stage"]))
    [record] = frames(tmp_path, [video_record(sample)], frames_dir=tmp_path / "f", select="kmeans", seed=3)
    chosen = record["frame_select"]
    times = [f["time"] for f in record["frames"]]
    assert times == sorted(times) and chosen["k"] == len(truth["stages"]) == 5
    stages = [stage_at[t] for t in times]
    assert sorted(set(stages)) == list(range(5)) and len(times) == 6
    i, j = chosen["near_duplicate"]
    assert j == i + 1 and stages[i] == stages[j]  # the no-progression pair, adjacent
    assert sorted(p.name for p in (tmp_path / "f" / "progress").iterdir()) == [f"{t:09.3f}.jpg" for t in times]


def test_kmeans_edges():
    rng = random.Random(0)
    few = kmeans_selection(np.eye(3), seed=0, rng=rng)
    assert few.indices == [0, 1, 2] and few.k is None and few.duplicate is None and "too few" in few.note
    alike = kmeans_selection(np.ones((5, 4)), seed=0, rng=rng)
    assert alike.k is None and len(alike.indices) == 2 and "alike" in alike.note
    # three tight groups: K = 3, one frame each, plus the one nearest a random kept frame
    points = np.repeat(np.eye(3), 3, axis=0) + np.random.default_rng(0).normal(0, 0.01, (9, 3))
    choice = kmeans_selection(points, seed=0, rng=random.Random(1))
    assert choice.k == 3 and len(choice.indices) == 4
    assert sorted({i // 3 for i in choice.indices}) == [0, 1, 2] and choice.duplicate // 3 == choice.anchor // 3
    again = kmeans_selection(points, seed=0, rng=random.Random(1))  # the same seeds: the same choice
    assert (again.indices, again.anchor, again.silhouette) == (choice.indices, choice.anchor, choice.silhouette)


def test_framecap_release_without_frames_gives_error_records(tmp_path):
    release = shared("progcaptioner", "input", "coin_valhs_seq.json")
    entries = json.loads(release.read_text())
    out = frames(tmp_path, framecap=release, image_root=tmp_path)
    assert len(out) == len(entries) and all(r["id"].startswith("COIN/") for r in out)
    first = out[0]["errors"][-1]
    assert first["kind"] == "missing_media" and entries[0]["image_files"][0] in first["message"]
    assert "--image-root" in first["message"] and str(tmp_path) in first["message"]
    assert out[0]["action_label"] == entries[0]["action_label"]  # the entry's fields pass through
    # the release gives six idx values to two videos each (0070: FuelCar and InstallWoodFlooring)
    ids = [r["id"] for r in out]
    assert len(set(ids)) == len(ids) and "COIN/0004" in ids
    twins = [r for r in out if r["idx"] == "0070"]
    assert [r["id"] for r in twins] == ["COIN/0070/uMM0lRfX6YI", "COIN/0070/7l6ts1YwnfU"]
    assert [r["action_label"] for r in twins] == ["FuelCar", "InstallWoodFlooring"]


def test_framecap_ids_name_the_video_only_when_an_idx_repeats():
    from vi.pipelines.progresscaptioner.frame_sources import framecap_ids

    entries = [{"idx": "1", "image_files": ["v/a/f1.png"]}, {"idx": "2", "image_files": ["v/b/f1.png"]},
               {"idx": "1", "image_files": ["v/c/f1.png"]}, {"idx": "1", "image_files": ["v/c/f9.png"]},
               {"no": "idx"}, {"idx": 3}]
    assert framecap_ids(entries, "COIN") == ["COIN/1/a", "COIN/2", "COIN/1/c", "COIN/1/c#2", None, "COIN/3"]


def test_framecap_entries_on_real_frames(tmp_path):
    root = shared("progcaptioner", "frames").parent
    names = sorted(p.name for p in (root / "frames").glob("frame*.png"))
    entries = [{"idx": "0001", "action_label": "PrepareSumiInk", "n_frames": 5,
                "image_files": [f"frames/{n}" for n in names]},
               {"idx": "0002", "action_label": "Pair", "n_frames": 2, "image_files": [f"frames/{n}" for n in names[:2]]},
               {"idx": "0003", "action_label": "Broken", "n_frames": 3, "image_files": [f"frames/{n}" for n in names[:2]]}]
    file = tmp_path / "htc_valhs_seq.json"
    file.write_text(json.dumps(entries))
    out = frames(tmp_path, framecap=file, image_root=root)
    assert [r["id"] for r in out] == ["HTC/0001", "HTC/0002", "HTC/0003"]
    assert out[0]["source"] == "HTC" and out[0]["action"] == "PrepareSumiInk"
    assert [f["path"] for f in out[0]["frames"]] == [str((root / "frames" / n).resolve()) for n in names]
    assert all(f["time"] is None for f in out[0]["frames"]) and out[0]["frame_select"]["fps"] is None
    assert "n_frames" in out[2]["errors"][-1]["message"]
    [picked] = frames(tmp_path, [{"id": "x", "frames": [f["path"] for f in out[0]["frames"]]}], out="k.jsonl",
                      select="kmeans", model="efficientnet-lite0")  # paths alone, as images
    chosen = [f["path"] for f in picked["frames"]]
    assert picked["frame_select"]["k"] in (3, 4) and len(chosen) in (4, 5) and picked["frame_select"]["fps"] is None
    assert chosen == [f["path"] for f in out[0]["frames"] if f["path"] in chosen]  # temporal order kept
    pairs = frames(tmp_path, framecap=file, image_root=root, out="w.jsonl", select="window", window=2, source="COIN")
    assert [r["id"] for r in pairs if "errors" not in r] == [f"COIN/0001/w{i}-{i + 1}" for i in range(4)] + ["COIN/0002/w0-1"]


def test_resume_and_existing_frames_are_not_rewritten(sample, tmp_path):
    first = video_record(sample, id="a", start=0, end=4)
    frames(tmp_path, [first], frames_dir=tmp_path / "f")
    saved = {p: p.stat().st_mtime_ns for p in (tmp_path / "f" / "a").iterdir()}
    second = video_record(sample, id="b", start=4, end=6)
    out = frames(tmp_path, [first, second], frames_dir=tmp_path / "f", resume=True)
    assert [r["id"] for r in out] == ["a", "b"]
    frames(tmp_path, [first], out="again.jsonl", frames_dir=tmp_path / "f")  # a rerun decodes nothing
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "f" / "a").iterdir()} == saved


def test_shards_partition_the_records(sample, tmp_path):
    records = [video_record(sample, id=f"c{i}", start=i, end=i + 1) for i in range(6)]
    parts = [frames(tmp_path, records, out=f"s{k}.jsonl", shard=f"{k}/2", frames_dir=tmp_path / "f") for k in (0, 1)]
    ids = [r["id"] for part in parts for r in part]
    assert sorted(ids) == [f"c{i}" for i in range(6)] and all(parts)


def test_bad_records_become_error_records(sample, tmp_path):
    out = frames(tmp_path, [
        video_record(sample, id="gone", video=str(tmp_path / "nope.mp4")),
        video_record(sample, id="late", start=50, end=60),
        video_record(sample, id="backwards", start=5, end=2),
        {"id": "nothing"},
        video_record(sample, id="one", start=1, end=1.5),
    ], frames_dir=tmp_path / "f")
    errors = {r["id"]: r["errors"][-1]["message"] for r in out if "errors" in r}
    assert "nope.mp4" in errors["gone"] and "no such file" in errors["gone"]
    assert "after the video's last frame" in errors["late"] and "not after its start" in errors["backwards"]
    assert "no 'video'" in errors["nothing"]
    assert [len(r["frames"]) for r in out if r["id"] == "one"] == [1]  # 1-frame records are kept
    nodir = frames(tmp_path, [video_record(sample)], out="nodir.jsonl")
    assert "--frames-dir" in nodir[0]["errors"][-1]["message"]


@pytest.mark.parametrize("options, message", [
    (dict(fps=0.0), "--fps must be a positive"),
    (dict(select="window", window=7), "--window 7"),
    (dict(select="window", stride=0), "--stride"),
    (dict(window=3), "--window and --stride go with --select window"),
    (dict(select="sometimes"), "--select must be one of .+, got 'sometimes'"),
])
def test_bad_options_are_refused(tmp_path, options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        frames(tmp_path, [], **options)


def test_cli_exit_codes(sample, tmp_path):
    shutil.copy(sample[0] / "progress.mp4", tmp_path / "v.mp4")
    done = run_vi("frames", "--frames-dir", str(tmp_path / "f"), "--fps", "0.25",
                  stdin=json.dumps({"id": "v", "video": str(tmp_path / "v.mp4")}) + "\n" + json.dumps(
                      {"id": "x", "video": str(tmp_path / "x.mp4")}) + "\n")
    assert done.returncode == 3  # one record failed, the stream went on
    ok, bad = jsonl(done.stdout)
    assert [f["time"] for f in ok["frames"]] == [0.0, 4.0, 8.0, 12.0] and "x.mp4" in bad["errors"][-1]["message"]
