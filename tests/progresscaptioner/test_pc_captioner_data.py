"""vi captioner-data: judged records (built by hand, several captioners each, some messy) into SFT/DPO samples.
The rules of ProgressCaptioner's Stage I (pairs) and II (sequences), duplicates, the split by video, the
content-addressed images, the prompt and completion text, and the command end to end. No models."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import jsonl, run_vi
from vi.pipelines.common.chat_prompt import load_prompt
from vi.pipelines.progresscaptioner import captioner_data as cd
from vi.pipelines.progresscaptioner.frame_replies import parse_frame_replies

COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30), (30, 200, 200), (200, 30, 200),
           (90, 90, 90)]


def frames(folder: Path, count: int, name: str = "f") -> list[dict]:
    """`count` small JPEGs of distinct colours (the same colours under another name are the same bytes)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        path = folder / f"{name}{i}.jpg"
        Image.new("RGB", (32, 24), COLOURS[i]).save(path, quality=90)
        out.append({"time": float(i), "path": str(path)})
    return out


def caps(texts: list[str | None], model: str = "m") -> dict:
    return {"model": model, "kind": "test", "window": "full", "prompt": "progress_caption",
            "items": [{"frame": i, "text": t} for i, t in enumerate(texts) if t is not None], "repairs": []}


def pair(rid: str, fr: list[dict], fields: dict[str, tuple[list, bool, list[bool]]], **extra) -> dict:
    """A judged 2-frame record: per field (captions, passed progression, correct per matched frame)."""
    record = {"id": rid, "frames": fr, "action": "cutting an onion", "source": "COIN", **extra}
    for name, (texts, _, _) in fields.items():
        record[name] = caps(texts, model=f"model-{name}")
    record["matching"] = {name: {"frames": [{"frame": f, "correct": c} for f, c in enumerate(correct)],
                                 "verdict": "good" if all(correct) else "neither"}
                          for name, (_, _, correct) in fields.items()}
    record["progression"] = {"pairs": [{"frames": [0, 1], "consensus": "B", "change": True,
                                        "passed": {name: p for name, (_, p, _) in fields.items()}}],
                             "distinct": [0, 1]}
    return record


def sequence(rid: str, fr: list[dict], fields: dict[str, tuple[list, str]], **extra) -> dict:
    """A judged 3-6 frame record: per field (captions, matching verdict)."""
    record = {"id": rid, "frames": fr, "action": "making tea", "source": "HTC", **extra}
    for name, (texts, _) in fields.items():
        record[name] = caps(texts, model=f"model-{name}")
    record["matching"] = {name: {"frames": [], "verdict": verdict} for name, (_, verdict) in fields.items()}
    record["progression"] = {"pairs": [], "distinct": list(range(len(fr)))}
    return record


def build(tmp_path: Path, records: list[dict], name: str = "out", **options) -> tuple[cd.Summary, list, list]:
    out = tmp_path / name
    summary = cd.build_dataset(records, out, cd.CaptionerDataConfig(**options))
    return summary, jsonl((out / "sft.jsonl").read_text()), jsonl((out / "dpo.jsonl").read_text())


def completion(sample: dict, key: str = "completion") -> str:
    return sample[key][0]["content"][0]["text"]


def test_pair_rules_chosen_needs_progression_and_matching(tmp_path):
    fr = frames(tmp_path / "p", 2)
    record = pair("vid1/w0-1", fr, {
        "captions": (["A hand holds a whole onion.", "The onion is cut in half."], True, [True, True]),
        "captions_wrongmatch": (["An onion on a board.", "An onion on a board, cut."], True, [True, False]),
        "captions_noprog": (["A knife.", "A knife and onion halves."], False, [True, True]),
        "captions_both": (["A kitchen.", "A kitchen again."], False, [False, False]),
    })
    summary, sft, dpo = build(tmp_path, [record])
    assert [s["id"] for s in sft] == ["vid1/w0-1:captions"]
    assert sft[0]["captioner"] == {"field": "captions", "model": "model-captions"}
    assert sft[0]["kind"] == "pair" and sft[0]["source"] == "COIN" and sft[0]["video"] == "vid1"
    assert [d["id"] for d in dpo] == ["vid1/w0-1:captions>captions_wrongmatch", "vid1/w0-1:captions>captions_noprog",
                                      "vid1/w0-1:captions>captions_both"]
    for d in dpo:  # a preference pair always shares its frames: the chosen SFT sample's images
        assert d["images"] == sft[0]["images"] and d["captioners"]["chosen"] == "captions"
        assert completion(d, "chosen") == completion(sft[0])
        assert set(d) == {"id", "video", "source", "kind", "split", "images", "prompt", "chosen", "rejected",
                          "captioners"}
    assert completion(dpo[2], "rejected") == "<Frame 1>: A kitchen.\n<Frame 2>: A kitchen again."
    assert summary.labels == {"pair chosen": 1, "pair rejected": 3}
    assert summary.by_source["COIN"]["SFT pairs"] == 1 and summary.by_source["COIN"]["DPO pairs"] == 3


