"""vi extract-steps' second readings of each line (pipelines/showhowto/narration_probe.py): the talk
probe's log-odds decide TALK beside the label pass's, the start probe's STEP against MORE; the packaged
weights are those their training files give; the real probes tell talk from actions, and a step's first
line from its continuation, in sentences written here; and in the stage a step written from talk the
label pass called a step is dropped only with the talk probe, a new action the label pass called MORE
starts its own step only with the start probe."""

from __future__ import annotations

import json

import pytest

from vi.evaluation.probe_training import file_differences
from vi.evaluation.showhowto import train_line_probes
from vi.pipelines.showhowto import extract_steps as es
from vi.pipelines.showhowto.narration_probe import load_line_probe, with_probes
from tests.showhowto.grounding_fakes import words_embedder
from tests.showhowto.test_extract_steps_quality import TRANSCRIPTS, CopyingLLM, truth_labels, use_llm


def mark(step: float, more: float, talk: float) -> dict:
    probs = [step, more, talk]
    label = ("STEP", "MORE", "TALK")[probs.index(max(probs))]
    return {"label": label, "p": max(probs), "probs": probs}


def test_a_label_pass_that_leans_away_from_talk_is_corrected_by_the_probe():
    leaning = [mark(0.6, 0.2, 0.2), mark(0.2, 0.6, 0.2), mark(0.7, 0.2, 0.1)]  # never TALK
    probe = [4.0, 4.0, -4.0]  # the first two lines are talk to the probe
    out = with_probes(leaning, talk=(probe, 0.0))
    assert [m["label"] for m in out] == ["TALK", "TALK", "STEP"]
    assert out[0]["probe"] == pytest.approx(0.982, abs=1e-3)
    # STEP against MORE is still the label pass's: the third line keeps its 7:2 share
    assert out[2]["probs"][0] / out[2]["probs"][1] == pytest.approx(3.5, rel=0.02)
    # with the label pass weighed in, a sure label outvotes a weak probe
    sure = with_probes([mark(0.001, 0.001, 0.998)], talk=([-1.0], 1.0))
    assert sure[0]["label"] == "TALK"


def test_a_servers_labels_are_left_as_they_are():
    server = [{"label": "STEP"}, {"label": "TALK"}]
    assert with_probes(server, talk=([5.0, -5.0], 0.0), start=([5.0, -5.0], 0.0)) == server


def test_a_label_pass_that_calls_a_new_action_more_is_corrected_by_the_start_probe():
    leaning = [mark(0.5, 0.3, 0.2), mark(0.2, 0.7, 0.1), mark(0.1, 0.3, 0.6)]  # the second line starts a step
    out = with_probes(leaning, start=([-3.0, 3.0, 3.0], 0.1))
    assert [m["label"] for m in out] == ["MORE", "STEP", "TALK"]  # the talk line stays talk
    assert [m["probs"][2] for m in out] == [0.2, 0.1, 0.6]  # P(TALK) is the label pass's
    assert out[1]["start"] == pytest.approx(0.953, abs=1e-3)
    both = with_probes(leaning, talk=([-4.0, -4.0, -4.0], 0.0), start=([-3.0, 3.0, 3.0], 0.1))
    assert [m["label"] for m in both] == ["MORE", "STEP", "STEP"]  # the talk probe first, then the start


@pytest.mark.parametrize("kind", ["talk", "start"])
def test_the_packaged_probes_are_what_their_training_files_give(kind):
    packaged = json.loads((train_line_probes.ROOT / "pipelines" / "showhowto" / "model_configs"
                           / f"narration_{kind}_probe.json").read_text())
    drift, same = file_differences(packaged, train_line_probes.train(kind))
    assert same and drift < 1e-4
    # never the sets that choose the probes' settings (1-4) or measure the stage (7 on)
    measured = set(train_line_probes.MEASURE_FILES) - {train_line_probes.HELD_OUT.format(s) for s in ("_5", "_6")}
    assert not measured & {f["file"] for f in packaged["trained_on"]}


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
    probe = load_line_probe("talk")
    scores = probe.log_odds(load_text_embedder(probe.embedder, resolve_placement("cpu")).encode(talk + actions))
    assert all(s > 0 for s in scores[:4]) and all(s < 0 for s in scores[4:]), scores


