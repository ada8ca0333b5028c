"""vi rebuild showhowto: the release's frames, byte for byte as its README's ffmpeg command cuts them
(`recipe_frame` runs that command, one process per frame), from fewer decoding passes; the keyframes
layouts it reads and the one it refuses; the dataset in the release's layout, resumable, sharded."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ffmpeg, jsonl, run_vi
from vi.core.errors import RecordError
from vi.pipelines.showhowto import rebuild
from vi.pipelines.showhowto.rebuild import Keyframe, LayoutError, frames_of, open_keyframes, recipe_frame

# Starts on and between the 5 fps slots (0.6 * 5 is 3.0000000000000004 in doubles), repeats, and two
# clusters more than CLUSTER_GAP_S apart, so the second is decoded after a seek.
KEYFRAMES = [Keyframe(0, 0), Keyframe(0.0, 3), Keyframe(0.6, 0), Keyframe(1.25, 2), Keyframe(1.25, 2),
             Keyframe(7.3, 1), Keyframe(26, 0), Keyframe(27.9, 4)]


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict[str, Path]:
    """Every frame differs: 30 fps with B-frames and 2 s GOPs, and 25 fps of another pattern, with sound."""
    folder = tmp_path_factory.mktemp("rebuild_videos")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=192x108:rate=30:duration=30", "-f", "lavfi",
           "-i", "sine=frequency=440:duration=30", "-c:v", "libx264", "-preset", "veryfast", "-g", "60",
           "-bf", "3", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(folder / "vidAAAAAAA1.mp4"))
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=160x90:rate=25:duration=6", "-c:v", "libx264", "-preset",
           "veryfast", "-pix_fmt", "yuv420p", str(folder / "vidBBBBBBB2.mp4"))
    return {p.stem: p for p in folder.glob("*.mp4")}


def test_frames_are_the_recipes_bytes_with_seeking_and_without(videos):
    video = videos["vidAAAAAAA1"]
    frames, times = frames_of(video, KEYFRAMES)
    from_start, _ = frames_of(video, KEYFRAMES, seek=False)
    height, width = frames[0].shape[:2]
    assert (width, height) == (192, 108)
    for keyframe, frame, again in zip(KEYFRAMES, frames, from_start):
        assert frame.tobytes() == recipe_frame(video, keyframe, width, height), keyframe
        assert again.tobytes() == frame.tobytes()
    assert times[:4] == [0.0, 0.6, 0.6, 1.8] and times[-1] == 28.8  # 1.25 s: slot 7 (1.4 s), then 2 more


@pytest.mark.parametrize("encoding", [
    # NTSC's 23.976 fps, and timestamps that start at 1.3 s with the video 24 ms after the audio
    ("-r", "24000/1001", "-c:v", "libx264", "-bf", "3", "-g", "50", "-c:a", "aac", "-output_ts_offset", "1.3"),
    ("-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-g", "60", "-an"),  # YouTube's other codec
], ids=["offset-ntsc-h264", "vp9-webm"])
def test_the_bytes_match_on_other_codecs_rates_and_start_times(encoding, tmp_path):
    video = tmp_path / ("clip.webm" if "libvpx-vp9" in encoding else "clip.mp4")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=128x72:rate=30:duration=30", "-f", "lavfi", "-i",
           "sine=duration=30", "-pix_fmt", "yuv420p", *encoding, "-shortest", str(video))
    keyframes = [Keyframe(0.9, 1), Keyframe(1.3, 0), Keyframe(25.3, 2), Keyframe(28.1, 3)]
    frames, _ = frames_of(video, keyframes)
    for keyframe, frame in zip(keyframes, frames):
        assert frame.tobytes() == recipe_frame(video, keyframe, 128, 72), keyframe


def test_a_seek_that_lands_after_a_keyframes_frame_is_redone_from_the_start(tmp_path, monkeypatch):
    video = tmp_path / "slides.mp4"  # one frame a second: the 5 fps slot at 20.6 s shows the frame of 20 s
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=1:duration=30", "-c:v", "libx264", "-pix_fmt",
           "yuv420p", str(video))
    monkeypatch.setattr(rebuild, "SEEK_MARGIN_S", 0.0)
    seeks = []
    real = rebuild._run
    monkeypatch.setattr(rebuild, "_run", lambda video, jobs, probe: (seeks.extend(j.seek_s for j in jobs),
                                                                      real(video, jobs, probe))[1])
    keyframe = Keyframe(20.5, 0)
    frames, _ = frames_of(video, [keyframe])
    assert seeks == [pytest.approx(20.6), None]  # the seeked pass found no frame for slot 103: redone
    assert frames[0].tobytes() == recipe_frame(video, keyframe, 64, 48)


def test_a_keyframe_past_the_end_fails_the_record_as_the_recipe_finds_nothing(videos):
    video = videos["vidBBBBBBB2"]
    late = Keyframe(5.5, 9)
    assert recipe_frame(video, late, 160, 90) == b""
    with pytest.raises(RecordError, match=r"keyframe 1 \(start_sec 5.5, frame_idx 9\) is past") as failed:
        frames_of(video, [Keyframe(1, 0), late])
    assert failed.value.kind == "unreadable_frame"


def test_every_documented_keyframes_layout_is_read_and_an_unknown_one_refused(tmp_path):
    frames = [{"start_sec": 1.5, "frame_idx": 2, "caption": "ignored"}]
    single = tmp_path / "one" / "keyframes.json"
    single.parent.mkdir()
    single.write_text(json.dumps({"vid1": frames, "vid2": {"keyframes": frames}}))
    per_video = tmp_path / "many"
    (per_video / "vid2").mkdir(parents=True)
    (per_video / "vid1.json").write_text(json.dumps(frames))
    (per_video / "vid2" / "keyframes.json").write_text(json.dumps({"keyframes": frames}))
    for where in (single, single.parent, per_video):
        source = open_keyframes(where)
        assert source.ids() == ["vid1", "vid2"]
        assert source.keyframes("vid2") == [Keyframe(1.5, 2)]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"vid1": [[1.5, 2]]}))
    with pytest.raises(LayoutError) as refused:
        open_keyframes(bad)
    assert "'vid1', maps to [[1.5, 2]]" in str(refused.value)
    assert '{"<video id>": [{"start_sec": 12.4, "frame_idx": 3}' in str(refused.value)  # what was expected
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"vid1": frames, "vid2": [{"start_sec": -1, "frame_idx": 0}]}))
    with pytest.raises(RecordError, match=r"\[0\].start_sec is -1"):
        open_keyframes(broken).keyframes("vid2")


def _release(tmp_path: Path) -> tuple[Path, Path]:
    keyframes = tmp_path / "keyframes.json"
    keyframes.write_text(json.dumps({
        "vidAAAAAAA1": [{"start_sec": 2.1, "frame_idx": 0}, {"start_sec": 14, "frame_idx": 3},
                        {"start_sec": 27, "frame_idx": 1}],
        "vidBBBBBBB2": [{"start_sec": 0.4, "frame_idx": 0}, {"start_sec": 3.2, "frame_idx": 2}],
        "vidCCCCCCC3": [{"start_sec": 1, "frame_idx": 0}, {"start_sec": 2, "frame_idx": 0}],
        "vidDDDDDDD4": [{"start_sec": 1, "frame_idx": 0}]}))
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"vidAAAAAAA1": ["crack the eggs", "whisk", "pour"],
                                   "vidBBBBBBB2": ["cut", "serve"], "vidCCCCCCC3": ["a", "b"],
                                   "vidDDDDDDD4": ["one", "two"]}))
    return keyframes, prompts


def test_vi_rebuild_writes_the_release_layout_with_only_complete_sequences_and_resumes(videos, tmp_path):
    keyframes, prompts = _release(tmp_path)
    root = next(iter(videos.values())).parent
    out, records = tmp_path / "ShowHowToTrain", tmp_path / "rebuilt.jsonl"
    args = ("rebuild", "showhowto", "--keyframes", str(keyframes), "--prompts", str(prompts),
            "--video-root", str(root), "--out", str(out), "-o", str(records), "-q")
    done = run_vi(*args)
    assert done.returncode == 3, done.stderr  # two videos cannot be rebuilt
    got = {r["id"]: r for r in jsonl(records.read_text())}
    assert got["vidCCCCCCC3"]["errors"][-1]["kind"] == "missing_media"
    assert got["vidDDDDDDD4"]["errors"][-1]["kind"] == "bad_prompts"  # 2 prompts for 1 keyframe
    assert json.loads((out / "prompts.json").read_text()) == {
        "vidAAAAAAA1": ["crack the eggs", "whisk", "pour"], "vidBBBBBBB2": ["cut", "serve"]}
    assert sorted(p.name for p in (out / "imgseqs").glob("*.jpg")) == ["vidAAAAAAA1.jpg", "vidBBBBBBB2.jpg"]
    strip = np.asarray(Image.open(out / "imgseqs" / "vidAAAAAAA1.jpg").convert("RGB"))
    assert strip.shape == (108, 3 * 192, 3)  # native frames side by side, as the release's loader splits them
    wanted = [recipe_frame(videos["vidAAAAAAA1"], Keyframe(s, i), 192, 108) for s, i in ((2.1, 0), (14, 3), (27, 1))]
    frames = [np.frombuffer(frame, np.uint8).reshape(108, 192, 3).astype(int) for frame in wanted]
    for k in range(3):  # a JPEG of the recipe's frames in their order: lossy, so nearest, not equal
        tile = strip[:, k * 192:(k + 1) * 192].astype(int)
        distances = [np.abs(tile - frame).mean() for frame in frames]
        assert int(np.argmin(distances)) == k and distances[k] < 8, distances
    assert got["vidAAAAAAA1"]["sequence"] == {"path": "imgseqs/vidAAAAAAA1.jpg", "frames": 3,
                                              "prompts": ["crack the eggs", "whisk", "pour"]}
    stamp = (out / "imgseqs" / "vidAAAAAAA1.jpg").stat().st_mtime_ns
    again = run_vi(*args, "--resume")
    assert again.returncode == 0, again.stderr
    assert (out / "imgseqs" / "vidAAAAAAA1.jpg").stat().st_mtime_ns == stamp  # not cut again
    assert len(jsonl(records.read_text())) == 4


def test_vi_rebuild_shards_into_webdataset_and_refuses_an_unknown_layout(videos, tmp_path):
    keyframes, prompts = _release(tmp_path)
    root = next(iter(videos.values())).parent
    out = tmp_path / "wds"
    keys = set()
    for shard in ("0/2", "1/2"):
        done = run_vi("rebuild", "showhowto", "--keyframes", str(keyframes), "--prompts", str(prompts),
                      "--video-root", str(root), "--out", str(out), "--format", "webdataset", "--shard", shard, "-q")
        assert done.returncode in (0, 3), done.stderr
        suffix = shard.replace("/", "-of-")
        for tar in out.glob(f"showhowto-{suffix}-*.tar"):
            with tarfile.open(tar) as opened:
                keys |= {m.name for m in opened.getmembers()}
    assert keys == {"vidAAAAAAA1.jpg", "vidAAAAAAA1.json", "vidBBBBBBB2.jpg", "vidBBBBBBB2.json"}
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"vidAAAAAAA1": {"frames": [3, 4]}}))
    refused = run_vi("rebuild", "showhowto", "--keyframes", str(wrong), "--prompts", str(prompts),
                     "--video-root", str(root), "--out", str(tmp_path / "never"))
    assert refused.returncode == 2
    assert "start_sec" in refused.stderr and "frame_idx" in refused.stderr
    assert not (tmp_path / "never").exists()


def test_a_record_of_vi_download_names_its_video(videos, tmp_path):
    keyframes, prompts = _release(tmp_path)
    config = rebuild.RebuildConfig(keyframes=keyframes, prompts=prompts, out=tmp_path / "ds")
    with pytest.raises(RecordError, match="no --video-root given"):
        rebuild.find_video({"id": "vidBBBBBBB2"}, None)
    record = {"id": "x", "youtube_id": "vidBBBBBBB2", "video": str(videos["vidBBBBBBB2"])}
    assert rebuild.find_video(record, config.video_root) == videos["vidBBBBBBB2"]
    assert rebuild.video_id(record) == "vidBBBBBBB2"


def test_a_resume_rebuilds_what_a_kill_took_out_of_an_unfinished_tar(tmp_path):
    from vi.pipelines.showhowto.export_writers import Sequence, TarShardWriter

    writer = TarShardWriter(tmp_path / "wds", None, maxcount=10)
    writer.write(Sequence("kept", ["a"], [0.0], [None], None, None), b"jpeg")
    writer.close()
    records = tmp_path / "rebuilt.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in (
        {"id": "kept", "sequence": {"frames": 1}}, {"id": "lost", "sequence": {"frames": 1}},
        {"id": "failed", "errors": [{"stage": "rebuild showhowto", "kind": "missing_media", "message": "-"}]})))
    resumed = TarShardWriter(tmp_path / "wds", None, maxcount=10)
    resumed.prepare_resume()
    assert rebuild.forget_lost(records, resumed) == 1
    assert [r["id"] for r in jsonl(records.read_text())] == ["kept", "failed"]
