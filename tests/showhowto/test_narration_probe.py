"""vi extract-steps' second reading of talk (pipelines/showhowto/narration_probe.py): the probe's
log-odds decide TALK beside the label pass's, the packaged weights are those its training files
give, the real probe tells talk from actions in sentences written here, and in the stage a step
written from talk the label pass called a step is dropped only with the probe."""

from __future__ import annotations

import json

import pytest

from vi.evaluation.showhowto import train_talk_probe
from vi.pipelines.showhowto import extract_steps as es
from vi.pipelines.showhowto.narration_probe import load_talk_probe, with_probe
from tests.showhowto.grounding_fakes import words_embedder
from tests.showhowto.test_extract_steps_quality import TRANSCRIPTS, CopyingLLM, truth_labels, use_llm


def mark(step: float, more: float, talk: float) -> dict:
    probs = [step, more, talk]
    label = ("STEP", "MORE", "TALK")[probs.index(max(probs))]
    return {"label": label, "p": max(probs), "probs": probs}


def test_a_label_pass_that_leans_away_from_talk_is_corrected_by_the_probe():
    leaning = [mark(0.6, 0.2, 0.2), mark(0.2, 0.6, 0.2), mark(0.7, 0.2, 0.1)]  # never TALK
    probe = [4.0, 4.0, -4.0]  # the first two lines are talk to the probe
    out = with_probe(leaning, probe, llm_weight=0.0)
    assert [m["label"] for m in out] == ["TALK", "TALK", "STEP"]
    assert out[0]["probe"] == pytest.approx(0.982, abs=1e-3)
    # STEP against MORE is still the label pass's: the third line keeps its 7:2 share
    assert out[2]["probs"][0] / out[2]["probs"][1] == pytest.approx(3.5, rel=0.02)
    # with the label pass weighed in, a sure label outvotes a weak probe
    sure = with_probe([mark(0.001, 0.001, 0.998)], [-1.0], llm_weight=1.0)
    assert sure[0]["label"] == "TALK"


def test_a_servers_labels_are_left_as_they_are():
    server = [{"label": "STEP"}, {"label": "TALK"}]
    assert with_probe(server, [5.0, -5.0], llm_weight=0.0) == server


def test_the_packaged_probe_is_what_its_training_files_give():
    packaged = json.loads((train_talk_probe.ROOT / "pipelines" / "showhowto" / "model_configs"
                           / "narration_talk_probe.json").read_text())
    drift, same = train_talk_probe.differences(packaged, train_talk_probe.train())
    assert same and drift < 1e-4
    assert all(f["file"].startswith(("tests/", "evaluation/showhowto/tune/")) for f in packaged["trained_on"])


def test_the_probe_reads_talk_about_the_task_as_talk():
    """Sentences written for this test, in no training file: talk that shares the task's words
    against the actions of the same tasks."""
    from vi.core.devices import resolve_placement
    from vi.core.models.text_embedding import load_text_embedder

    talk = ["Thanks so much for watching, I'll see you in the next one.",
            "Honestly this sauce keeps in the fridge for about a week.",
            "Look how shiny that tap is now, like brand new.",
            "A lot of people rush this part and regret it."]
    actions = ["Now tighten the two bolts with a ten millimetre wrench.",
               "Pour the batter into the greased loaf tin.",
               "Then wipe the tap down with the vinegar cloth.",
               "Slide the new filter in with the arrow pointing up."]
    probe = load_talk_probe()
    scores = probe.log_odds(load_text_embedder(probe.embedder, resolve_placement("cpu")).encode(talk + actions))
    assert all(s > 0 for s in scores[:4]) and all(s < 0 for s in scores[4:]), scores


@pytest.mark.parametrize("talk_probe", [True, False])
def test_a_step_written_from_talk_the_labels_call_a_step_is_dropped_with_the_probe(talk_probe, monkeypatch):
    """bike_tyre's line 13 ("These patch kits cost like three dollars") is talk about the task; the
    label pass, as the 1.5B model does, calls it MORE (P(TALK) 0.3), and the model wrote a step from
    it. With the probe (a stand-in sure of the truth) the line is TALK and the step is dropped."""
    record = TRANSCRIPTS["bike_tyre"]
    truth = truth_labels(record)
    steps = [{"first_line": s["lines"][0] + 1, "last_line": s["lines"][1] + 1, "text": f"Step {k}."}
             for k, s in enumerate(record["truth"]["steps"], 1)]
    steps.insert(4, {"first_line": 14, "last_line": 14, "text": "Buy a three-dollar patch kit."})
    llm = CopyingLLM(truth, steps_for=lambda lines: steps)
    use_llm(llm, monkeypatch)
    marks = [mark(0.1, 0.1, 0.8) if label == "TALK" else mark(0.8, 0.1, 0.1) if label == "STEP" else mark(0.1, 0.8, 0.1)
             for label in truth]
    marks[13] = mark(0.2, 0.5, 0.3)
    monkeypatch.setattr(es, "label_lines", lambda llm, title, texts, record_id: marks)
    monkeypatch.setattr(es.ExtractConfig, "talk_log_odds",
                        lambda self, texts: [3.0 if label == "TALK" else -3.0 for label in truth])
    monkeypatch.setattr(es.ExtractConfig, "embed", lambda self, texts: words_embedder(texts))
    out = es.extract(record, es.ExtractConfig(llm="smollm2-135m", grounding="cited", talk_probe=talk_probe))["steps"]
    texts = [s["text"] for s in out["items"]]
    assert ("Buy a three-dollar patch kit." in texts) is not talk_probe
    assert out["line_labels"][13] == ("TALK" if talk_probe else "MORE")
    assert out["talk_probe"] == ("minilm-l6" if talk_probe else None)
    assert texts.count("Step 1.") == 1 and len(texts) == 6 + (not talk_probe)