def test_the_start_probe_reads_a_new_action_as_a_start_and_its_continuation_as_not():
    """Sentences written for this test, in no training file: each pair an action and how a narrator
    goes on with it."""
    from vi.core.devices import resolve_placement
    from vi.core.models.text_embedding import load_text_embedder

    starts = ["Okay now take the old gasket off the lid.",
              "Next, whisk the eggs and the sugar together.",
              "Alright, unscrew the two screws holding the cover."]
    later = ["and give it a good minute till it's smooth.",
             "that's about two cups, maybe a little more.",
             "and then just set those aside somewhere safe."]
    probe = load_line_probe("start")
    scores = probe.log_odds(load_text_embedder(probe.embedder, resolve_placement("cpu")).encode(starts + later))
    assert all(s > 0 for s in scores[:3]) and all(s < 0 for s in scores[3:]), scores


def fake_marks(labels: list[str]) -> list[dict]:
    """A label pass in process, sure of `labels`."""
    return [mark(0.1, 0.1, 0.8) if label == "TALK" else mark(0.8, 0.1, 0.1) if label == "STEP" else mark(0.1, 0.8, 0.1)
            for label in labels]


def stand_in_passes(monkeypatch, marks: list[dict], probe_log_odds: list[float]) -> None:
    """The label pass gives `marks`; every line probe that is on reads `probe_log_odds`, beside the packaged
    weight of the label pass."""
    monkeypatch.setattr(es, "label_lines", lambda llm, title, texts, record_id, **_: marks)
    monkeypatch.setattr(es.ExtractConfig, "probe_readings", lambda self, texts: {
        kind: (probe_log_odds, load_line_probe(kind).llm_weight) for kind in self.line_probes})


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
    marks = fake_marks(truth)
    marks[13] = mark(0.2, 0.5, 0.3)
    stand_in_passes(monkeypatch, marks, [3.0 if label == "TALK" else -3.0 for label in truth])
    monkeypatch.setattr(es.ExtractConfig, "embed", lambda self, texts: words_embedder(texts))
    out = es.extract(record, es.ExtractConfig(llm="smollm2-135m", grounding="cited", talk_probe=talk_probe))["steps"]
    texts = [s["text"] for s in out["items"]]
    assert ("Buy a three-dollar patch kit." in texts) is not talk_probe
    assert out["line_labels"][13] == ("TALK" if talk_probe else "MORE")
    assert out["talk_probe"] == ("minilm-l6" if talk_probe else None) and out["start_probe"] is None
    assert out["opening_probe"] == (None if talk_probe else "minilm-l6")  # --talk-probe reads the first line too
    assert texts.count("Step 1.") == 1 and len(texts) == 6 + (not talk_probe)


@pytest.mark.parametrize("talk_probe", [True, False])
def test_a_servers_labels_are_read_by_no_probe_and_the_record_says_so(talk_probe, monkeypatch):
    """A server's label pass is one reply, with no likelihoods to sum a probe's reading with: the labels stand
    as replied, and the record names no probe (before, it named the embedder of every probe that was on)."""
    record = TRANSCRIPTS["bike_tyre"]
    truth = truth_labels(record)
    use_llm(CopyingLLM(truth), monkeypatch)
    replied = [{"label": label} for label in truth]  # a reply's labels: no "probs"
    replied[13] = {"label": "MORE"}
    stand_in_passes(monkeypatch, replied, [3.0 if label == "TALK" else -3.0 for label in truth])
    config = es.ExtractConfig(llm="smollm2-135m", talk_probe=talk_probe, start_probe=True)
    out = es.extract(record, config)["steps"]
    assert out["line_labels"][13] == "MORE"  # the probes, sure it is talk, were not applied
    assert (out["talk_probe"], out["start_probe"], out["opening_probe"]) == (None, None, None)


@pytest.mark.parametrize("start_probe", [True, False])
def test_a_new_action_the_labels_call_more_starts_its_own_step_with_the_start_probe(start_probe, monkeypatch):
    """The model lists every line (the copy the 1.5B model makes of messy narration), so each copied
    line the labels call MORE is folded into the step before. bike_tyre's line 5 ("Let out whatever
    air is left...") starts a step, but the label pass, as the 1.5B model does with new actions, calls
    it MORE: without the start probe the tyre lever step is folded into taking the wheel off; with it
    (a stand-in sure of the truth) the line is STEP and the six true steps come out on their lines."""
    record = TRANSCRIPTS["bike_tyre"]
    truth = truth_labels(record)
    use_llm(CopyingLLM(truth), monkeypatch)
    marks = fake_marks(truth)
    marks[5] = mark(0.3, 0.6, 0.1)
    stand_in_passes(monkeypatch, marks, [3.0 if label == "STEP" else -3.0 for label in truth])
    out = es.extract(record, es.ExtractConfig(llm="smollm2-135m", start_probe=start_probe))["steps"]
    lines = [s["lines"] for s in out["items"]]
    true_lines = [t["lines"] for t in record["truth"]["steps"]]
    if start_probe:
        assert lines == true_lines and out["line_labels"][5] == "STEP"
    else:
        assert lines == [[3, 6], *true_lines[2:]] and out["line_labels"][5] == "MORE"
    assert out["start_probe"] == ("minilm-l6" if start_probe else None) and out["talk_probe"] is None


