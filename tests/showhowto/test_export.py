"""`vi export showhowto` on a real video whose every second is one solid colour.

A tile's mean colour says which second of the video it was cut from, so the tests check the
frames themselves, not just file names and sizes.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile

import numpy as np
import pytest
from PIL import Image

from conftest import VI, ffmpeg, run_vi
from vi.core.sharding import Shard
from vi.pipelines.showhowto import export as showhowto

COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "white": (255, 255, 255),
           "black": (0, 0, 0), "yellow": (255, 255, 0)}  # second k of the video shows colour k
SECOND = list(COLOURS)
WIDE_TILE = round(320 * 256 / 240)  # a 320x240 frame at the default --height 256


@pytest.fixture(scope="module")
def colours_video(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("video") / "colours.mp4"
    inputs = []
    for rgb in COLOURS.values():
        inputs += ["-f", "lavfi", "-i", f"color=c=0x{bytes(rgb).hex()}:s=320x240:r=10:d=1"]
    ffmpeg(*inputs, "-filter_complex", f"concat=n={len(COLOURS)}:v=1:a=0", "-pix_fmt", "yuv420p", str(path))
    return str(path)


def record(record_id: str, video: str, steps: list, title: str = "How to paint") -> dict:
    """steps: (text, second or None, saved jpeg or None); a frame sits mid-second."""
    items = [{"text": text, "start": 0.0, "end": 1.0,
              "frame": None if second is None else {"time": second + 0.5, "score": 0.3,
                                                    **({"path": path} if path else {})}}
             for text, second, path in steps]
    return {"id": record_id, "video": video, "duration": 6.0, "steps": {"title": title, "items": items}}


def plain(record_id: str, video: str, seconds: list[int]) -> dict:
    return record(record_id, video, [(f"{record_id} step {i}", s, None) for i, s in enumerate(seconds)])


def write_jsonl(path, records) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


def colour_of(pixels: np.ndarray) -> str:
    mean = pixels.reshape(-1, 3).mean(axis=0)
    return min(COLOURS, key=lambda name: np.abs(mean - COLOURS[name]).sum())


def official_loader_tiles(root, key: str) -> tuple[list[str], list[np.ndarray]]:
    """What soCzech/ShowHowTo's video_dataset.py does with one sequence (minus the resize)."""
    prompts = json.loads((root / "prompts.json").read_text())[key]
    [path] = [p for p in root.glob("imgseqs*/*.jpg") if os.path.basename(p).replace(".jpg", "") == key]
    img = np.array(Image.open(path))
    h, w = img.shape[:2]
    w = w // len(prompts)
    imgs = np.stack([img[:, i * w:(i + 1) * w] for i in range(len(prompts))], axis=0)
    assert w >= h, "the official loader skips strips whose tiles are narrower than tall"
    return prompts, list(imgs[:, :, (w - h) // 2:][:, :, :h])


def export(*args: str, stdin: str | None = None):
    return run_vi("export", "showhowto", "-q", *args, stdin=stdin, timeout=120)


def test_strip_tiles_come_from_the_right_frames(colours_video, tmp_path):
    records = [record("v1", colours_video, [("Dip the brush.", 2, None), ("Skip me.", None, None),
                                             ("Paint red.", 0, None), ("Paint yellow.", 5, None)]),
               plain("v2", colours_video, [1, 3])]
    out = tmp_path / "ds"
    done = export("--out", str(out), "-i", write_jsonl(tmp_path / "in.jsonl", records))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "2 exported" in done.stderr
    strip = Image.open(out / "imgseqs" / "v1.jpg")
    assert strip.size == (3 * WIDE_TILE, 256)
    tiles = [np.asarray(strip)[:, i * WIDE_TILE:(i + 1) * WIDE_TILE] for i in range(3)]
    assert [colour_of(t) for t in tiles] == ["blue", "red", "yellow"]
    assert json.loads((out / "prompts.json").read_text()) == {
        "v1": ["Dip the brush.", "Paint red.", "Paint yellow."], "v2": ["v2 step 0", "v2 step 1"]}
    assert json.loads((out / "imgseqs" / "v1.json").read_text()) == {
        "id": "v1", "prompts": ["Dip the brush.", "Paint red.", "Paint yellow."], "times": [2.5, 0.5, 5.5],
        "video": colours_video, "title": "How to paint"}
    prompts, squares = official_loader_tiles(out, "v2")
    assert len(squares) == len(prompts) == 2
    assert all(s.shape == (256, 256, 3) for s in squares)
    assert [colour_of(s) for s in squares] == ["green", "white"]
    assert not list(out.rglob("*.tmp"))


def test_a_saved_frame_jpeg_is_used_instead_of_decoding(colours_video, tmp_path):
    saved = tmp_path / "00.jpg"
    Image.new("RGB", (320, 240), (255, 0, 0)).save(saved)  # the video shows black at 4.5 s
    records = [record("v1", colours_video, [("a", 4, str(saved)), ("b", 2, None)])]
    out = tmp_path / "ds"
    export("--out", str(out), "-i", write_jsonl(tmp_path / "in.jsonl", records))
    strip = np.asarray(Image.open(out / "imgseqs" / "v1.jpg"))
    assert [colour_of(strip[:, :WIDE_TILE]), colour_of(strip[:, WIDE_TILE:])] == ["red", "blue"]


def test_skips_are_counted_listed_and_a_malformed_record_exits_3(colours_video, tmp_path):
    upstream = {**plain("failed", colours_video, [0, 1]),
                "errors": [{"stage": "align", "kind": "x", "message": "boom"}]}
    malformed = {"id": "bad", "video": colours_video, "steps": {"items": [{"text": 3, "frame": {"time": 1}}]}}
    records = [plain("ok", colours_video, [0, 1, 2]),
               record("short", colours_video, [("only one", 1, None), ("none", None, None)]),
               upstream, malformed, {"id": "nosteps", "video": colours_video},
               plain("gone", str(tmp_path / "missing.mp4"), [0, 1]),
               "{not json", plain("ok2", colours_video, [4, 5])]
    out = tmp_path / "ds"
    done = export("--out", str(out), "-i", write_jsonl(tmp_path / "in.jsonl", records))
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""
    assert ("2 exported, 1 skipped (too few aligned steps), 1 skipped (upstream errors), 3 malformed, "
            "1 failed (unreadable frames)") in done.stderr
    assert "bad: malformed: steps.items[0].text" in done.stderr
    assert sorted(json.loads((out / "prompts.json").read_text())) == ["ok", "ok2"]
    skipped = {s["id"]: s for s in map(json.loads, (out / "skipped.jsonl").read_text().splitlines())}
    assert len(skipped) == 6
    assert skipped["short"]["reason"] == "too_few_steps"
    assert skipped["failed"]["reason"] == "upstream_error"
    assert skipped["nosteps"]["reason"] == skipped["bad"]["reason"] == "malformed"
    assert skipped["gone"]["reason"] == "missing_media"
    assert [s["reason"] for s in skipped.values() if s["id"].startswith("invalid-line")] == ["malformed"]


def test_webdataset_tars_have_safe_keys_and_respect_maxcount(colours_video, tmp_path):
    ids = ["clip.part1", "a/b c", "v3", "v4", "v5"]
    out = tmp_path / "wds"
    done = export("--out", str(out), "--format", "webdataset", "--maxcount", "2",
                  "-i", write_jsonl(tmp_path / "in.jsonl", [plain(i, colours_video, [0, 5]) for i in ids]))
    assert done.returncode == 0, done.stderr
    tars = sorted(p.name for p in out.iterdir() if p.suffix == ".tar")
    assert tars == ["showhowto-000000.tar", "showhowto-000001.tar", "showhowto-000002.tar"]
    assert not (out / "imgseqs").exists() and not (out / "prompts.json").exists()
    found = {}
    for name in tars:
        with tarfile.open(out / name) as tar:
            names = tar.getnames()
            assert len(names) <= 4
            for member in names:
                key, extension = member.split(".", 1)  # webdataset's own split
                assert extension in ("jpg", "json") and "/" not in key
                if extension == "json":
                    meta = json.load(tar.extractfile(member))
                    found[meta["id"]] = key
                    strip = np.asarray(Image.open(tar.extractfile(f"{key}.jpg")))
                    assert strip.shape == (256, 2 * WIDE_TILE, 3)
                    assert colour_of(strip[:, WIDE_TILE:]) == "yellow"
    assert sorted(found) == sorted(ids)
    assert found["v3"] == "v3" and found["clip.part1"] != found["a/b c"]


def test_resume_after_a_partial_run_exports_each_record_once(colours_video, tmp_path):
    records = [plain(f"v{i}", colours_video, [i % 6, (i + 1) % 6]) for i in range(6)]
    records[1] = record("v1", colours_video, [("one", 1, None)])  # skipped: listed once only
    out = tmp_path / "ds"
    first = export("--out", str(out), "-i", write_jsonl(tmp_path / "half.jsonl", records[:3]))
    assert first.returncode == 0, first.stderr
    (out / "imgseqs" / ".v3.jpg.tmp").write_bytes(b"torn")  # what a kill leaves
    (out / "imgseqs" / "v4.jpg").write_bytes(b"strip whose sidecar never came")
    full = write_jsonl(tmp_path / "all.jsonl", records)
    refused = export("--out", str(out), "-i", full)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    done = export("--out", str(out), "-i", full, "--resume")
    assert done.returncode == 0, done.stderr
    assert "3 already done (resume)" in done.stderr and "3 exported" in done.stderr
    assert sorted(json.loads((out / "prompts.json").read_text())) == ["v0", "v2", "v3", "v4", "v5"]
    assert sorted(p.name for p in (out / "imgseqs").iterdir()) == sorted(
        f"v{i}.{ext}" for i in (0, 2, 3, 4, 5) for ext in ("jpg", "json"))
    assert Image.open(out / "imgseqs" / "v4.jpg").size == (2 * WIDE_TILE, 256)
    again = export("--out", str(out), "-i", full, "--resume")
    assert "0 exported" in again.stderr and "6 already done (resume)" in again.stderr
    assert [json.loads(line)["id"] for line in (out / "skipped.jsonl").read_text().splitlines()] == ["v1"]


def test_webdataset_resume_drops_a_half_tar_and_continues_the_numbering(colours_video, tmp_path):
    records = [plain(f"v{i}", colours_video, [0, 1]) for i in range(5)]
    out = tmp_path / "wds"
    args = ("--out", str(out), "--format", "webdataset", "--maxcount", "2")
    export(*args, "-i", write_jsonl(tmp_path / "half.jsonl", records[:3]))
    assert sorted(p.name for p in out.glob("*.tar")) == ["showhowto-000000.tar", "showhowto-000001.tar"]
    (out / "showhowto-000002.tar.tmp").write_bytes(b"half a tar")
    done = export(*args, "-i", write_jsonl(tmp_path / "all.jsonl", records), "--resume")
    assert done.returncode == 0, done.stderr
    assert "2 exported" in done.stderr and "3 already done (resume)" in done.stderr
    assert sorted(p.name for p in out.iterdir() if "tar" in p.name) == [
        "showhowto-000000.tar", "showhowto-000001.tar", "showhowto-000002.tar"]
    ids = []
    for path in sorted(out.glob("*.tar")):
        with tarfile.open(path) as tar:
            ids += [json.load(tar.extractfile(m))["id"] for m in tar.getmembers() if m.name.endswith(".json")]
    assert sorted(ids) == [f"v{i}" for i in range(5)]


def test_parallel_shards_share_one_prompts_index(colours_video, tmp_path):
    records = [plain(f"v{i}", colours_video, [i % 6, (i + 2) % 6]) for i in range(8)]
    assert {Shard(0, 2).contains(r["id"]) for r in records} == {True, False}  # both shards have work
    source = write_jsonl(tmp_path / "in.jsonl", records)
    out = tmp_path / "ds"
    runs = [subprocess.Popen([VI, "export", "showhowto", "-q", "--out", str(out), "-i", source,
                              "--shard", f"{i}/2"], stderr=subprocess.PIPE, text=True) for i in range(2)]
    for run in runs:
        assert run.wait(timeout=120) == 0, run.stderr.read()
    assert sorted(p.name for p in out.glob("imgseqs*")) == ["imgseqs-0-of-2", "imgseqs-1-of-2"]
    assert sorted(json.loads((out / "prompts.json").read_text())) == [f"v{i}" for i in range(8)]
    assert all(official_loader_tiles(out, f"v{i}")[1][0].shape == (256, 256, 3) for i in range(8))


def test_overwrite_replaces_and_index_only_rebuilds(colours_video, tmp_path):
    out = tmp_path / "ds"
    first = write_jsonl(tmp_path / "a.jsonl", [plain("a", colours_video, [0, 1]), plain("b", colours_video, [2, 3])])
    export("--out", str(out), "-i", first)
    second = write_jsonl(tmp_path / "b.jsonl", [plain("c", colours_video, [4, 5])])
    assert export("--out", str(out), "-i", second).returncode == 2
    assert export("--out", str(out), "-i", second, "--resume", "--overwrite").returncode == 2
    done = export("--out", str(out), "-i", second, "--overwrite")
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "prompts.json").read_text()) == {"c": ["c step 0", "c step 1"]}
    assert sorted(p.name for p in (out / "imgseqs").iterdir()) == ["c.jpg", "c.json"]
    (out / "prompts.json").unlink()
    rebuilt = export("--out", str(out), "--index-only")
    assert rebuilt.returncode == 0 and "1 sequences" in rebuilt.stderr
    assert json.loads((out / "prompts.json").read_text()) == {"c": ["c step 0", "c step 1"]}
    assert export("--out", str(out), "--index-only", "--format", "webdataset").returncode == 2


