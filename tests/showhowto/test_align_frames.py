"""`vi align-frames`: the order-preserving choice against brute force, candidate windows at
the video's edges, decoding and encoding each frame once, the saved JPEGs, error records, and
the command end to end on a generated video with a tiny open_clip model."""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import jsonl, run_vi
from test_frame_scorers import make_tiny_clip
from vi.core import media
from vi.core.errors import RecordError
from vi.pipelines.showhowto import align_frames
from vi.pipelines.showhowto.align_frames import AlignConfig, align_record, candidate_times, order_preserving_choice

# --- the choice: exact, against brute force ---------------------------------------------


def brute_force(candidates):
    """The best (count, score) over every assignment, by enumeration."""
    best = (0, 0.0)
    for picks in itertools.product(*[[None, *range(len(c))] for c in candidates]):
        times = [candidates[i][p][0] for i, p in enumerate(picks) if p is not None]
        if all(a < b for a, b in itertools.pairwise(times)):
            score = sum(candidates[i][p][1] for i, p in enumerate(picks) if p is not None)
            value = (len(times), score)
            if value[0] > best[0] or (value[0] == best[0] and value[1] > best[1] + 1e-12):
                best = value
    return best


def value_of(candidates, chosen):
    picked = [(i, candidates[i][c]) for i, c in enumerate(chosen) if c is not None]
    times = [t for _, (t, _) in picked]
    assert all(a < b for a, b in itertools.pairwise(times)), f"order broken: {times}"
    return len(picked), sum(s for _, (_, s) in picked)


def random_instance(rng: random.Random):
    steps, span = rng.randint(1, 5), rng.randint(1, 6)
    integer_scores = rng.random() < 0.3  # many ties
    instance = []
    for _ in range(steps):
        times = sorted(rng.sample(range(span), rng.randint(0, span)))
        instance.append([(float(t), float(rng.randint(-2, 3)) if integer_scores else rng.uniform(-1, 1))
                         for t in times])
    return instance


def test_the_choice_is_optimal_on_two_thousand_random_instances():
    rng = random.Random(1234)
    for trial in range(2000):
        candidates = random_instance(rng)
        chosen = order_preserving_choice(candidates)
        assert len(chosen) == len(candidates)
        count, score = value_of(candidates, chosen)
        best_count, best_score = brute_force(candidates)
        assert count == best_count, (trial, candidates, chosen)
        assert math.isclose(score, best_score, abs_tol=1e-9), (trial, candidates, chosen)


def test_overlapping_windows_keep_the_steps_in_order_even_against_their_scores():
    # Both steps see the same frames, and each scores best where the other should be: a
    # per-step argmax would pick 3.0 for the first and 0.0 for the second.
    times = [0.0, 1.0, 2.0, 3.0]
    first = list(zip(times, (0.1, 0.2, 0.3, 0.9)))
    second = list(zip(times, (0.8, 0.2, 0.5, 0.0)))
    chosen = order_preserving_choice([first, second])
    assert chosen == [1, 2]  # 1.0 then 2.0: 0.2 + 0.5, the best pair in order
    assert value_of([first, second], chosen) == brute_force([first, second])


def test_too_few_frames_align_as_many_steps_as_possible_and_leave_the_rest_null():
    window = [(5.0, 0.0), (6.0, 0.0)]
    candidates = [[(5.0, 0.9), (6.0, 0.1)], [(5.0, 0.1), (6.0, 0.2)], [(5.0, 0.5), (6.0, 0.8)]]
    chosen = order_preserving_choice(candidates)
    assert sum(c is not None for c in chosen) == 2
    assert chosen == [0, None, 1]  # 0.9 + 0.8: the middle step gives way
    # a step with no candidates is null and costs the others nothing
    assert order_preserving_choice([window, [], window]) == [0, None, 1]
    assert order_preserving_choice([]) == [] and order_preserving_choice([[], []]) == [None, None]


def test_more_steps_aligned_beats_a_higher_score():
    # One step alone could score 5; two steps in order score 0.2 in all: two steps win.
    candidates = [[(1.0, 0.1), (2.0, 5.0)], [(2.0, 0.1)]]
    assert order_preserving_choice(candidates) == [0, 0]