def test_pair_matched_on_frame_0_only_and_unjudged_fields(tmp_path):
    """No change between the frames: judge match matched frame 0 alone (progression.distinct = [0])."""
    record = pair("p", frames(tmp_path / "p", 2), {"captions": (["Still.", "Still too."], True, [True]),
                                                   "captions_b": (["X.", "Y."], True, [False])})
    record["captions_late"] = caps(["Added after judging.", "Not judged."])  # in neither judge's output
    record["progression"]["pairs"][0]["passed"].pop("captions_b")  # progression never saw captions_b
    summary, sft, dpo = build(tmp_path, [record])
    assert [s["id"] for s in sft] == ["p:captions"] and dpo == []
    assert summary.notes["caption field not judged"] == 2


def test_sequence_rules_and_messy_captioners(tmp_path):
    fr = frames(tmp_path / "s", 4)
    good = ["Water boils in a kettle.", "Water is poured into a cup.", "A tea bag goes in.", "The tea steeps."]
    record = sequence("tea", fr, {
        "captions": (good, "good"),
        "captions_twin": (list(good), "good"),  # the same captions from another captioner: one SFT sample
        "captions_bad": (["A cup."] * 4, "rejected"),
        "captions_meh": (["Kettle.", "Cup.", "Cup.", "Cup."], "neither"),
        "captions_gap": ([good[0], None, good[2], good[3]], "good"),  # no caption for frame 1
    }, video="tea.mp4")
    record["captions_noitems"] = {"model": "broken", "kind": "test"}  # a caption field without items
    summary, sft, dpo = build(tmp_path, [record])
    assert [s["id"] for s in sft] == ["tea:captions"]
    assert [d["id"] for d in dpo] == ["tea:captions>captions_bad"]  # captions_twin>captions_bad: a duplicate
    assert sft[0]["kind"] == "sequence" and sft[0]["video"] == "tea.mp4" and len(sft[0]["images"]) == 4
    assert summary.duplicates == {"sft": 1, "dpo": 1}
    assert summary.notes == {"sequence verdict neither": 1, "caption field missing a frame": 1,
                             "caption field without items": 1}
    assert summary.by_source["HTC"]["SFT sequences"] == 1 and summary.by_source["HTC"]["DPO sequences"] == 1


def test_identical_records_and_same_bytes_count_once(tmp_path):
    record = pair("a", frames(tmp_path / "one", 2), {"captions": (["Onion.", "Cut onion."], True, [True, True]),
                                                     "captions_x": (["Pan.", "Pan."], False, [True, True])})
    copy = pair("b", frames(tmp_path / "two", 2), {"captions": (["Onion.", "Cut onion."], True, [True, True]),
                                                   "captions_x": (["Pan.", "Pan."], False, [True, True])})
    summary, sft, dpo = build(tmp_path, [record, dict(record), copy])  # the record twice, then its bytes again
    assert len(sft) == 1 and len(dpo) == 1 and summary.duplicates == {"sft": 2, "dpo": 2}
    assert sorted(p.name for p in (tmp_path / "out" / "images").iterdir()) == sorted(Path(i).name
                                                                                       for i in sft[0]["images"])


def test_chosen_and_rejected_with_the_same_text_is_no_preference(tmp_path):
    record = pair("p", frames(tmp_path / "p", 2), {"captions": (["Same.", "Text."], True, [True, True]),
                                                   "captions_y": (["Same.", "Text."], False, [True, True])})
    summary, sft, dpo = build(tmp_path, [record])
    assert len(sft) == 1 and dpo == [] and summary.notes["chosen and rejected captions identical"] == 1


def test_images_are_content_addressed_and_relative(tmp_path):
    fr = frames(tmp_path / "s", 3)
    record = sequence("s", fr, {"captions": (["a.", "b.", "c."], "good")})
    _, sft, _ = build(tmp_path, [record])
    out = tmp_path / "out"
    for src, rel in zip(fr, sft[0]["images"]):
        data = Path(src["path"]).read_bytes()
        assert rel == f"images/{hashlib.sha1(data).hexdigest()}.jpg" and not Path(rel).is_absolute()
        assert (out / rel).read_bytes() == data
    assert not list(out.glob("**/*.tmp"))