def test_portrait_frames_become_square_tiles_and_tiles_share_one_width():
    portrait = np.zeros((400, 200, 3), np.uint8)
    portrait[:, :, 1] = 255
    strip = showhowto.make_strip([np.full((240, 320, 3), 200, np.uint8), portrait], height=64)
    assert strip.size == (2 * 64, 64)  # the wide tile is centre-cropped to the narrowest width
    assert colour_of(np.asarray(strip)[:, 64:]) == "green"


def test_safe_keys_and_aligned_sequences():
    assert showhowto.safe_key("dQw4w9WgXcQ_-") == "dQw4w9WgXcQ_-"
    dotted = showhowto.safe_key("clip.part1.jpg")
    assert "." not in dotted and dotted.startswith("clip_part1_jpg-") and dotted != showhowto.safe_key("clip_part1.jpg")
    assert len(showhowto.safe_key("x" * 500)) < 120
    good = plain("v", "/v.mp4", [0, 1])
    assert showhowto.aligned_sequence(good).prompts == ["v step 0", "v step 1"]
    assert showhowto.aligned_sequence(good, min_steps=3).reason == "too_few_steps"
    no_frame_key = {"id": "v", "video": "/v.mp4", "steps": {"items": [{"text": "a"}]}}
    assert "has no 'frame'" in showhowto.aligned_sequence(no_frame_key).detail
    no_video = {**good, "video": None}
    assert showhowto.aligned_sequence(no_video).reason == "malformed"