# --- candidate windows --------------------------------------------------------------------

def test_candidates_are_the_fps_grid_inside_the_widened_interval():
    assert candidate_times(10.2, 11.5, fps=1, eps=2, duration=60) == [9.0, 10.0, 11.0, 12.0, 13.0]
    assert candidate_times(10.0, 11.0, fps=2, eps=0, duration=60) == [10.0, 10.5, 11.0]  # ends included
    assert candidate_times(1.0, 1.2, fps=1, eps=0, duration=60) == [1.0]
    assert candidate_times(1.1, 1.2, fps=1, eps=0, duration=60) == []  # no grid point inside


def test_a_video_shorter_than_eps_offers_every_frame_and_a_step_outside_it_none():
    assert candidate_times(1.0, 2.0, fps=1, eps=15, duration=4.0) == [0.0, 1.0, 2.0, 3.0]
    assert candidate_times(30.0, 40.0, fps=1, eps=5, duration=20.0) == []
    assert candidate_times(22.0, 40.0, fps=1, eps=5, duration=20.0) == [17.0, 18.0, 19.0]


# --- the stage, in process ----------------------------------------------------------------

def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-y", "-v", "error", *args], check=True)


@pytest.fixture(scope="module")
def clip_video(tmp_path_factory) -> Path:
    """12 s of a moving test pattern, 320x180 at 10 fps: every frame differs."""
    out = tmp_path_factory.mktemp("align") / "pattern.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=320x180:rate=10:duration=12", "-c:v", "libx264",
           "-preset", "veryfast", "-pix_fmt", "yuv420p", str(out))
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    return make_tiny_clip(tmp_path_factory.mktemp("tiny_clip"))


def record(video: Path, spans, **extra) -> dict:
    return {"id": "pattern", "video": str(video), **extra,
            "steps": {"title": "A test", "lang": "en",
                      "items": [{"text": f"step {i}", "start": s, "end": e, "note": i} for i, (s, e) in enumerate(spans)]}}


def test_each_distinct_frame_is_decoded_once_and_encoded_once(clip_video, tiny, monkeypatch):
    config = AlignConfig(model=str(tiny["repo"]), fps=2, eps=1.5, device="cpu")
    asked, encoded = [], []
    real_read = media.read_frames
    monkeypatch.setattr(media, "read_frames", lambda path, times, w=-1, h=-1: (asked.extend(times),
                                                                              real_read(path, times, w, h))[1])
    scorer = align_frames.scorer_for(config.scorer, config.placement, config.batch_size)
    real_encode = scorer.encode_frames
    monkeypatch.setattr(scorer, "encode_frames", lambda frames: (encoded.append(len(frames)), real_encode(frames))[1])
    spans = [(1.0, 3.0), (2.0, 4.0), (3.5, 5.0), (9.0, 9.5)]  # overlapping windows share frames
    out = align_record(record(clip_video, spans, duration=12.0, width=320, height=180), config)
    union = sorted({t for s, e in spans for t in candidate_times(s, e, 2, 1.5, 12.0)})
    assert asked == union and len(asked) == len(set(asked))  # only needed frames, each once
    assert sum(encoded) == len(union) == out["alignment"]["candidates"]
    frames = [item["frame"] for item in out["steps"]["items"]]
    assert all(f is not None for f in frames) and out["alignment"]["unaligned"] == 0
    times = [f["time"] for f in frames]
    assert times == sorted(set(times))  # strictly increasing
    for (s, e), t in zip(spans, times):
        assert s - 1.5 <= t <= e + 1.5


def test_a_video_shorter_than_eps_gives_its_few_frames_to_as_many_steps_as_it_can(tmp_path, tiny):
    short = tmp_path / "short.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=160x120:rate=25:duration=2.6", "-c:v", "libx264",
           "-preset", "veryfast", "-pix_fmt", "yuv420p", str(short))
    config = AlignConfig(model=str(tiny["repo"]), fps=1, eps=15, device="cpu")
    out = align_record(record(short, [(0.2, 0.8), (0.9, 1.5), (1.6, 2.0), (2.1, 2.5)]), config)
    frames = [item["frame"] for item in out["steps"]["items"]]
    assert out["alignment"]["candidates"] == 3  # 0, 1 and 2 s: every frame at 1 fps, no more
    assert sum(f is None for f in frames) == 1 == out["alignment"]["unaligned"]
    times = [f["time"] for f in frames if f is not None]
    assert times == [0.0, 1.0, 2.0]


