"""The held-out material the quality scripts measure on is well formed: every caption sequence's stages
start at 0 and rise by one at a change, one per caption; every narration's lines are each in exactly one
class (a step's lines, intro, outro, aside or other; other may lie inside a step's span), its steps in order
with the times of their lines. A set written by hand can carry a slip that would silently score a method
wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "evaluation"
SEQUENCES = sorted((ROOT / "progresscaptioner" / "heldout").glob("keyframes_sequences_*.json"))
NARRATIONS = sorted((ROOT / "showhowto" / "heldout").glob("extract_transcripts*.jsonl"))


@pytest.mark.parametrize("path", SEQUENCES, ids=lambda p: p.name)
def test_caption_sequences_have_a_stage_per_caption(path):
    data = json.loads(path.read_text())
    assert path.stem.endswith(data["split"])
    ids = [s["id"] for s in data["sequences"]]
    assert len(ids) == len(set(ids))
    for s in data["sequences"]:
        stages = s["stages"]
        assert len(stages) == len(s["captions"]) >= 2, s["id"]
        assert stages[0] == 0 and all(b - a in (0, 1) for a, b in zip(stages, stages[1:])), s["id"]
        assert all(c.strip() for c in s["captions"]) and s["action"].strip(), s["id"]


@pytest.mark.parametrize("path", NARRATIONS, ids=lambda p: p.name)
def test_narrations_put_each_line_in_one_class(path):
    for line in path.read_text().splitlines():
        record = json.loads(line)
        segments, truth = record["transcript"]["segments"], record["truth"]
        starts = [s["start"] for s in segments]
        assert starts == sorted(starts) and all(s["end"] >= s["start"] for s in segments), record["id"]
        owner: dict[int, str] = {}
        for k, step in enumerate(truth["steps"]):
            first, last = step["lines"]
            assert 0 <= first <= last < len(segments), (record["id"], step)
            assert (step["start"], step["end"]) == (segments[first]["start"], segments[last]["end"]), (record["id"], k)
            for i in range(first, last + 1):
                assert owner.setdefault(i, f"step {k}") == f"step {k}", (record["id"], i)
        firsts = [s["lines"][0] for s in truth["steps"]]
        assert firsts == sorted(firsts), record["id"]
        for kind in ("intro", "outro", "aside", "other"):
            for i in truth.get(kind, []):
                # talk about the task said inside a step's span (floating_shelf's "that's not level" within
                # the drilling) may be both; a line of intro, outro or aside never is
                if not (kind == "other" and owner.get(i, "").startswith("step")):
                    assert owner.setdefault(i, kind) == kind, (record["id"], i, kind, owner[i])
        if truth.get("instructional", True) and truth["steps"]:
            assert sorted(owner) == list(range(len(segments))), (record["id"], "lines in no class")


FILTER_SETS = sorted((ROOT / "showhowto" / "heldout").glob("filter_*.jsonl"))


@pytest.mark.parametrize("path", FILTER_SETS, ids=lambda p: p.name)
def test_filter_transcripts_are_how_tos_exactly_where_their_truth_says(path):
    items = [json.loads(line) for line in path.read_text().splitlines()]
    assert len({i["id"] for i in items}) == len(items)
    for item in items:
        assert item["kind"] in {"how-to", "vlog", "review", "talk", "news"}, item["id"]
        assert item["truth"] is (item["kind"] == "how-to"), item["id"]
        assert item["title"].strip() and len(item["text"]) > 200, item["id"]