def test_both_probes_read_one_encoding_of_the_lines(monkeypatch):
    """The two probes read the same embedder's vectors: a chunk's lines are encoded once, not once per probe."""
    encoded = []

    class Counting:
        def encode(self, texts):
            import numpy as np

            encoded.append(list(texts))
            return np.zeros((len(texts), len(load_line_probe("talk").weights)), np.float32)

    monkeypatch.setattr("vi.core.models.text_embedding.load_text_embedder", lambda ref, placement: Counting())
    monkeypatch.setattr(es, "check_llm", lambda settings: None)
    config = es.ExtractConfig(llm="smollm2-135m", talk_probe=True, start_probe=True)
    readings = config.probe_readings(["Hello there.", "Cut the lemon."])
    assert set(readings) == {"talk", "start"} and len(encoded) == 1
    assert readings["start"][1] == load_line_probe("start").llm_weight


def test_the_stage_reads_a_chunks_first_line_with_the_talk_probe_unless_it_reads_every_line():
    """The talk probe reads the opening line of each chunk beside the label pass (narration_labels.
    labels_from_scores says why), on the embedded minilm-l6: a greeting is talk, a clip's first step is not;
    with --talk-probe it reads every line already (with_probes), so not a second time."""
    config = es.ExtractConfig(llm="smollm2-135m")
    assert config.reads_opening and not es.ExtractConfig(llm="smollm2-135m", talk_probe=True).reads_opening
    assert not es.ExtractConfig(llm="smollm2-135m", segmentation="model").reads_opening
    assert config.opening_talk("Hey everyone, welcome back to the channel.") > 0
    assert config.opening_talk("Rinse the apple under cold water and pat it dry.") < 0


@pytest.mark.parametrize("opening, closing, after_talk, after_more",
                         list(zip(es.OPENINGS, es.CLOSINGS[::-1], (True, False), (False, True))))
def test_the_stage_asks_the_label_pass_to_read_the_opening_and_closing_as_told_and_says_so(opening, closing,
                                                                                         after_talk, after_more,
                                                                                         monkeypatch):
    """--opening until-step has the talk probe read each opening line until a step, --closing back-to-step
    each closing line back to the last step, --after-talk (--after-more) each talk (more) line after a
    window of talk (more) (narration_labels.labels_from_scores says why); the record names the choices beside
    the probe's embedder; an unknown one is refused before any record."""
    record = TRANSCRIPTS["bike_tyre"]
    truth = truth_labels(record)
    steps = [{"first_line": s["lines"][0] + 1, "last_line": s["lines"][1] + 1, "text": f"Step {k}."}
             for k, s in enumerate(record["truth"]["steps"], 1)]
    use_llm(CopyingLLM(truth, steps_for=lambda lines: steps), monkeypatch)
    asked = []
    monkeypatch.setattr(es, "label_lines", lambda llm, title, texts, record_id, reread:
                        asked.append((reread.probe is not None, reread.until_step, reread.back_to_step,
                                      reread.after_talk, reread.after_more)) or fake_marks(truth))
    monkeypatch.setattr(es.ExtractConfig, "embed", lambda self, texts: words_embedder(texts))
    out = es.extract(record, es.ExtractConfig(llm="smollm2-135m", grounding="cited", opening=opening,
                                              closing=closing, after_talk=after_talk,
                                              after_more=after_more))["steps"]
    assert asked == [(True, opening == "until-step", closing == "back-to-step", after_talk, after_more)]
    assert (out["opening_probe"], out["opening"], out["closing"], out["after_talk"], out["after_more"]) == \
        ("minilm-l6", opening, closing, after_talk, after_more)
    with pytest.raises(ValueError, match="--opening must be one of first-line, until-step, got 'greeting'"):
        es.ExtractConfig(llm="smollm2-135m", opening="greeting")
    with pytest.raises(ValueError, match="--closing must be one of none, back-to-step, got 'outro'"):
        es.ExtractConfig(llm="smollm2-135m", closing="outro")
