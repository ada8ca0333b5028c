"""judge_quality reports a long run stopped part way as the sample it covered: with --kept-only it judges
nothing and keeps only the pairs every judge, prompt and --debias asked for has a letter for."""

from __future__ import annotations

import json

import pytest

from vi.evaluation.progresscaptioner import judge_quality as jq


def pair(seq: str, first: int, source: str = "COIN") -> dict:
    return {"id": seq, "source": source, "action": "make tea", "frames": [first, first + 1], "desc1": "a", "desc2": "b"}


def test_kept_pairs_are_those_every_judge_has_a_letter_for(tmp_path):
    answers = tmp_path / "answers.jsonl"
    rows = [{"id": "COIN/1", "frames": [0, 1], "llm": "q", "prompt": "eval", "answer": "A"},
            {"id": "COIN/1", "frames": [1, 2], "llm": "q", "prompt": "eval", "answer": "B"},
            {"id": "COIN/1", "frames": [0, 1], "llm": "q", "prompt": "eval", "debias": "orders", "answer": "B"}]
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"id": "COIN/1", "fra')  # a line cut by a kill
    known = jq.load_answers(answers)
    pairs = [pair("COIN/1", 0), pair("COIN/1", 1), pair("HTC/2", 0, "HTC")]
    assert jq.kept_pairs(pairs, known, [("q", "eval")]) == pairs[:2]
    # the second pair has no --debias orders letter, the third none at all: the first alone is covered
    assert jq.kept_pairs(pairs, known, [("q", "eval"), ("q", "eval --debias orders")]) == pairs[:1]
    assert jq.kept_pairs(pairs, known, [("other", "eval")]) == []


def test_kept_only_needs_the_answers_file():
    with pytest.raises(SystemExit):
        jq.main(["--kept-only"])