def test_prompt_is_the_packaged_caption_prompt(tmp_path):
    three = sequence("s", frames(tmp_path / "s", 3), {"captions": (["a.", "b.", "c."], "good")})
    bare = pair("p", frames(tmp_path / "p", 2), {"captions": (["x.", "y."], True, [True, True])})
    del bare["action"]
    _, sft, _ = build(tmp_path, [three, bare])
    content = sft[0]["prompt"][0]["content"]
    assert sft[0]["prompt"][0]["role"] == "user" and content[:3] == [{"type": "image"}] * 3
    lines = "\n".join(f"<Frame {i}>: Your description" for i in (1, 2, 3))
    template = load_prompt("progress_caption", None, ("n_frames", "action", "frame_lines"))
    expected = template.render(n_frames="3", action="making tea", frame_lines=lines)
    assert content[3] == {"type": "text", "text": expected[-1]["content"]} and len(content) == 4
    assert content[3]["text"].startswith("These are 3 frames extracted from a video sequence depicting making tea")
    text = sft[1]["prompt"][0]["content"][-1]["text"]  # no action: the no-action prompt, for 2 frames
    lines = "\n".join(f"<Frame {i}>: Your description" for i in (1, 2))
    template = load_prompt("progress_caption_no_action", None, ("n_frames", "frame_lines"))
    assert text == template.render(n_frames="2", frame_lines=lines)[-1]["content"]


def test_completion_round_trips_through_the_reply_parser(tmp_path):
    texts = ["A hand  reaches\nfor the kettle.", "The kettle pours: water into a cup.", "Steam rises (3 s)."]
    _, sft, _ = build(tmp_path, [sequence("s", frames(tmp_path / "s", 3), {"captions": (texts, "good")})])
    parsed = parse_frame_replies(completion(sft[0]), 3)
    assert parsed.clean and parsed.texts == [" ".join(t.split()) for t in texts]
    assert sft[0]["completion"][0]["role"] == "assistant"


