"""`vi view`: each record kind is recognised and drawn from its fields, nothing is lost or run,
thumbnails are made once. The page itself is tested in a browser (test_view_browser.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.common.view_fixtures import INJECTED, all_records, write_jsonl
from tests.conftest import run_vi
from vi.evaluation.view.kinds import recognise, search_text, view_blocks
from vi.evaluation.view.report import Source, write_report
from vi.evaluation.view.thumbs import Thumbnails


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> tuple[Path, list[dict]]:
    folder = tmp_path_factory.mktemp("view")
    return folder, all_records(folder)


def _load(out: Path) -> tuple[dict, list[dict]]:
    """index.js and every chunk, read back as the page reads them."""
    def payload(text: str, call: str) -> list:
        assert text.startswith(call + "(") and text.endswith(");\n")
        return json.loads("[" + text[len(call) + 1:-3] + "]")
    index = payload((out / "data" / "index.js").read_text(), "viewIndex")[0]
    chunks = []
    for path in sorted((out / "data").glob("chunk-*.js")):
        number, items = payload(path.read_text(), "viewChunk")
        assert path.name == f"chunk-{number:05d}.js"
        chunks += items
    return index, chunks


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_each_kind_is_recognised_from_its_fields(records):
    _, recs = records
    assert [recognise(r) for r in recs] == ["steps", "pair", "clip", "captions", "generated", "transcript",
                                            "other", "other"]
    # an error record keeps the kind its fields give it
    assert recognise({**recs[1], "errors": [{"stage": "pair-qa", "kind": "x", "message": "y"}]}) == "pair"


def test_steps_show_each_step_frame_and_the_transcript_lines_it_cites(records, tmp_path):
    folder, recs = records
    thumbs = Thumbnails(tmp_path)
    blocks = view_blocks(recs[0], "steps", thumbs, [])
    row = next(b for b in blocks if b["t"] == "frames")["items"]
    assert [i["lines"][0][1] for i in row] == ["Peel an orange.", "Slice the apple.", "Serve it."]
    assert row[0]["href"].endswith("orange.jpg") and row[0]["thumb"].startswith("thumbs/")
    assert row[1]["href"].endswith("clip.mp4")       # no saved path: the frame is cut from the video
    assert row[2]["missing"] == "no frame aligned" and "thumb" not in row[2]
    transcript = next(b for b in blocks if b["t"] == "table" and b["label"] == "transcript")
    assert [r[3] for r in transcript["rows"]] == ["", "1", "1", "", "2, 3"]
    assert transcript["classes"] == ["", "cited", "cited", "", "cited"]


def test_steps_and_transcript_count_segments_as_records_do(records, tmp_path):
    # `lines` [1, 2] are indices into transcript.segments, from 0 (docs/records.md): the view shows the
    # same numbers, so "segment 4" on the page is transcript.segments[4] and a step's `lines` [4, 4]
    _, recs = records
    blocks = view_blocks(recs[0], "steps", Thumbnails(tmp_path), [])
    transcript = next(b for b in blocks if b["t"] == "table" and b["label"] == "transcript")
    assert transcript["head"][0] == "segment" and [r[0] for r in transcript["rows"]] == ["0", "1", "2", "3", "4"]
    steps = next(b for b in blocks if b["t"] == "table" and b["label"] == "steps")
    assert steps["head"][3] == "segments"
    assert [r[3] for r in steps["rows"]] == ["1–2", "4", "4"]
    assert [item["lines"] for item in recs[0]["steps"]["items"]] == [[1, 2], [4, 4], [4, 4]]
    numbering = next(b for b in blocks if b["t"] == "legend" and b["label"] == "numbering")
    assert "transcript.segments[N], counted from 0" in numbering["items"][0][1]
    # the label pass's line_labels (one per segment) become a column, by the same index
    labelled = {**recs[0], "steps": {**recs[0]["steps"], "line_labels": ["TALK", "ACTION", "ACTION", "TALK", "ACTION"]}}
    table = next(b for b in view_blocks(labelled, "steps", Thumbnails(tmp_path), [])
                 if b["t"] == "table" and b["label"] == "transcript")
    assert table["head"][-1] == "label" and [r[-1] for r in table["rows"]][:2] == ["TALK", "ACTION"]


def test_pairs_show_both_clips_and_the_kept_and_dropped_qa_with_reasons(records, tmp_path):
    _, recs = records
    blocks = view_blocks(recs[1], "pair", Thumbnails(tmp_path), [])
    columns = next(b for b in blocks if b["t"] == "columns")["columns"]
    assert [c[0]["label"] for c in columns] == ["Video 1 (reference)", "Video 2 (candidate)"]
    assert [len(c[0]["items"]) for c in columns] == [3, 3]  # key frames across each clip
    assert "The person peels an apple with a peeler." in _strings(columns[1])
    qa = next(b for b in blocks if b["t"] == "table")
    assert qa["classes"] == ["kept", "kept", "dropped"]
    assert qa["rows"][2][3] == "dropped: about_the_text"
    counts = blocks[-1]["items"]
    assert ["generated", "3"] in counts and ["kept", "2"] in counts and ["dropped", "about_the_text 1"] in counts


def test_captions_show_every_captioner_verdicts_matching_and_keyframes(records, tmp_path):
    _, recs = records
    blocks = view_blocks(recs[3], "captions", Thumbnails(tmp_path), [])
    row = next(b for b in blocks if b["t"] == "frames")["items"]
    assert len(row) == 4 and [i.get("mark") for i in row] == ["keyframe", None, None, "keyframe"]
    lines = {who: text for who, text in row[2]["lines"]}
    assert lines["captions"] == "Half of the orange is peeled."
    assert lines["captions_b"] == "Frame 2: hands and an orange."
    assert lines["from the frame before"] == "uncertain (consensus -)"   # pair 1->2 has no consensus
    assert dict(row[3]["lines"])["match [captions_b]"] == "E: none of them"
    assert dict(row[3]["lines"])["match [captions]"] == "A: its own caption"
    assert ["captioners", "captions: offline-imagenet-labels; captions_b: openai:qwen2-vl@http://localhost:8000/v1"] \
        in blocks[0]["items"]
    tables = {b["label"]: b for b in blocks if b["t"] == "table"}
    assert tables["caption matching"]["classes"] == ["good", "rejected"]
    assert [r[2] for r in tables["progression (pseudo prompt)"]["rows"]] == ["yes", "?", "yes"]


def _legend(blocks: list[dict], start: str) -> dict[str, str]:
    return dict(next(b for b in blocks if b["t"] == "legend" and b["label"].startswith(start))["items"])


@pytest.mark.parametrize("prompt", ["pseudo", "eval"])
def test_the_judges_letters_are_explained_under_the_records_prompt(records, tmp_path, prompt):
    from vi.pipelines.progresscaptioner.judge_progression import letter_to_change

    _, recs = records
    record = {**recs[3], "progression": {**recs[3]["progression"], "prompt": prompt}}
    blocks = view_blocks(record, "captions", Thumbnails(tmp_path), [])
    letters = _legend(blocks, f"what the letters mean ({prompt} prompt")
    assert {"A", "B", "C", "consensus", "change"} <= set(letters)
    said = {"pseudo": ("look similar", "noticeable changes", "not possible to tell"),
            "eval": ("action has advanced", "no action progression", "uncertain")}[prompt]
    assert [w in letters[k] for k, w in zip("ABC", said)] == [True, True, True]
    # what each letter says of "change" is what the judge's own mapping says
    for letter in "ABC":
        expected = {True: "change: yes", False: "change: no", None: "change: ?"}[letter_to_change(letter, prompt)]
        assert expected in letters[letter], (letter, letters[letter])
    # the frame line says what the pair's change means under this prompt
    row = next(b for b in blocks if b["t"] == "frames")["items"]
    assert dict(row[1]["lines"])["from the frame before"].startswith("progressed" if prompt == "eval" else "changed")


def test_the_matching_verdicts_are_explained(records, tmp_path):
    _, recs = records
    blocks = view_blocks(recs[3], "captions", Thumbnails(tmp_path), [])
    verdicts = _legend(blocks, "what the verdicts mean")
    assert "chosen" in verdicts["good"] and "rejected sample" in verdicts["rejected"]
    assert "more than half" in verdicts["rejected"] and "no sample" in verdicts["neither"]


def test_fields_a_judge_adds_to_a_pair_are_shown_not_lost(records, tmp_path):
    # vi judge progression may record how each pair was decided (letters per option order, a method):
    # the view shows such fields as they are, and answers that are not one letter
    _, recs = records
    progression = recs[3]["progression"]
    pairs = [{**p, "method": "orders", "decision": "letters of both orders agree: change",
              "answers": {"captions": {"qwen2.5-coder-1.5b": {"paper": "B", "swapped": "A"}}}}
             for p in progression["pairs"]]
    record = {**recs[3], "progression": {**progression, "pairs": pairs, "debias": "orders"}}
    blocks = view_blocks(record, "captions", Thumbnails(tmp_path), [])
    table = next(b for b in blocks if b["t"] == "table" and b["label"].startswith("progression"))
    assert table["head"][-1] == "how decided"
    assert "method: orders" in table["rows"][0][-1] and "letters of both orders agree" in table["rows"][0][-1]
    assert '"paper":"B"' in table["rows"][0][3]
    assert ["debias", "orders"] in next(b for b in blocks if b["t"] == "kv" and ["debias", "orders"] in b["items"])["items"]


def test_legends_are_not_what_the_text_filter_searches(records, tmp_path):
    _, recs = records
    blocks = view_blocks(recs[3], "captions", Thumbnails(tmp_path), [])
    assert "noticeable changes" not in search_text("seq-1", "", blocks)
    assert "peel an orange" in search_text("seq-1", "peel an orange", blocks)


def test_generated_shows_scene_prompts_frames_and_source(records, tmp_path):
    _, recs = records
    blocks = view_blocks(recs[4], "generated", Thumbnails(tmp_path), [])
    row = next(b for b in blocks if b["t"] == "frames")["items"]
    assert [i["head"] for i in row] == ["input scene", "step 1", "step 2"]
    assert [i["lines"][0][1] for i in row] == ["A cutting board with fruit.", "Peel the orange.", "Slice the apple."]
    assert [b["label"] for b in blocks if b["t"] == "frames"][1:] == ["generated strip", "source sequence"]


def test_the_report_keeps_every_record_bad_lines_included_and_escapes_markup(records, tmp_path):
    folder, recs = records
    source = write_jsonl(tmp_path / "mixed.jsonl", recs, extra_lines=['{"id": "cut-off", "steps": {', "[1, 2]", ""])
    summary = write_report([Source("mixed.jsonl", source)], tmp_path / "report", title="t")
    index, chunks = _load(tmp_path / "report")
    entries = index["records"]
    assert summary.records == len(entries) == len(chunks) == len(recs) + 2
    assert [e[5] for e in entries] == list(range(1, len(recs) + 3))           # each links to its line
    assert [e[2] for e in entries].count(False) == 3                          # 1 error record + 2 bad lines
    bad = chunks[-2]
    assert bad["blocks"][0]["t"] == "errors" and "input line 9" in bad["blocks"][0]["items"][0]["message"]
    assert any(b.get("label") == "the line as read" and b["text"] == '{"id": "cut-off", "steps": {'
               for b in bad["blocks"])
    # the injected caption reaches the page as data, with no raw "<" in any data file
    for path in (tmp_path / "report" / "data").glob("*.js"):
        assert "<" not in path.read_text()
    assert INJECTED in _strings(chunks[3]["blocks"])
    assert INJECTED.lower() in entries[3][6]                                  # and the filter finds it


def test_thumbnails_are_made_once_and_a_rewritten_image_gets_a_new_one(records, tmp_path):
    folder, recs = records
    source = write_jsonl(tmp_path / "r.jsonl", recs)
    first = write_report([Source("r.jsonl", source)], tmp_path / "report", title="t")
    made = sorted((tmp_path / "report" / "thumbs").glob("*.jpg"))
    assert first.thumbs_made == len(made) > 10 and first.thumbs_reused == 0 and not first.thumbs_failed
    stamps = {p: p.stat().st_mtime_ns for p in made}
    again = write_report([Source("r.jsonl", source)], tmp_path / "report", title="t")
    assert again.thumbs_made == 0 and again.thumbs_reused == first.thumbs_made
    assert {p: p.stat().st_mtime_ns for p in made} == stamps
    # a video frame's thumbnail shows that frame: the photo on screen at that time
    from PIL import Image
    _, chunks = _load(tmp_path / "report")
    frame_at_4_5 = next(b for b in chunks[0]["blocks"] if b["t"] == "frames")["items"][1]["thumb"]
    with Image.open(tmp_path / "report" / frame_at_4_5) as thumb:
        assert thumb.size[0] <= 320 and thumb.size[1] <= 200
        shown = thumb.convert("RGB").resize((32, 24))
    baboon = Image.open(folder / "photos" / "baboon.jpg").convert("RGB").resize((32, 24))
    orange = Image.open(folder / "photos" / "orange.jpg").convert("RGB").resize((32, 24))

    def distance(a, b) -> float:
        return float(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).sum())
    assert distance(shown, baboon) < distance(shown, orange)   # 4.5 s: the 5th photo (baboon.jpg)
    # an image written anew (another mtime, another size) gets a new thumbnail, never the stale one
    own = tmp_path / "own.jpg"
    Image.open(folder / "photos" / "apple.jpg").save(own)
    listed = write_jsonl(tmp_path / "own.jsonl", [{"id": "g", "generated": {"frames": [str(own)]}}])
    assert write_report([Source("own.jsonl", listed)], tmp_path / "report", title="t").thumbs_made == 1
    Image.open(folder / "photos" / "orange.jpg").save(own)
    assert write_report([Source("own.jsonl", listed)], tmp_path / "report", title="t").thumbs_made == 1


def test_vi_view_reads_stdin_and_files_and_prints_the_page_path(records, tmp_path):
    folder, recs = records
    source = write_jsonl(tmp_path / "a.jsonl", recs[:2])
    done = run_vi("view", "-", str(source), "-o", str(tmp_path / "rep"), "-q", "--title", "two sources",
                  stdin=json.dumps(recs[6]) + "\n", check=True)
    assert done.stdout.strip() == str(tmp_path / "rep" / "index.html")
    assert "3 records (1 with errors" in done.stderr
    index, _ = _load(tmp_path / "rep")
    assert index["meta"]["title"] == "two sources"
    assert [s["name"] for s in index["meta"]["sources"]] == ["stdin", str(source)]
    assert index["meta"]["sources"][0]["href"] is None
    assert index["meta"]["sources"][1]["href"] == "../a.jsonl"    # relative: the report opens from disk
    missing = run_vi("view", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "r2"))
    assert missing.returncode == 2 and re.search(r"nope\.jsonl: no such file", missing.stderr)


def test_relative_paths_are_found_beside_the_jsonl_or_under_media_root(records, tmp_path):
    folder, recs = records
    record = {"id": "rel", "generated": {"frames": ["photos/apple.jpg"]}, "image": "orange.jpg",
              "prompts": ["scene", "step"]}
    source = write_jsonl(folder / "rel.jsonl", [record])   # photos/apple.jpg is beside it
    write_report([Source("rel.jsonl", source)], tmp_path / "rep", title="t", media_roots=[folder / "photos"])
    _, chunks = _load(tmp_path / "rep")
    row = next(b for b in chunks[0]["blocks"] if b["t"] == "frames")["items"]
    assert [("thumb" in i, i["href"].split("/")[-1]) for i in row] == [(True, "orange.jpg"), (True, "apple.jpg")]
    write_report([Source("rel.jsonl", source)], tmp_path / "rep2", title="t")
    _, chunks = _load(tmp_path / "rep2")
    row = next(b for b in chunks[0]["blocks"] if b["t"] == "frames")["items"]
    assert row[0]["missing"] == "not found: orange.jpg" and "thumb" in row[1]


def test_the_filters_decision_is_shown_beside_its_label(records, tmp_path):
    _, recs = records
    decided = {**recs[5], "instructional": {"label": False, "reason": "It is a vlog of a moving day.",
                                            "decision": {"method": "questions disagree; uncertain, set aside"}}}
    facts = dict(view_blocks(decided, "transcript", Thumbnails(tmp_path), [])[0]["items"])
    assert facts["instructional"] == "False" and facts["decided by"] == "questions disagree; uncertain, set aside"
