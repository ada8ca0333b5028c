"""`vi clips` and `vi pair`: StepDiff's clips from annotations or steps, and same-keystep pairs."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import ffmpeg, jsonl, run_vi, shared
from vi.core.errors import RecordError
from vi.core.records import REJECTED, has_errors
from vi.pipelines.stepdiff import clips, pairing

VIDEO_IDS = ("abc_DEF-1", "_S2X", "xyz")  # youtube ids may hold "_", and start with it


@pytest.fixture(scope="module")
def video_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("videos")
    for video_id in VIDEO_IDS:  # 4 s each
        ffmpeg("-f", "lavfi", "-i", "color=c=red:s=32x32:r=5:d=4", "-pix_fmt", "yuv420p",
               str(root / f"{video_id}.mp4"))
    return root


def errors_of(records: list[dict]) -> dict[str, dict]:
    return {r["id"]: r["errors"][-1] for r in records if has_errors(r)}


# --- clip ids ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("vwDbNixns_4_66.35833_77.7176", ("vwDbNixns_4", 66.35833, 77.7176)),
    ("_S2XKrkHT3k_117.10915_138.07669", ("_S2XKrkHT3k", 117.10915, 138.07669)),
    ("A2cOC62Ui3o_265_294", ("A2cOC62Ui3o", 265.0, 294.0)),
])
def test_clip_ids_split_from_the_right_and_read_back_the_same(text, expected):
    assert clips.parse_clip_id(text) == expected
    assert clips.clip_id(*expected) == text


@pytest.mark.parametrize(("text", "reason"), [
    ("nounderscore", "is not <youtube_id>_<start>_<end>"), ("vid_1.5", "is not <youtube_id>"),
    ("_1_2", "is not <youtube_id>"), ("vid_a_2", "its start 'a'"), ("vid_1_2s", "its end '2s'"),
    ("vid_-1_2", "its start '-1'"), ("vid_1_inf", "its end 'inf'"), (5, "is not <youtube_id>"),
])
def test_a_bad_clip_id_is_refused_with_the_reason(text, reason):
    with pytest.raises(ValueError, match=reason):
        clips.parse_clip_id(text)


def test_every_clip_id_of_the_real_diffrank_benchmark_parses(tmp_path):
    found = clips.benchmark_clips(shared("stepdiff", "diffrank_dataset.jsonl"), tmp_path)
    assert len(found) == 5946 and not errors_of(found)
    assert sum("_" in c["source_id"] for c in found) > 100  # the right split matters
    assert all(clips.clip_id(c["source_id"], c["start"], c["end"]) == c["id"] for c in found)


# --- clips from a benchmark file --------------------------------------------------------------

BENCHMARK = [
    {"reference": "abc_DEF-1_0.5_2.25", "candidate": "_S2X_1_3", "category": "Ingredients", "text": ["x"]},
    {"difference": "d", "options": [["abc_DEF-1_0.5_2.25", "xyz_0_9"], ["missing_1_2", "bad-id"]],
     "answer": ["abc_DEF-1_0.5_2.25", "xyz_0_9"]},
    {"reference": "xyz_1_2", "targets": ["xyz_3_1", "_S2X_1_3"], "category": "Tools", "scores": [1, 2]},
    {"category": "no clip here"},
]


def test_clips_from_a_benchmark_file_are_checked_against_their_videos(video_root, tmp_path):
    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps(row) + "\n" for row in BENCHMARK) + "not json\n")
    done = run_vi("clips", "--from-benchmark", str(bench), "--video-root", str(video_root), "-q")
    assert done.returncode == 3, done.stderr
    out = jsonl(done.stdout)
    good = [r for r in out if not has_errors(r)]
    assert [r["id"] for r in good] == ["abc_DEF-1_0.5_2.25", "_S2X_1_3", "xyz_1_2"]  # each clip once
    assert good[0].pop("provenance")["clips"]["vi"]  # how the stage was configured (docs/records.md)
    assert good[0] == {"id": "abc_DEF-1_0.5_2.25", "video": str(video_root / "abc_DEF-1.mp4"), "start": 0.5,
                       "end": 2.25, "keystep": None, "source_id": "abc_DEF-1", "video_duration": 4.0}
    errors = errors_of(out)
    assert errors["xyz_0_9"]["kind"] == "clip_outside_video" and "4.00 s" in errors["xyz_0_9"]["message"]
    assert errors["missing_1_2"]["kind"] == "missing_media" and "missing.mp4" in errors["missing_1_2"]["message"]
    assert errors["xyz_3_1"]["kind"] == "bad_interval"
    by_kind = {e["kind"]: e["message"] for e in errors.values()}
    assert "line 2, field 'options'" in by_kind["bad_clip_id"] and "'bad-id'" in by_kind["bad_clip_id"]
    assert "line 4 names no clip" in by_kind["missing_field"]
    assert "input line 5" in by_kind["invalid_json"]
    assert len(out) == 9 and all(REJECTED not in r for r in out)


def test_benchmark_clips_take_their_keystep_from_a_segment_file(video_root, tmp_path):
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps(BENCHMARK[0]) + "\n")
    segments = tmp_path / "htstep.csv"  # times printed differently from the clip ids
    segments.write_text("video-id,t-start,t-end,label\nabc_DEF-1,0.500,2.2500,Chop onion\n")
    known, unusable = clips.keystep_lookup(segments)
    found = clips.benchmark_clips(bench, video_root, known)
    assert [c["keystep"] for c in found] == ["Chop onion", None] and unusable == []


# --- clips from a segment file ----------------------------------------------------------------

def test_clips_from_segment_files_in_each_accepted_layout(video_root, tmp_path):
    csv_file = tmp_path / "segments.csv"
    csv_file.write_text("video_id,start_time,end_time,label\nxyz,0,1.5,Chop onion\n_S2X,1,2,Boil water\n"
                        "xyz,0,1.5,Chop onion\nxyz,1,abc,Peel\nxyz,0,1.5,Peel\n")
    found = clips.segment_clips(csv_file, video_root)
    good = [c for c in found if not has_errors(c)]
    assert [(c["id"], c["keystep"], c["video"]) for c in good] == [
        ("xyz_0_1.5", "Chop onion", str(video_root / "xyz.mp4")), ("_S2X_1_2", "Boil water", str(video_root / "_S2X.mp4"))]
    messages = [e["message"] for e in errors_of(found).values()]
    assert any("row 5: end_time is 'abc'" in m for m in messages)
    assert any("row 6: clip xyz_0_1.5 was already read with step 'Chop onion'" in m for m in messages)
    json_file = tmp_path / "segments.json"
    json_file.write_text(json.dumps([{"youtube_id": "abc_DEF-1", "start": 0.5, "end": 2.25, "keystep": "Dice"}]))
    assert clips.segment_clips(json_file, video_root)[0]["id"] == "abc_DEF-1_0.5_2.25"
    jsonl_file = tmp_path / "segments.jsonl"
    jsonl_file.write_text(json.dumps({"video_id": "xyz", "start": 1, "end": 2, "step": "Mix"}) + "\n[1]\n")
    first, second = clips.segment_clips(jsonl_file, video_root)
    assert first["keystep"] == "Mix" and "row 2: not a JSON object" in second["errors"][0]["message"]


def test_annotated_clips_get_the_narration_of_their_videos_transcript(video_root, tmp_path):
    segments = tmp_path / "segments.csv"
    segments.write_text("video_id,start,end,step\nxyz,0.45,1.2,Chop onion\n_S2X,1,2,Boil water\nxyz,2,3.9,Boil\n")
    transcripts = tmp_path / "transcripts.jsonl"
    transcripts.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "some-probe-id", "video": str(video_root / "xyz.mp4"), "transcript": TRANSCRIPT},  # by file name
        {"id": "_S2X", "video": "/elsewhere/other.mp4", "transcript": {"segments": [{"start": 0, "end": "x"}]}},
        {"id": "nope", "errors": [{"stage": "transcribe", "kind": "unreadable_media", "message": "..."}]},
        {"id": "nope", "video": str(video_root / "xyz.mp4"), "transcript": TRANSCRIPT}]))  # xyz's first one wins
    done = run_vi("clips", "--from-segments", str(segments), "--video-root", str(video_root), "--transcripts",
                  str(transcripts), "-q")
    out = {r["id"]: r for r in jsonl(done.stdout)}
    assert out["xyz_0.45_1.2"]["narration"] == "chop the onion." and out["xyz_2_3.9"]["narration"] == "Then boil water."
    assert "transcript of _S2X" in out["_S2X_1_2"]["errors"][-1]["message"]  # a malformed one: named, not skipped
    plain = jsonl(run_vi("clips", "--from-segments", str(segments), "--video-root", str(video_root), "-q").stdout)
    assert all("narration" not in r for r in plain)
    refused = run_vi("clips", "--transcripts", str(transcripts), stdin="")
    assert refused.returncode == 2 and "--transcripts gives narration to --from-benchmark" in refused.stderr


def test_a_segment_file_without_the_needed_columns_is_refused_before_any_record(video_root, tmp_path):
    bad = tmp_path / "segments.csv"
    bad.write_text("vid,begin,end,label\nxyz,0,1,Chop\n")
    done = run_vi("clips", "--from-segments", str(bad), "--video-root", str(video_root), "-q")
    assert done.returncode == 2 and done.stdout == ""
    assert "no column for the video (video_id or youtube_id or video-id), the start (" in done.stderr
    assert "found: vid, begin, end, label" in done.stderr
    with pytest.raises(ValueError, match="must be .csv, .tsv, .json or .jsonl"):
        clips.segment_clips(tmp_path / "segments.xlsx", video_root)


# --- clips from vi extract-steps records ------------------------------------------------------

def steps_record(record_id: str, video: Path, items: list[tuple[str, float, float]], **extra) -> dict:
    return {"id": record_id, "video": str(video), "duration": 4.0, **extra,
            "steps": {"title": "How to", "items": [{"text": t, "start": s, "end": e} for t, s, e in items]}}


TRANSCRIPT = {"segments": [
    {"start": 0.0, "end": 1.5, "text": "First chop the onion.", "words": [
        {"word": "First", "start": 0.0, "end": 0.4}, {"word": "chop", "start": 0.5, "end": 0.8},
        {"word": "the", "start": 0.8, "end": 1.0}, {"word": "onion.", "start": 1.0, "end": 1.5}]},
    {"start": 1.5, "end": 2.5, "text": "[Music]"},
    {"start": 2.5, "end": 4.0, "text": "Then boil water."}]}


def test_each_step_becomes_a_clip_with_the_narration_spoken_during_it(video_root):
    record = steps_record("v1", video_root / "xyz.mp4", [("Chop the onion", 0.45, 1.2), ("Boil water", 2.0, 3.9),
                                                         ("Wait", 1.6, 2.4)], transcript=TRANSCRIPT)
    out = list(clips.step_clips([record]))
    assert out[0] == {"id": "v1_0.45_1.2", "video": str(video_root / "xyz.mp4"), "start": 0.45, "end": 1.2,
                      "keystep": "Chop the onion", "source_id": "v1", "step_index": 0,
                      "narration": "chop the onion.", "video_duration": 4.0}
    assert out[1]["narration"] == "Then boil water."  # a segment without word times: all of it
    assert out[2]["narration"] == ""  # only music under it


def test_a_word_stretched_into_the_next_clip_stays_with_its_own(video_root):
    stretched = {"segments": [{"start": 0.0, "end": 3.5, "text": "Use a peeler. And slice.", "words": [
        {"word": "Use", "start": 0.0, "end": 0.3}, {"word": "a", "start": 0.3, "end": 0.4},
        {"word": "peeler.", "start": 0.5, "end": 2.04},  # Whisper's DTW ran it into the pause
        {"word": "And", "start": 2.6, "end": 2.8}, {"word": "slice.", "start": 2.8, "end": 3.5}]}]}
    record = steps_record("v1", video_root / "xyz.mp4", [("Peel", 0.0, 1.9), ("Slice", 2.0, 3.6)], transcript=stretched)
    assert [c["narration"] for c in clips.step_clips([record])] == ["Use a peeler.", "And slice."]
    assert "narration" not in next(clips.step_clips([steps_record("v2", video_root, [("Mix", 0, 1)])]))


def test_a_record_that_yields_no_clip_is_an_error_record_and_upstream_errors_pass(video_root):
    upstream = {"id": "e", "errors": [{"stage": "transcribe", "kind": "x", "message": "y"}]}
    no_steps = {"id": "n", "video": str(video_root / "xyz.mp4")}
    bad_transcript = steps_record("t", video_root / "xyz.mp4", [("Mix", 0, 1)],
                                  transcript={"segments": [{"start": "soon", "end": 1, "text": "hi"}]})
    out = list(clips.step_clips([upstream, no_steps, bad_transcript]))
    assert out[0] == upstream
    assert out[1]["errors"][-1]["kind"] == "missing_field" and "steps.items" in out[1]["errors"][-1]["message"]
    assert out[2]["errors"][-1]["kind"] == "bad_transcript" and out[1][REJECTED] and out[2][REJECTED]


def test_each_video_is_probed_once_and_a_known_duration_is_not_probed(video_root, monkeypatch):
    probed = []
    real_probe = clips.media.probe
    monkeypatch.setattr(clips.media, "probe", lambda path: probed.append(path) or real_probe(path))
    lengths = clips.VideoLengths()
    video = str(video_root / "xyz.mp4")
    for start in (0.0, 1.0, 2.0):
        assert clips.check_clip({"id": "c", "video": video, "start": start, "end": 3.0}, lengths, 0.5) == {
            "video_duration": 4.0}
    clips.check_clip({"id": "c", "video": str(video_root / "_S2X.mp4"), "start": 0, "end": 4.4,
                      "video_duration": 4.0}, lengths, 0.5)
    assert probed == [video]
    with pytest.raises(RecordError, match="ends at 4.6 s"):
        clips.check_clip({"id": "c", "video": video, "start": 0, "end": 4.6}, lengths, 0.5)


# --- pairs ------------------------------------------------------------------------------------

def clip(clip_id: str, video: str, keystep, **extra) -> dict:
    return {"id": clip_id, "video": f"/v/{video}.mp4", "start": 0.0, "end": 1.0, "keystep": keystep,
            "source_id": video, **extra}


ONION = [clip("a1", "v1", "Chop onion"), clip("a1b", "v1", "chop  ONION"), clip("a2", "v2", "Chop onion"),
         clip("a3", "v3", "Chop onion")]
WATER = [clip(f"w{i}", f"v{i}", "Boil water") for i in range(1, 7)]


def pair_ids(pairs: list[dict]) -> set[tuple[str, str]]:
    return {(p["reference"]["id"], p["candidate"]["id"]) for p in pairs}


def test_pairs_join_the_same_keystep_from_distinct_videos_only():
    pairs, counts = pairing.plan_pairs(ONION + [clip("x", "v4", "Peel")], pairing.PairConfig())
    unordered = {frozenset(p) for p in pair_ids(pairs)}
    assert unordered == {frozenset(p) for p in [("a1", "a2"), ("a1", "a3"), ("a1b", "a2"), ("a1b", "a3"),
                                                ("a2", "a3")]}
    assert len(pairs) == 5 and counts.alone == 1 and counts.groups == 2
    assert all(p["id"] == f"{p['reference']['id']}__{p['candidate']['id']}" for p in pairs)
    assert {p["keystep"] for p in pairs} == {"Chop onion"} and "similarity" not in pairs[0]
    ordered, _ = pairing.plan_pairs(ONION, pairing.PairConfig(order="ordered"))
    assert pair_ids(ordered) == pair_ids(pairs) | {(b, a) for a, b in pair_ids(pairs)} and len(ordered) == 10


def test_the_reference_of_an_unordered_pair_is_a_seeded_coin_not_the_id_order():
    pairs, _ = pairing.plan_pairs(WATER, pairing.PairConfig(seed=1))
    sorted_first = [p["reference"]["id"] < p["candidate"]["id"] for p in pairs]
    assert len(pairs) == 15 and 0 < sum(sorted_first) < 15
    again, _ = pairing.plan_pairs(list(reversed(WATER)), pairing.PairConfig(seed=1))
    assert again == pairs  # input order does not matter


def test_max_pairs_sampling_is_seeded_per_keystep_and_independent_of_other_keysteps():
    capped = pairing.PairConfig(max_pairs_per_keystep=4, seed=7)
    alone, _ = pairing.plan_pairs(WATER, capped)
    salt = [clip(f"s{i}", f"v{i}", "Add salt") for i in range(1, 5)]  # a group sampled before water's
    mixed = random.Random(0).sample(WATER + ONION + salt, len(WATER + ONION + salt))
    together, _ = pairing.plan_pairs(mixed, capped)
    water = [p for p in together if p["keystep"] == "Boil water"]
    assert water == alone and len(alone) == 4
    every, _ = pairing.plan_pairs(WATER, pairing.PairConfig(seed=7))
    assert pair_ids(alone) <= pair_ids(every)
    other_seeds = {frozenset(pair_ids(pairing.plan_pairs(WATER, pairing.PairConfig(max_pairs_per_keystep=4,
                                                                                    seed=s))[0])) for s in range(5)}
    assert len(other_seeds) > 1


def test_random_order_is_a_permutation_drawn_lazily():
    order = list(pairing.random_order(500, random.Random(3)))
    assert sorted(order) == list(range(500)) and order != list(range(500))
    assert list(pairing.random_order(0, random.Random(3))) == []


def test_error_clips_pass_through_and_a_clip_without_keystep_becomes_an_error():
    upstream = {"id": "bad", "errors": [{"stage": "clips", "kind": "missing_media", "message": "m"}]}
    usable, passing = pairing.split_clips([upstream, clip("n", "v1", None), *ONION, ONION[0]])
    assert usable == ONION and passing[0] == upstream
    assert passing[1]["errors"][-1]["kind"] == "missing_field" and passing[1][REJECTED]


def test_leader_clustering_does_not_chain_and_embeds_each_keystep_once():
    # B is near A (0.77) and nearer C (0.85); A and C are far apart (0.32). Connected
    # components would put all three in one group; leader clustering keeps A and C apart.
    to_a, to_c = math.acos(0.77), math.acos(0.85)
    unit = {"A": (1.0, 0.0), "B": (math.cos(to_a), math.sin(to_a)),
            "C": (math.cos(to_a + to_c), math.sin(to_a + to_c))}
    asked = []

    def embed(texts):
        asked.append(list(texts))
        return np.array([unit[t.upper()] for t in texts], dtype=np.float32)

    found = [clip("a1", "v1", "A"), clip("a2", "v2", "a"), clip("b", "v3", "B"), clip("c", "v4", "C"),
             clip("c2", "v5", "C"), clip("c3", "v6", "C")]
    pairs, counts = pairing.plan_pairs(found, pairing.PairConfig(match="embedding"), embed=embed)
    assert asked == [["C", "A", "B"]]  # each distinct keystep once, most frequent first
    assert counts.groups == 2 and len(pairs) == 1 + 6
    by_group = {k: {c for p in pairs if p["keystep"] == k for c in (p["reference"]["id"], p["candidate"]["id"])}
                for k in ("A", "C")}
    assert by_group == {"A": {"a1", "a2"}, "C": {"b", "c", "c2", "c3"}}
    b_pairs = [p["similarity"] for p in pairs if "b" in p["id"].split("__")]
    assert b_pairs == [pytest.approx(0.85, abs=1e-4)] * 3


@pytest.mark.slow
def test_embedding_match_pairs_paraphrased_keysteps_with_the_real_minilm():
    config = pairing.PairConfig(match="embedding", device="cpu")
    found = [clip("c", "v1", "chop the onion"), clip("d", "v2", "dice the onion"), clip("b", "v3", "boil water"),
             clip("c2", "v4", "chop the onion")]
    pairs, counts = pairing.plan_pairs(found, config)
    assert {frozenset(p) for p in pair_ids(pairs)} == {frozenset(p) for p in [("c", "d"), ("c", "c2"), ("d", "c2")]}
    assert counts.groups == 2 and counts.alone == 1  # boil water has no partner
    assert {p["keystep"] for p in pairs} == {"chop the onion"}  # the most frequent keystep leads
    onion = next(p for p in pairs if {p["reference"]["id"], p["candidate"]["id"]} == {"c", "d"})
    assert 0.75 <= onion["similarity"] < 0.9
    strict, _ = pairing.plan_pairs(found, pairing.PairConfig(match="embedding", threshold=0.9, device="cpu"))
    assert {frozenset(p) for p in pair_ids(strict)} == {frozenset(("c", "c2"))}
    # near duplicates: the same scene described twice is skipped, a real difference is kept
    described = [clip("p", "v1", "Chop onion", description={"step": "Chop a red onion finely on a board."}),
                 clip("q", "v2", "Chop onion", description="Finely chop a red onion on a board."),
                 clip("r", "v3", "Chop onion", narration="now I use a food processor for the shallots")]
    kept, counts = pairing.plan_pairs(described, pairing.PairConfig(dedupe_threshold=0.9, device="cpu"))
    assert {frozenset(p) for p in pair_ids(kept)} == {frozenset(("p", "r")), frozenset(("q", "r"))}
    assert counts.near_duplicates == 1 and all(p["description_similarity"] <= 0.9 for p in kept)


# --- the command line -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def steps_file(video_root, tmp_path_factory) -> Path:
    records = [steps_record(f"v{i}", video_root / f"{video}.mp4",
                            [("Chop onion", 0.5, 1.5), ("Boil water", 2, 3.5)], transcript=TRANSCRIPT)
               for i, video in enumerate(VIDEO_IDS)]
    records.append(steps_record("gone", video_root / "gone.mp4", [("Chop onion", 0, 1)]))
    path = tmp_path_factory.mktemp("steps") / "steps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_clips_then_pair_end_to_end(steps_file):
    made = run_vi("clips", "-i", str(steps_file), "-q")
    assert made.returncode == 3 and "gone.mp4: no such file" in made.stderr
    paired = run_vi("pair", "-q", stdin=made.stdout)
    assert paired.returncode == 0, paired.stderr
    out = jsonl(paired.stdout)
    assert [r["id"] for r in out if has_errors(r)] == ["gone_0_1"]  # the error clip, passed through
    pairs = [r for r in out if not has_errors(r)]
    assert len(pairs) == 6 and {p["keystep"] for p in pairs} == {"Chop onion", "Boil water"}
    assert all(p["reference"]["source_id"] != p["candidate"]["source_id"] for p in pairs)
    assert pairs[0]["reference"]["narration"] in ("chop the onion.", "Then boil water.")
    assert "6 pairs" in paired.stderr and "1 records passed through" in paired.stderr


def test_pair_shards_partition_the_pairs_and_resume_finishes_exactly_once(steps_file, tmp_path):
    clips_file = tmp_path / "clips.jsonl"
    run_vi("clips", "-i", str(steps_file), "-o", str(clips_file), "-q")
    full = run_vi("pair", "-i", str(clips_file), "-q", "--order", "ordered", check=True).stdout
    shards = [jsonl(run_vi("pair", "-i", str(clips_file), "-q", "--order", "ordered", "--shard", f"{i}/3",
                           check=True).stdout) for i in range(3)]
    ids = [r["id"] for shard in shards for r in shard]
    assert sorted(ids) == sorted(r["id"] for r in jsonl(full)) and len(ids) == len(set(ids)) == 13
    out = tmp_path / "pairs.jsonl"
    lines = full.splitlines(keepends=True)
    out.write_text("".join(lines[:5]) + lines[5][:40])  # killed mid-line
    resumed = run_vi("pair", "-i", str(clips_file), "-q", "--order", "ordered", "-o", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(out.read_text().splitlines()) == sorted(full.splitlines())


def test_clips_shards_partition_the_clips(steps_file):
    full = jsonl(run_vi("clips", "-i", str(steps_file), "-q").stdout)
    shards = [jsonl(run_vi("clips", "-i", str(steps_file), "-q", "--shard", f"{i}/2").stdout) for i in range(2)]
    assert sorted(r["id"] for s in shards for r in s) == sorted(r["id"] for r in full) and len(full) == 7