def test_split_by_video_is_stable_across_runs_and_order(tmp_path):
    fr = frames(tmp_path / "f", 3)
    records = []
    for v in range(30):  # two windows per video, named as vi frames names them; no video field
        for w in ("w0-1", "w1-2"):
            texts = [f"video {v} {w} frame 0.", f"video {v} {w} frame 1."]
            records.append(pair(f"v{v}/{w}", fr[:2] if w == "w0-1" else fr[1:], {
                "captions": (texts, True, [True, True]), "captions_b": (["no.", "no."], False, [False, True])}))
    _, sft, dpo = build(tmp_path, records, "a", heldout_fraction=0.3)
    _, sft_again, dpo_again = build(tmp_path, records[::-1], "b", heldout_fraction=0.3)
    sides: dict[str, set] = {}
    for sample in sft + dpo:
        sides.setdefault(sample["video"], set()).add(sample["split"])
    assert len(sides) == 30 and all(len(s) == 1 for s in sides.values())  # no video on both sides
    held = {v for v, s in sides.items() if s == {"heldout"}}
    assert 0 < len(held) < 30
    assert {s["id"]: s["split"] for s in sft + dpo} == {s["id"]: s["split"] for s in sft_again + dpo_again}
    build(tmp_path, records, "c", heldout_fraction=0.3)  # a second run, same order: the same bytes
    for name in ("sft.jsonl", "dpo.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "c" / name).read_bytes()
    split = lambda seed: [cd.split_of(v, cd.CaptionerDataConfig(heldout_fraction=0.3, seed=seed))  # noqa: E731
                          for v in sorted(sides)]
    assert split(0) == [("heldout" if v in held else "train") for v in sorted(sides)] and split(1) != split(0)


def test_video_of_prefers_video_then_parent_then_id():
    assert cd.video_of({"id": "x/w0-3", "video": "v.mp4", "parent": "p"}) == "v.mp4"
    assert cd.video_of({"id": "x/w0-3", "parent": "p"}) == "p"
    assert cd.video_of({"id": "coin/abc/w2-5"}) == "coin/abc" and cd.video_of({"id": "plain"}) == "plain"


def test_max_dpo_per_record_is_a_seeded_sample(tmp_path):
    fields = {f"captions_g{k}": ([f"good {k}.", f"good {k} later."], True, [True, True]) for k in range(2)}
    fields |= {f"captions_r{k}": ([f"bad {k}.", f"bad {k} later."], False, [True, True]) for k in range(3)}
    record = pair("p", frames(tmp_path / "p", 2), fields)
    assert len(build(tmp_path, [record], "all")[2]) == 6
    first = [d["id"] for d in build(tmp_path, [record], "a", max_dpo_per_record=2)[2]]
    assert len(first) == 2 and first == [d["id"] for d in build(tmp_path, [record], "b", max_dpo_per_record=2)[2]]
    assert build(tmp_path, [record], "none", max_dpo_per_record=0)[2] == []
    assert build(tmp_path, [record], "seq", kinds=("sequence",))[0].skipped == {"pair (not in --kinds)": 1}


def test_error_unjudged_and_out_of_range_records_are_counted(tmp_path):
    ok = pair("ok", frames(tmp_path / "p", 2), {"captions": (["a.", "b."], True, [True, True])})
    unjudged = {k: v for k, v in ok.items() if k not in ("matching", "progression")} | {"id": "raw"}
    no_progression = {k: v for k, v in ok.items() if k != "progression"} | {"id": "half"}
    records = [ok, unjudged, no_progression,
               {"id": "broken", "errors": [{"stage": "caption-frames", "kind": "x", "message": "failed"}]},
               {"id": "broken2", "error": {"stage": "frames", "kind": "x", "message": "failed"}},
               sequence("one", frames(tmp_path / "one", 1), {"captions": (["a."], "good")}),
               sequence("seven", frames(tmp_path / "seven", 7), {"captions": (list("abcdefg"), "good")})]
    summary, sft, _ = build(tmp_path, records)
    assert [s["id"] for s in sft] == ["ok:captions"] and summary.used == 1 and summary.records == 7
    assert summary.failed == 2
    assert "raw" in summary.failures[0] and "'matching'" in summary.failures[0] and "vi judge match" in \
        summary.failures[0]
    assert "half" in summary.failures[1] and "'progression'" in summary.failures[1]
    assert summary.skipped == {"error record from an earlier stage": 2, "1 frames (2 to 6 are used)": 1,
                               "7 frames (2 to 6 are used)": 1}


def test_config_refuses_bad_options():
    with pytest.raises(ValueError, match="heldout-fraction"):
        cd.CaptionerDataConfig(heldout_fraction=1.5)
    with pytest.raises(ValueError, match="--kinds"):
        cd.CaptionerDataConfig(kinds=("pairs",))


def test_cli_end_to_end(tmp_path):
    good = pair("v1/w0-1", frames(tmp_path / "p", 2), {"captions": (["a.", "b."], True, [True, True]),
                                                       "captions_b": (["c.", "d."], False, [True, True])})
    seq = sequence("t", frames(tmp_path / "s", 3), {"captions": (["x.", "y.", "z."], "good"),
                                                    "captions_b": (["q.", "q.", "q."], "rejected")})
    unjudged = {k: v for k, v in good.items() if k != "matching"} | {"id": "nojudge"}
    lines = "\n".join(json.dumps(r) for r in (good, seq, unjudged, {"id": "e", "errors": [{"message": "x"}]})) + "\n"
    (tmp_path / "judged.jsonl").write_text(lines + "not json\n")
    done = run_vi("captioner-data", "-i", str(tmp_path / "judged.jsonl"), "-o", str(tmp_path / "ds"), "-q")
    assert done.returncode == 3, done.stderr  # the unjudged record and the bad line failed; the rest is written
    summary = json.loads(done.stdout)  # stdout: one JSON line, nothing else
    assert len(done.stdout.splitlines()) == 1
    assert summary["sft"] == 2 and summary["dpo"] == 2 and summary["failed"] == 2
    assert summary["by_source"]["COIN"]["SFT pairs"] == 1 and summary["by_source"]["HTC"]["DPO sequences"] == 1
    assert "nojudge" in done.stderr and "vi judge match" in done.stderr and "SFT pairs" in done.stderr
    assert "total" in done.stderr
    sft = jsonl((tmp_path / "ds" / "sft.jsonl").read_text())
    assert all((tmp_path / "ds" / p).is_file() for s in sft for p in s["images"])
    clean = run_vi("captioner-data", "-o", str(tmp_path / "ds2"), "--kinds", "sequence", stdin=lines.split("\n")[1])
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["sft"] == 1 and json.loads(clean.stdout)["failed"] == 0
    bad = run_vi("captioner-data", "-o", str(tmp_path / "ds3"), "--kinds", "pairs", stdin="")
    assert bad.returncode == 2 and "--kinds" in bad.stderr
