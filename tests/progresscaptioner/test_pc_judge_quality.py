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


def test_channel_plus_probe_reads_the_kept_channel_scores_with_the_probe_and_asks_nothing(tmp_path, monkeypatch):
    """--debias channel+probe on an --answers file with the pair's --debias channel verdict: the channel's kept
    score and the change probe's log-odds on the captions decide, no LLM is loaded, and the row is kept with its
    verdict; read back, it is decided as channel+probe, not as the channel alone."""
    import numpy as np

    from vi.core.models import chat
    from vi.core.models.linear_probe import LinearProbe
    from vi.pipelines.progresscaptioner import judge_progression as jp

    class Axes:  # "a" and "b" differ along the first axis, which the probe reads as no change
        def encode(self, texts):
            return np.array([(1.0, 0.0) if t == "a" else (0.0, 1.0) for t in texts])

    monkeypatch.setattr(jp, "load_change_probe", lambda: LinearProbe("minilm-l6", (5.0, 0.0), 0.0))
    monkeypatch.setattr(jp, "load_embedder", lambda ref, device: Axes())
    monkeypatch.setattr(chat, "load_llm", lambda *a, **k: pytest.fail("a kept channel score needs no LLM"))
    answers = tmp_path / "answers.jsonl"
    channel = {"change": True, "letter": "A", "method": "channel", "decision": "...", "letters": {"paper": "A"},
               "log_probs": {"same": -20.0, "same_paper": -21.0, "later": -19.0, "later_paper": -20.0}, "channel": 2.0}
    answers.write_text(json.dumps({"id": "COIN/1", "frames": [0, 1], "llm": "q", "prompt": "eval", "debias": "channel",
                                   "verdict": channel, "answer": "A"}) + "\n")
    letters, _ = jq.judge_all([pair("COIN/1", 0)], ["q"], ["eval"], None, 0, answers, "channel+probe")
    assert letters["q", "eval --debias channel+probe"] == ["B"]  # 2 nats / 8 - 5 / PROBE_SPREAD: no progression
    kept = json.loads(answers.read_text().splitlines()[-1])
    assert kept["debias"] == "channel+probe" and kept["verdict"]["method"] == "channel+probe"
    assert (kept["verdict"]["channel"], kept["verdict"]["probe"]) == (2.0, -5.0)
    assert jq.load_answers(answers)["q", "eval --debias channel+probe"] == {("COIN/1", 0): "B"}
    assert jq.load_answers(answers)["q", "eval --debias channel"] == {("COIN/1", 0): "A"}
