"""The judge's held-out measurement (evaluation/progresscaptioner/RESULTS.md) prints again from the evidence kept
beside it, with no model: the figures of the page are the stage's own decision rule applied to what the judge
said, and the channel's figure on the measure split meets issue 38's bar where the paper's single ask does not."""

from __future__ import annotations

import pytest
from vi.evaluation.progresscaptioner import judge_heldout as jh
from vi.pipelines.progresscaptioner.judge_progression import SAME_STATE



@pytest.mark.parametrize("split", ["measure", "tune"])
def test_the_kept_evidence_gives_the_table_without_a_model(split, monkeypatch):
    import vi.core.models.chat as chat
    import vi.core.models.text_embedding as text_embedding

    monkeypatch.setattr(chat, "load_llm", lambda *a, **k: pytest.fail("the kept evidence needs no LLM"))
    monkeypatch.setattr(text_embedding, "load_text_embedder", lambda *a, **k: pytest.fail("nor an embedder"))
    pairs = jh.load_pairs(split)
    evidence = jh.gather(pairs, "qwen2.5-coder-1.5b", "eval", "minilm-l6", None, jh.EVIDENCE)
    assert all(len(rows) == len(pairs) for rows in evidence.values())
    result = jh.report(pairs, jh.rows(pairs, evidence, "eval", "minilm-l6", SAME_STATE), evidence)
    # the paper's letters lean to "progressed" whatever the captions say; the channel does not
    assert result["none (old: paper's prompt once)"]["balanced_accuracy"] < 0.7
    assert result[jh.CHANNEL_ROW]["balanced_accuracy"] >= 0.8
    letters = [row["letters"]["paper"] for row in evidence["channel"]]
    assert letters.count("A") > 0.6 * len(letters)  # the paper's letter is kept, and it is mostly A