def test_the_output_keeps_every_other_key_and_adds_frame_and_alignment(clip_video):
    config = AlignConfig(model="random", fps=1, eps=0, seed=3)
    given = record(clip_video, [(1.0, 2.0), (30.0, 31.0)], duration=12.0)
    out = align_record(given, config)
    assert set(out) == {"steps", "alignment"}
    assert out["steps"]["title"] == "A test" and out["steps"]["lang"] == "en"
    for item, before in zip(out["steps"]["items"], given["steps"]["items"]):
        assert {k: v for k, v in item.items() if k != "frame"} == before
    assert out["steps"]["items"][0]["frame"]["time"] in (1.0, 2.0)
    assert out["steps"]["items"][1]["frame"] is None  # outside the 12 s video
    assert out["alignment"] == {"model": "random", "fps": 1.0, "eps": 0.0, "candidates": 2, "unaligned": 1}
    assert "frame" not in given["steps"]["items"][0]  # the input record is not modified
    assert align_record(given, config) == out  # same seed, same output


def test_frames_dir_holds_the_chosen_frames_at_full_size(clip_video, tmp_path):
    from PIL import Image

    config = AlignConfig(model="random", fps=1, eps=0.5, frames_dir=tmp_path / "frames")
    spans = [(1.0, 2.0), (4.0, 5.0), (50.0, 51.0)]
    given = record(clip_video, spans) | {"id": "a/b c"}  # an id that is no folder name
    out = align_record(given, config)
    items = out["steps"]["items"]
    folder = Path(items[0]["frame"]["path"]).parent
    assert folder.parent == (tmp_path / "frames").resolve() and "/" not in folder.name
    assert [Path(i["frame"]["path"]).name for i in items[:2]] == ["00.jpg", "01.jpg"]
    assert items[2]["frame"] is None and not (folder / "02.jpg").exists()
    assert sorted(p.name for p in folder.iterdir()) == ["00.jpg", "01.jpg"]  # no temporary files
    for item in items[:2]:
        image = Image.open(item["frame"]["path"])
        assert image.format == "JPEG" and image.size == (320, 180)
        decoded = media.read_frames(clip_video, [item["frame"]["time"]])[0].astype(int)
        assert np.abs(np.asarray(image).astype(int) - decoded).mean() < 8  # that very frame


@pytest.mark.parametrize("change,kind,words", [
    (lambda r: r.pop("steps"), "missing_field", "no 'steps' object"),
    (lambda r: r["steps"].update(items=[]), "missing_field", "'steps.items' is empty"),
    (lambda r: r["steps"]["items"][1].pop("start"), "missing_field", "steps.items[1] has no 'start'"),
    (lambda r: r["steps"]["items"][0].update(end="12s"), "bad_field", "steps.items[0].end is '12s'"),
    (lambda r: r["steps"]["items"][0].update(end=True), "bad_field", "steps.items[0].end is True"),
    (lambda r: r["steps"]["items"][1].update(start=9.0), "bad_field", "steps.items[1] starts at 9.0 s"),
    (lambda r: r["steps"]["items"][0].pop("text"), "missing_field", "steps.items[0] has no 'text'"),
    (lambda r: r.update(duration="long"), "bad_field", "'duration' is 'long'"),
    (lambda r: r.pop("video"), "missing_field", "no 'video' path"),
    (lambda r: r.update(video="/nonexistent/v.mp4"), "missing_media", "no such file"),
])
def test_bad_input_is_a_record_error_that_names_the_field(clip_video, change, kind, words):
    given = record(clip_video, [(1.0, 2.0), (3.0, 4.0)])
    change(given)
    with pytest.raises(RecordError) as caught:
        align_record(given, AlignConfig(model="random"))
    assert caught.value.kind == kind and words in caught.value.message


def test_an_unreadable_video_is_a_record_error(tmp_path, tiny):
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00" * 1000)
    with pytest.raises(RecordError) as caught:
        align_record(record(broken, [(1.0, 2.0)]), AlignConfig(model=str(tiny["repo"])))
    assert caught.value.kind == "unreadable_media" and str(broken) in caught.value.message


@pytest.mark.parametrize("options,words", [
    ({"fps": 0}, "--fps"), ({"eps": -1}, "--eps"), ({"fps": float("nan")}, "--fps"),
    ({"batch_size": 0}, "--batch-size"), ({"dtype": "fp8"}, "--dtype")])
def test_bad_options_fail_when_the_config_is_built(options, words):
    with pytest.raises(ValueError, match=words):
        AlignConfig(model="random", **options)


# --- the command --------------------------------------------------------------------------

def test_the_command_end_to_end_with_a_clip_checkpoint_and_frames_dir(clip_video, tiny, tmp_path):
    records = tmp_path / "in.jsonl"
    good = record(clip_video, [(0.5, 2.0), (2.5, 6.0), (7.0, 11.0), (40.0, 45.0)])
    bad = {"id": "no-steps", "video": str(clip_video)}
    records.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    out = tmp_path / "out.jsonl"
    done = run_vi("align-frames", "-q", "-i", str(records), "-o", str(out), "--model", str(tiny["checkpoint"]),
                  "--clip-arch", str(tiny["arch"]), "--eps", "1", "--fps", "2", "--frames-dir",
                  str(tmp_path / "frames"), "--batch-size", "3", timeout=300)
    assert done.returncode == 3, done.stderr  # one record failed, the other did not
    aligned, failed = jsonl(out.read_text())
    assert failed["id"] == "no-steps" and failed["errors"][0]["stage"] == "align-frames"
    assert "run vi extract-steps first" in failed["errors"][0]["message"]
    frames = [item["frame"] for item in aligned["steps"]["items"]]
    assert frames[3] is None and aligned["alignment"]["unaligned"] == 1
    assert aligned["alignment"]["model"] == str(tiny["checkpoint"])
    times = [f["time"] for f in frames[:3]]
    assert times == sorted(set(times)) and all(Path(f["path"]).is_file() for f in frames[:3])
    assert all(isinstance(f["score"], float) and -1 <= f["score"] <= 1 for f in frames[:3])


def test_the_command_refuses_bad_options_and_missing_models_before_any_record(clip_video, tmp_path):
    stdin = json.dumps(record(clip_video, [(1.0, 2.0)])) + "\n"
    done = run_vi("align-frames", "-q", "--fps", "0", stdin=stdin, timeout=120)
    assert done.returncode == 2 and "--fps" in done.stderr and done.stdout == ""
    done = run_vi("align-frames", "-q", "--model", "hf-hub:nobody-vi-test/no-such-clip", stdin=stdin, timeout=120)
    assert done.returncode == 5 and "hf download nobody-vi-test/no-such-clip" in " ".join(done.stderr.split())
    assert done.stdout == ""


# --- quality on the bundled how-to samples ------------------------------------------------

@pytest.mark.slow
def test_the_offline_scorer_finds_the_photo_of_a_step_far_more_often_than_chance(tmp_path_factory):
    from vi.evaluation.showhowto.align_quality import align_quality
    from vi.evaluation.demo.samples import PHOTOS

    if not PHOTOS.exists():
        pytest.skip(f"{PHOTOS} is absent: install the Debian package opencv-doc (make install does)")
    labels, chance = align_quality(tmp_path_factory.mktemp("howto"), ["imagenet-labels"], seeds=20, device="cpu")
    assert (labels.model, chance.model, chance.runs) == ("imagenet-labels", "random", 20)
    assert labels.photo_steps == chance.photo_steps == 8 and labels.steps == 10
    assert labels.photo_hit_rate >= 0.75, labels  # 7 of 8 when this was written
    assert labels.photo_hit_rate >= chance.photo_hit_rate + 0.35, (labels, chance)
    assert labels.hit_rate > chance.hit_rate
