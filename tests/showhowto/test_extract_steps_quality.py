"""vi extract-steps on narration as it comes: the model cites line numbers and the stage
derives the times (checked without a model), the quality measures, and the default model
on hand-written transcripts with known steps (tests/showhowto/data/, see
vi.evaluation.showhowto.extract_quality)."""

from __future__ import annotations

import json

import pytest

from vi.core.models.llm import ChatReply
from vi.evaluation.showhowto import extract_quality as eq
from vi.pipelines.showhowto import extract_steps as es
from vi.pipelines.showhowto.narration_labels import step_runs
from tests.showhowto.grounding_fakes import words_embedder

TRANSCRIPTS = {r["id"]: r for r in eq.load_transcripts()}


@pytest.fixture(autouse=True)
def no_embedder_download(monkeypatch):
    """The stage's sentence embedder is the words stand-in: these tests pin the stage's logic."""
    monkeypatch.setattr(es.ExtractConfig, "embed", lambda self, texts: words_embedder(texts))


def test_the_transcripts_are_messy_how_to_narration_and_non_instructional_talk():
    howto = [r for r in TRANSCRIPTS.values() if r["truth"]["instructional"]]
    assert len(howto) >= 4 and len(TRANSCRIPTS) - len(howto) >= 2
    assert {r["truth"]["use"] for r in howto} == {"tune", "measure"}
    for r in howto:
        segments, truth = r["transcript"]["segments"], r["truth"]
        assert 60 <= segments[-1]["end"] <= 150 and truth["intro"] and truth["outro"] and truth["other"]
        assert len(segments) > len(truth["steps"]) + 6  # lines do not map one to one to steps
        for step in truth["steps"]:
            a, b = step["lines"]
            assert (step["start"], step["end"]) == (segments[a]["start"], segments[b]["end"])
    spans = [s["lines"][1] - s["lines"][0] + 1 for r in howto for s in r["truth"]["steps"]]
    assert max(spans) == 3  # a step said across three lines
    assert sum(bool(r["truth"]["aside"]) for r in howto) >= 3  # a phone call, a sponsor, a dog, the door


# --- citations to times, without a model ------------------------------------------------------

def test_cited_lines_are_checked_ordered_and_repaired():
    raw = [
        {"first_line": 6, "last_line": 4, "text": "Boil water."},  # swapped
        {"first_line": 1, "last_line": 2, "text": "Chop onions."},  # out of order
        {"first_line": 9, "last_line": 12, "text": "Serve."},  # past the last line: cut
        {"first_line": 20, "last_line": 22, "text": "Dance."},  # outside: dropped
        {"first_line": 3, "last_line": 3, "text": "  "},  # no text: dropped
        {"first_line": "soon", "last_line": None, "text": "Stir."},  # no line: dropped
        {"first_line": 7, "text": "Taste."},  # one line cited: both ends
        {"first_line": 6, "last_line": 7, "text": "boil water."},  # repeat: merged
        "not a step",
    ]
    cited, repairs = es.cited_steps(raw, count=10)
    assert cited == [(1, 2, "Chop onions."), (4, 7, "Boil water."), (7, 7, "Taste."), (9, 10, "Serve.")]
    text = " | ".join(repairs)
    for expected in ("swapped", "cut to the prompt's lines 1-10", "outside the 10 lines", "no text",
                     "cites no line", "used for both ends", "reordered", "merged"):
        assert expected in text


def test_a_step_the_model_writes_again_further_on_is_dropped_and_the_first_stays():
    """Set 8's guacamole: the 1.5B model went round its list again, and grounding pushed the copies onto one late
    line. Only the same text (up to case) is a repeat: a step that does the same thing again in other words stays."""
    raw = [{"first_line": 2, "last_line": 2, "text": "Scoop the flesh into a bowl."},
           {"first_line": 4, "last_line": 4, "text": "Dice the onion."},
           {"first_line": 6, "last_line": 6, "text": "Taste it."},
           {"first_line": 6, "last_line": 6, "text": "scoop the flesh into a bowl."},
           {"first_line": 6, "last_line": 6, "text": "Dice the onion."},
           {"first_line": 7, "last_line": 7, "text": "Dice the onion again."}]
    cited, repairs = es.cited_steps(raw, count=8)
    assert cited == [(2, 2, "Scoop the flesh into a bowl."), (4, 4, "Dice the onion."), (6, 6, "Taste it."),
                     (7, 7, "Dice the onion again.")]
    assert repairs == ["step 'scoop the flesh into a bowl.' (segment 5) repeats the step on segment 1, dropped",
                       "step 'Dice the onion.' (segment 5) repeats the step on segment 3, dropped"]


def test_a_citation_one_line_off_moves_to_the_lines_its_words_come_from():
    """What Qwen2.5-Coder-1.5B did on bike_tyre: the right text, the line before cited."""
    lines = [s["text"] for s in TRANSCRIPTS["bike_tyre"]["transcript"]["segments"]]
    cited, repairs = es.cited_steps([
        {"first_line": 3, "last_line": 3, "text": "Flip the bike over and open the brake quick release."},
        {"first_line": 11, "last_line": 12,  # a paraphrase of lines 12-13
         "text": "Sand around the hole, spread glue, let it go tacky, and press the patch on firmly."},
        {"first_line": 17, "last_line": 17, "text": "Proceed with care."},  # no word in common: kept
    ], count=len(lines), texts=lines)
    assert cited == [(4, 4, "Flip the bike over and open the brake quick release."),
                     (12, 13, "Sand around the hole, spread glue, let it go tacky, and press the patch on firmly."),
                     (17, 17, "Proceed with care.")]
    assert repairs[0] == "step 1: cited segment 2, moved to segment 3, where its words come from"
    assert len(repairs) == 2
    # without the lines' text (or when the cited lines match best) nothing moves
    assert es.cited_steps([{"first_line": 3, "last_line": 3, "text": "Flip the bike."}], count=20)[0] == \
        [(3, 3, "Flip the bike.")]


def test_overlapping_citations_are_cut_so_two_steps_share_at_most_one_line():
    cited, repairs = es.cited_steps([{"first_line": 1, "last_line": 8, "text": "Do it all."},
                                     {"first_line": 4, "last_line": 5, "text": "Then this."},
                                     {"first_line": 5, "last_line": 5, "text": "And that."}], count=8)
    assert cited == [(1, 4, "Do it all."), (4, 5, "Then this."), (5, 5, "And that.")]
    assert len(repairs) == 1 and "cut to end at segment 3" in repairs[0]


def test_messages_name_segments_as_records_index_them():
    """The model cites the speech lines from 1; a [Music] segment shifts them from the segment indices
    that steps.items[].lines holds, and every message names the segment index (docs/records.md)."""
    names = es.SegmentNames([0, 2, 3])  # segment 1 is [Music]
    assert names(2) == "segment 2" and names(1, 3) == "segments 0-3"
    assert names(4, 5) == "prompt lines 4-5"  # typed outside the prompt: no segment to name
    cited, repairs = es.cited_steps([{"first_line": 1, "last_line": 3, "text": "Do it all."},
                                     {"first_line": 2, "last_line": 3, "text": "Then this."}], count=3, names=names)
    assert "(segments 0-3) overlapped the next one; cut to end at segment 2" in repairs[0]
    kept = es.drop_talk(cited, {2: "TALK", 3: "TALK"}, repairs, names)
    assert repairs[-1] == "step 'Then this.': segments 2-3 all labelled TALK, dropped" and len(kept) == 1


def test_times_come_from_the_cited_lines_and_lines_index_the_transcript():
    record = {"id": "r", "duration": 30.0, "transcript": {"segments": [
        {"start": 10.0, "end": 14.0, "text": " Then the second thing."},
        {"start": 0.0, "end": 3.0, "text": "[Music]"},
        {"start": 3.5, "end": 9.0, "text": " First thing."},
        {"start": 20.0, "end": 31.0, "text": " Last, past the end of the video."}]}}
    segments, indices = es.speech_lines(record)
    assert [s.text for s in segments] == ["First thing.", "Then the second thing.",
                                          "Last, past the end of the video."]
    assert indices == [2, 0, 3]  # where each numbered line sits in transcript.segments
    repairs: list[str] = []
    items = es.timed_steps([(1, 2, "Do both."), (3, 3, "Finish.")], segments, indices,
                           duration=30.0, tolerance=2.0, repairs=repairs)
    assert items == [{"text": "Do both.", "start": 3.5, "end": 14.0, "lines": [2, 0]},
                     {"text": "Finish.", "start": 20.0, "end": 30.0, "lines": [3, 3]}]
    assert repairs == ["step 'Finish.': times clamped to the video"]


class CitingLLM:
    """A stand-in LLM that gives one fixed reply, checking what the stage showed it."""

    n_ctx = 4096

    def __init__(self, reply: dict):
        self.reply, self.messages, self.schema = reply, None, None

    def count_tokens(self, text: str) -> int:
        return len(text) // 4 + 1

    def count_message_tokens(self, messages) -> int:
        return sum(self.count_tokens(m["content"]) + 8 for m in messages)

    def chat(self, messages, schema=None, max_tokens=0, temperature=0.0, seed=0):
        self.messages, self.schema = messages, schema
        return ChatReply(json.dumps(self.reply), 0, 0, "stop")


def test_the_stage_shows_numbered_lines_and_turns_citations_into_times(monkeypatch):
    record = TRANSCRIPTS["bike_tyre"]
    llm = CitingLLM({"title": "How to Fix a Flat", "steps": [
        {"first_line": 4, "last_line": 5, "text": "Remove the wheel."},
        {"first_line": 17, "last_line": 18, "text": "Refit the tyre and the wheel."}]})
    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m", segmentation="model"))["steps"]
    shown = llm.messages[-1]["content"]
    assert "[1] Hey everyone, welcome back to the channel." in shown and "[20] Thanks" in shown
    assert llm.schema["properties"]["steps"]["maxItems"] == es.MAX_STEPS
    assert llm.schema["properties"]["steps"]["items"]["properties"]["last_line"]["enum"] == list(range(1, 21))
    truth = record["truth"]["steps"]
    assert [(s["start"], s["end"], s["lines"]) for s in steps["items"]] == [
        (truth[0]["start"], truth[0]["end"], truth[0]["lines"]),
        (truth[5]["start"], truth[5]["end"], truth[5]["lines"])]


def test_a_reply_without_steps_is_a_no_steps_error(monkeypatch):
    from vi.core.errors import RecordError

    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: CitingLLM({"title": "x", "steps": []}))
    with pytest.raises(RecordError) as info:
        es.extract(TRANSCRIPTS["lisbon_vlog"], es.ExtractConfig(llm="smollm2-135m", segmentation="model"))
    assert info.value.kind == "no_steps" and "filter-instructional" in info.value.message


# --- labels first: which lines make a step (--segmentation labels) -------------------------------

def truth_labels(record: dict) -> list[str]:
    """What the labelling pass should say of each line: TALK, or STEP / MORE by the true steps."""
    firsts = {s["lines"][0] for s in record["truth"]["steps"]}
    inside = {i for s in record["truth"]["steps"] for i in range(s["lines"][0], s["lines"][1] + 1)}
    return ["STEP" if i in firsts else "MORE" if i in inside else "TALK"
            for i in range(len(record["transcript"]["segments"]))]


def test_step_runs_are_a_step_line_and_the_more_lines_right_after_it():
    labels = ["MORE", "TALK", "STEP", "MORE", "MORE", "TALK", "MORE", "STEP", "STEP", "TALK"]
    assert step_runs(labels) == [(0, 0), (2, 4), (6, 6), (7, 7), (8, 8)]  # a MORE after talk starts one
    assert step_runs(["TALK"] * 4) == []


class LabellingLLM:
    """A stand-in server LLM: the labelling request gets `labels`, the writing request one text
    per step it is asked for, at the lines the schema fixes. Keeps every request."""

    n_ctx = 4096

    def __init__(self, labels: list[str], answer: str = "Yes"):
        self.labels, self.answer, self.requests = labels, answer, []

    def count_tokens(self, text: str) -> int:
        return len(text) // 4 + 1

    def count_message_tokens(self, messages) -> int:
        return sum(self.count_tokens(m["content"]) + 8 for m in messages)

    def chat(self, messages, schema=None, max_tokens=0, temperature=0.0, seed=0):
        self.requests.append((messages, schema))
        if "labels" in schema["properties"]:
            return ChatReply(json.dumps({"labels": self.labels}), 0, 0, "stop")
        if "answer" in schema["properties"]:  # vi filter-instructional's question
            return ChatReply(json.dumps({"answer": self.answer, "explanation": "Because."}), 0, 0, "stop")
        fixed = schema["properties"]["steps"]["prefixItems"]
        steps = [{"first_line": f["properties"]["first_line"]["const"],
                  "last_line": f["properties"]["last_line"]["const"], "text": f"Do step {k}."}
                 for k, f in enumerate(fixed, 1)]
        return ChatReply(json.dumps({"title": "How to Fix a Flat", "steps": steps}), 0, 0, "stop")


def test_labelled_lines_make_the_steps_and_the_model_only_writes_them(monkeypatch):
    record = TRANSCRIPTS["bike_tyre"]
    llm = LabellingLLM(truth_labels(record))
    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m", segmentation="labels"))["steps"]
    (label_messages, label_schema), (write_messages, write_schema) = llm.requests
    assert label_schema["properties"]["labels"]["minItems"] == 20
    assert "[20] Thanks for watching" in label_messages[-1]["content"]
    assert "camera bag" in label_messages[0]["content"]  # the labelled examples
    shown = write_messages[-1]["content"]  # the writer sees each step's words, and no talk
    assert shown.startswith("Title: Fixing a flat bike tyre\nStep 1 (lines 4-5): Flip the bike over")
    assert "phone is ringing" not in shown and "Thanks for watching" not in shown
    assert len(write_schema["properties"]["steps"]["prefixItems"]) == 6
    truth = record["truth"]["steps"]
    assert [(s["start"], s["end"], s["lines"]) for s in steps["items"]] == [
        (t["start"], t["end"], t["lines"]) for t in truth]
    assert steps["items"][0]["text"] == "Do step 1." and steps["repairs"] == []
    assert steps["segmentation"] == "labels" and steps["line_labels"] == truth_labels(record)
    assert eq.meets_bar(eq.score(record, steps["items"]))


def labelled_error(labels: list[str], record_id: str, monkeypatch):
    """The error extract-steps gives when the labelling pass answers `labels`, and the stand-in."""
    from vi.core.errors import RecordError

    llm = LabellingLLM(labels)
    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
    with pytest.raises(RecordError) as info:
        es.extract(TRANSCRIPTS[record_id], es.ExtractConfig(llm="smollm2-135m", segmentation="labels"))
    return info.value, llm


def test_a_video_that_is_all_talk_has_no_steps_and_no_writing_request(monkeypatch):
    error, llm = labelled_error(["TALK"] * 12, "lisbon_vlog", monkeypatch)
    assert error.kind == "no_steps" and "labelled TALK" in error.message
    assert len(llm.requests) == 1


def test_the_wrong_number_of_labels_is_a_clear_error(monkeypatch):
    error, llm = labelled_error(["STEP"] * 5, "bike_tyre", monkeypatch)
    assert error.kind == "llm_output_invalid" and "5 labels for 20 lines" in error.message
    assert len(llm.requests) == 1  # (a server's backend has already asked again: core.models.chat_json)


def test_the_write_schema_fixes_each_steps_lines_and_a_wrong_reply_breaks_it():
    from vi.core.models.chat import schema_errors

    schema = es.labelled_steps_schema([(4, 5), (7, 7)])
    good = {"title": "How to", "steps": [{"first_line": 4, "last_line": 5, "text": "a"},
                                         {"first_line": 7, "last_line": 7, "text": "b"}]}
    assert schema_errors(good, schema) == []
    bad = {"title": "How to", "steps": [{"first_line": 4, "last_line": 6, "text": "a"}]}
    assert schema_errors(bad, schema) == ["reply.steps has 1 items", "reply.steps[0].last_line is 6, not 5"]


# --- the quality measures ------------------------------------------------------------------------

def test_the_truth_scores_perfectly_and_a_step_per_line_fails_the_bar():
    record = TRANSCRIPTS["bike_tyre"]
    row = eq.score(record, record["truth"]["steps"])
    assert row["recall@0.5"] == row["precision@0.5"] == row["inside"] == 1.0 and eq.meets_bar(row)
    copied = [{"start": s["start"], "end": s["end"], "text": s["text"]}
              for s in record["transcript"]["segments"]]  # what the old prompt gave
    row = eq.score(record, copied)
    assert row["steps"] == 20 and row["intro"] == 2 and row["aside"] == 2 and row["outro"] == 2
    assert not eq.meets_bar(row)

def test_by_line_a_step_counts_where_it_starts_and_the_held_out_truth_is_consistent():
    record = TRANSCRIPTS["bike_tyre"]
    assert eq.by_line(record, record["truth"]["steps"])["line_recall"] == 1.0
    steps = [{"lines": [0, 1]}, {"lines": [4, 4]}, {"lines": [3, 3]}, {"lines": [18, 19]}]
    row = eq.by_line(record, steps)  # the greeting, step 1's second line, step 1 again, the outro
    assert (row["line_found"], row["line_on_step"], row["line_intro"], row["line_outro"]) == (1, 2, 1, 1)
    held_out = eq.load_transcripts(eq.HELDOUT)
    assert len(held_out) >= 5 and all(r["truth"]["use"] == "measure" for r in held_out)
    assert sum(bool(r["truth"].get("clean")) for r in held_out) >= 1
    for r in held_out:
        segments = r["transcript"]["segments"]
        for step in r["truth"]["steps"]:
            a, b = step["lines"]
            assert (step["start"], step["end"]) == (segments[a]["start"], segments[b]["end"])
    cooker = eq.pressure_cooker_record()
    if cooker is not None:
        assert eq.by_line(cooker, cooker["truth"]["steps"])["line_precision"] == 1.0


# The default model on these transcripts takes about 3 minutes each on 2 cores: it is measured by
# python -m vi.evaluation.showhowto.extract_quality (evaluation/showhowto/RESULTS.md), not in the suite.
# tests/showhowto/test_llm_stages.py runs it on the real pressure-cooker transcript.


# --- the model's citations, less the steps on talk (--segmentation filtered) ------------------------

class CopyingLLM(LabellingLLM):
    """A stand-in server LLM for --segmentation filtered: the labelling request gets `labels`,
    the steps request `steps_for(lines shown)` (by default the failure the issue found: every
    line copied as a step), the writing request one text per labelled run."""

    def __init__(self, labels: list[str], steps_for=None, answer: str = "Yes"):
        super().__init__(labels, answer)
        self.steps_for = steps_for or (lambda lines: [
            {"first_line": n, "last_line": n, "text": text} for n, text in enumerate(lines, 1)])

    def chat(self, messages, schema=None, max_tokens=0, temperature=0.0, seed=0):
        if "steps" not in schema["properties"] or "prefixItems" in schema["properties"]["steps"]:
            return super().chat(messages, schema, max_tokens, temperature, seed)
        self.requests.append((messages, schema))
        lines = [line.split("] ", 1)[1] for line in messages[-1]["content"].splitlines() if line.startswith("[")]
        return ChatReply(json.dumps({"title": "How to Fix a Flat", "steps": self.steps_for(lines)}), 0, 0, "stop")


def own_words(record: dict) -> list[dict]:
    """The true steps as a model that writes steps would cite them (1-based lines, its own
    words), plus one step on the phone call."""
    steps = [{"first_line": a + 1, "last_line": b + 1, "text": f"Step {k} in other words."}
             for k, (a, b) in enumerate((s["lines"] for s in record["truth"]["steps"]), 1)]
    return steps[:2] + [{"first_line": 8, "last_line": 9, "text": "Answer the phone."}] + steps[2:]


@pytest.mark.parametrize("segmentation", ["model", "filtered"])
def test_filtered_drops_the_steps_the_labels_call_talk_and_keeps_the_models_citations(segmentation, monkeypatch):
    record = TRANSCRIPTS["bike_tyre"]
    labels = truth_labels(record)
    llm = CopyingLLM(labels, steps_for=lambda lines: own_words(record))
    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m", segmentation=segmentation,
                                                grounding="cited"))["steps"]
    texts = [s["text"] for s in steps["items"]]
    if segmentation == "model":  # the model's steps as they are, the phone call among them
        assert len(llm.requests) == 1 and "Answer the phone." in texts and "line_labels" not in steps
        return
    assert len(llm.requests) == 2  # the labels, then the model's own steps: no rewriting
    assert texts == [f"Step {k} in other words." for k in range(1, 7)]
    assert [s["lines"] for s in steps["items"]] == [s["lines"] for s in record["truth"]["steps"]]
    assert steps["repairs"] == ["step 'Answer the phone.': segments 7-8 all labelled TALK, dropped"]
    assert steps["line_labels"] == labels and steps["segmentation"] == "filtered"


def use_llm(llm, monkeypatch):
    """`llm` for extract-steps; vi filter-instructional's verdict, which extract-steps may ask for
    (screen_record), is a stand-in answering `llm.answer` and counting in `llm.screened`: how the
    filter reaches its verdict is its own tests' business."""
    llm.screened = 0

    def verdict(record, config):
        llm.screened += 1
        return {"instructional": {"label": llm.answer == "Yes", "reason": "Because.", "model": "stand-in"}}

    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
    monkeypatch.setattr(es, "classify", verdict)


@pytest.mark.parametrize("segmentation", ["model", "filtered"])
def test_a_model_that_lists_every_line_gets_its_copies_folded_by_the_labels(segmentation, monkeypatch):
    """The failure the copy rule was made for: every narration line copied as a step, the greeting
    and the phone call among them. filtered sees a model that listed the lines, asks the filter's
    question (the record was not screened), drops the talk and folds each copied line the labels
    call MORE into the step before: the true steps, on their lines."""
    record = TRANSCRIPTS["bike_tyre"]
    labels = truth_labels(record)
    llm = CopyingLLM(labels)
    use_llm(llm, monkeypatch)
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m", segmentation=segmentation))["steps"]
    cited = [s["lines"][0] for s in steps["items"]]
    if segmentation == "model":  # the copy keeps every line, the greeting and the phone call among them
        assert len(llm.requests) == 1 and cited == list(range(20))
        assert not eq.meets_bar(eq.score(record, steps["items"]))
        return
    # the labels, the model's copy, the filter asked: nothing rewritten
    assert len(llm.requests) == 2 and llm.screened == 1
    truth = record["truth"]["steps"]
    assert [(s["start"], s["end"], s["lines"]) for s in steps["items"]] == [
        (t["start"], t["end"], t["lines"]) for t in truth]
    lines = record["transcript"]["segments"]
    assert [s["text"] for s in steps["items"]] == [lines[t["lines"][0]]["text"].strip() for t in truth]
    assert steps["repairs"][0].startswith("chunk 1: 12 of the model's 12 steps on non-talk lines were "
                                          "narration lines copied word for word")
    assert sum("copies a line labelled MORE" in r for r in steps["repairs"]) == 6
    assert eq.meets_bar(eq.score(record, steps["items"]))


def test_a_copy_labelled_more_right_after_talk_starts_a_step_and_is_not_folded_into_the_talk(monkeypatch):
    """The 1.5B label pass calls most action lines MORE. Line 9 ("Okay, where was I. Pump a bit of
    air into the tube") comes right after the phone call (TALK): as in step_runs, a MORE there starts
    a step. Folded into the copied phone call instead, it made one step of the call and the pump,
    which the talk filter kept for its MORE line."""
    record = TRANSCRIPTS["bike_tyre"]
    labels = truth_labels(record)
    labels[9] = "MORE"
    use_llm(CopyingLLM(labels), monkeypatch)
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m"))["steps"]
    assert [s["lines"] for s in steps["items"]] == [t["lines"] for t in record["truth"]["steps"]]
    assert not any("call you back" in s["text"] for s in steps["items"])


CLEAN = {"id": "fruit", "title": "Fruit salad", "duration": 36.0, "transcript": {"segments": [
    {"start": 0.5, "end": 3.0, "text": " Hello, today we are making a fruit salad."},
    {"start": 3.5, "end": 6.0, "text": " Rinse the apple under cold water."},
    {"start": 7.0, "end": 10.0, "text": " Peel the orange."},
    {"start": 11.0, "end": 15.0, "text": " Cut the fruit into a bowl."},
    {"start": 16.0, "end": 19.0, "text": " Sprinkle some candies on top."},
    {"start": 20.0, "end": 23.0, "text": " Your fruit salad is ready to serve."}]}}


@pytest.mark.parametrize("grounding", ["said", "cited"])
def test_a_clean_narration_copied_line_by_line_keeps_every_step(grounding, monkeypatch):
    """The issue's clean clip: each sentence states one step and the model's four steps copy them.
    Even where the labels would merge them (rinse + peel, cut + sprinkle, as the old label pass
    did), a model that copied only the action lines chose its steps: all four are kept, on their
    lines, and no filter question is asked."""
    labels = ["TALK", "STEP", "MORE", "STEP", "MORE", "TALK"]
    llm = CopyingLLM(labels, steps_for=lambda lines: [
        {"first_line": n, "last_line": n, "text": lines[n - 1]} for n in (2, 3, 4, 5)])
    use_llm(llm, monkeypatch)
    steps = es.extract(CLEAN, es.ExtractConfig(llm="smollm2-135m", grounding=grounding))["steps"]
    assert [s["lines"] for s in steps["items"]] == [[1, 1], [2, 2], [3, 3], [4, 4]]
    assert [s["text"] for s in steps["items"]][1] == "Peel the orange."
    assert len(llm.requests) == 2 and llm.screened == 0  # the labels and the steps


@pytest.mark.parametrize("grounding", ["said", "cited"])
def test_a_clean_narration_whose_closing_line_is_copied_too_keeps_every_step(grounding, monkeypatch):
    """The same clip with the model copying the closing line as a fifth step (its outro habit), the
    labels calling that line TALK: the filter's question is asked once (copied lines with talk among
    them may be a vlog's), but a closing or greeting line copied is not a listed narration, so
    nothing is folded; the outro step is dropped as talk and the four steps stay, even where the
    labels would merge them. Without the between-the-steps condition the copy rule took the copies
    for a listed narration and folded "Peel the orange" and "Sprinkle" into the steps before."""
    labels = ["TALK", "STEP", "MORE", "STEP", "MORE", "TALK"]
    llm = CopyingLLM(labels, steps_for=lambda lines: [
        {"first_line": n, "last_line": n, "text": lines[n - 1]} for n in (2, 3, 4, 5, 6)])
    use_llm(llm, monkeypatch)
    steps = es.extract(CLEAN, es.ExtractConfig(llm="smollm2-135m", grounding=grounding))["steps"]
    assert [s["lines"] for s in steps["items"]] == [[1, 1], [2, 2], [3, 3], [4, 4]]
    assert llm.screened == 1 and not any("folded" in r or "copies a line labelled MORE" in r
                                         for r in steps["repairs"])


def test_grounded_steps_land_where_their_words_are_said_and_missed_labelled_steps_are_written(monkeypatch):
    """--grounding said on bike_tyre: the model writes five of the six steps in its own words and
    cites each the line before (as the 1.5B model does); each lands on its true first line, and the
    labelled run no step is on (the tube back in) is written from what was said there."""
    record = TRANSCRIPTS["bike_tyre"]
    truth = record["truth"]["steps"]
    written = ["Open the brake quick release, undo the axle lever and pull the wheel out of the frame.",
               "Let out the air, hook two tyre levers under the bead and pull out the tube.",
               "Pump air into the tube and listen for the hiss to find the hole.",
               "Rough up the area with sandpaper, spread glue, wait till tacky, press the patch on firmly.",
               "Run your fingers around the inside of the tyre to find what caused the flat."]
    llm = CopyingLLM(truth_labels(record), steps_for=lambda lines: [
        {"first_line": t["lines"][0], "last_line": t["lines"][0], "text": text}  # 1-based: the line before
        for t, text in zip(truth, written)])
    use_llm(llm, monkeypatch)
    # this pins grounding alone: the written steps join two true steps' actions said on two lines, which
    # --split-steps (on by default) would cut where the second is said, a test of its own below
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m", split_steps=False))["steps"]
    assert steps["grounding"] == "said"
    assert [s["lines"][0] for s in steps["items"]] == [t["lines"][0] for t in truth]
    assert steps["items"][-1]["text"] == "Do step 1."  # the missed run, written by the labels' request
    assert any("said on segments 3-4" in r for r in steps["repairs"])
    assert any(r.startswith("segments 16-17: labelled a step") for r in steps["repairs"])
    assert len(llm.requests) == 3  # labels, steps, the missed run written


def test_a_step_counts_as_copied_when_it_is_a_nearby_line_up_to_case_and_punctuation():
    lines = [s["text"] for s in TRANSCRIPTS["bike_tyre"]["transcript"]["segments"]]
    labels = {n: label for n, label in enumerate(truth_labels(TRANSCRIPTS["bike_tyre"]), 1)}
    steps = [
        {"first_line": 10, "last_line": 10, "text": "There it is, a tiny puncture right here."},  # line 11
        {"first_line": 17, "last_line": 17, "text": "then put the wheel back in the frame and close the brake"},
        {"first_line": 13, "last_line": 13, "text": "Press the patch on firmly, hold it thirty seconds."},  # edited
        {"first_line": 15, "last_line": 15, "text": "Remove whatever caused the flat."},  # own words
        {"first_line": 8, "last_line": 8, "text": "Oh, sorry, my phone is ringing, ignore that."},  # talk
        {"first_line": 2, "last_line": 19, "text": ""},  # no text: not looked at
    ]
    assert es.copied_steps(steps, labels, lines) == (2, 4)


def test_a_step_with_one_line_that_is_not_talk_is_kept():
    repairs: list[str] = []
    kept = es.drop_talk([(1, 2, "Greet, then open the box."), (3, 3, "Wave."), (4, 5, "Lift it.")],
                        {1: "TALK", 2: "STEP", 3: "TALK", 4: "TALK"}, repairs)  # line 5: no label
    assert kept == [(1, 2, "Greet, then open the box."), (4, 5, "Lift it.")]
    assert repairs == ["step 'Wave.': segment 2 all labelled TALK, dropped"]


def test_filtered_on_a_video_that_is_all_talk_asks_for_no_steps(monkeypatch):
    llm = CopyingLLM(["TALK"] * 12)
    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
    with pytest.raises(Exception) as info:
        es.extract(TRANSCRIPTS["lisbon_vlog"], es.ExtractConfig(llm="smollm2-135m"))  # the default: filtered
    assert info.value.kind == "no_steps" and "labelled TALK" in info.value.message
    assert len(llm.requests) == 1  # the labels only


def test_a_record_the_filter_labelled_not_instructional_costs_no_request(monkeypatch):
    """vi filter-instructional without --drop keeps such records in the stream: extract-steps
    trusts its label, and gives a clear error record rather than steps of a vlog."""
    from vi.core.errors import RecordError

    llm = CopyingLLM(["STEP"] * 12)
    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
    verdict = {"label": False, "reason": "A travel vlog, no task is taught.", "model": "qwen2.5-coder-1.5b"}
    with pytest.raises(RecordError) as info:
        es.extract(TRANSCRIPTS["lisbon_vlog"] | {"instructional": verdict}, es.ExtractConfig(llm="smollm2-135m"))
    assert info.value.kind == "not_instructional" and "A travel vlog" in info.value.message
    assert llm.requests == []
    steps = es.extract(TRANSCRIPTS["lisbon_vlog"] | {"instructional": verdict | {"label": True}},
                       es.ExtractConfig(llm="smollm2-135m"))["steps"]  # labelled instructional: as usual
    assert len(llm.requests) >= 2 and steps["items"]


def test_a_copying_model_on_a_video_the_filter_rejects_gives_not_instructional(monkeypatch):
    """The vlog: its lines about the day read as steps to the labels, the model copies them; the
    filter's question, asked because of the copy, says No. A record the filter already labelled
    instructional is not asked again."""
    from vi.core.errors import RecordError

    record = TRANSCRIPTS["lisbon_vlog"]
    labels = ["TALK", "TALK", "STEP", "MORE", "STEP", "MORE", "STEP", "MORE", "MORE", "TALK", "STEP", "TALK"]
    llm = CopyingLLM(labels, answer="No")
    use_llm(llm, monkeypatch)
    with pytest.raises(RecordError) as info:
        es.extract(record, es.ExtractConfig(llm="smollm2-135m"))
    assert info.value.kind == "not_instructional" and "8 of its 8 steps" in info.value.message
    assert len(llm.requests) == 2 and llm.screened == 1  # labels, steps, the filter asked: nothing written
    llm.requests.clear()
    screened = {"label": True, "reason": "screened before", "model": "x"}
    steps = es.extract(record | {"instructional": screened}, es.ExtractConfig(llm="smollm2-135m"))["steps"]
    assert len(llm.requests) == 2 and llm.screened == 1 and len(steps["items"]) == 4  # copies of MORE lines folded


class RemarkScoringLLM(CopyingLLM):
    """CopyingLLM with likelihoods, as llama.cpp gives them: a written step in `remarks` is likelier as the
    reply to the request for a remark, every other one as the reply to the request for an action."""

    def __init__(self, labels: list[str], steps_for, remarks: set[str]):
        super().__init__(labels, steps_for)
        self.remarks, self.scored = remarks, []

    def option_log_probs(self, messages, options, reply_prefix=""):
        asks_remark = "not an action of the task" in messages[-1]["content"]
        self.scored += [(asks_remark, text, messages[-1]["content"].splitlines()[0]) for text in options]
        return [-10.0 if (text in self.remarks) == asks_remark else -20.0 for text in options]


def test_a_step_that_reads_as_a_remark_is_dropped_where_the_labels_let_it_through(monkeypatch):
    """The model writes a step from talk the label pass calls MORE ("There it is, a tiny puncture right
    here"): drop_talk keeps it. --drop-remarks scores each step's text as the reply to a request for an action
    and for a remark, and drops the one likelier as a remark; without it, or on a backend that scores nothing,
    the remark stays."""
    record = TRANSCRIPTS["bike_tyre"]
    remark = "There it is, a tiny puncture right here."

    def steps_for(lines):
        steps = own_words(record)
        return steps[:3] + [{"first_line": 11, "last_line": 11, "text": remark}] + steps[3:]

    def extract(llm, **options):
        monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
        return es.extract(record, es.ExtractConfig(llm="smollm2-135m", grounding="cited", **options))["steps"]

    llm = RemarkScoringLLM(truth_labels(record), steps_for, {remark})
    steps = extract(llm)  # the default
    assert [s["text"] for s in steps["items"]] == [f"Step {k} in other words." for k in range(1, 7)]
    assert steps["remarks"] == "scored"
    assert f"step {remark!r}: segment 10 reads as a remark, not an action of the task (-10.0 nats as an action " \
           "against as a remark), dropped" in steps["repairs"]
    # each kept step's text scored under the three requests (an action, a remark, a request to the viewers),
    # which name the video
    assert sorted(asks for asks, *_ in llm.scored) == [False] * 14 + [True] * 7
    assert all(first == f"Video: {record['title']}" for *_, first in llm.scored)
    # the mechanism matters: without it, or where nothing is scored, the remark is a step
    kept = extract(RemarkScoringLLM(truth_labels(record), steps_for, {remark}), drop_remarks=False)
    assert remark in [s["text"] for s in kept["items"]] and kept["remarks"] is None
    unscored = extract(CopyingLLM(truth_labels(record), steps_for), drop_remarks=True)
    assert remark in [s["text"] for s in unscored["items"]] and unscored["remarks"] is None


class RequestScoringLLM(CopyingLLM):
    """CopyingLLM with likelihoods where a call to the viewers reads as the 1.5B model read blind set 31's: likelier
    as an action (the viewer carries it out) than as a remark, and likeliest as a request to the viewers."""

    def __init__(self, labels: list[str], steps_for, calls: set[str]):
        super().__init__(labels, steps_for)
        self.calls, self.asked = calls, []

    def option_log_probs(self, messages, options, reply_prefix=""):
        ask = messages[-1]["content"]
        kind = ("remark" if "not an action of the task" in ask else
                "request" if "asks the viewers" in ask else "action")
        self.asked.append(kind)
        scores = {"action": (-15.0, -10.0), "remark": (-20.0, -20.0), "request": (-5.0, -25.0)}[kind]
        return [scores[0] if text in self.calls else scores[1] for text in options]


@pytest.mark.parametrize("read", [False, True])
def test_a_call_to_the_viewers_is_dropped_as_a_request_with_read_requests(read, monkeypatch):
    """Blind set 31's granite counters: "Let me know in the comments how often you reseal yours" written as the
    last step, read +10.5 nats likelier as an action than as a remark, so --drop-remarks keeps it. With
    --read-requests each step is also read against a request to the viewers, and the call is dropped as one; the
    true steps, likelier as actions than as either, stay."""
    record = TRANSCRIPTS["bike_tyre"]
    call = "Don't forget to subscribe to the channel."  # the clip's last line, in other words

    def steps_for(lines):
        return own_words(record) + [{"first_line": len(lines), "last_line": len(lines), "text": call}]

    labels = truth_labels(record)[:-1] + ["MORE"]  # the label pass lets the closing line through, as there
    llm = RequestScoringLLM(labels, steps_for, {call})
    use_llm(llm, monkeypatch)
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m", grounding="cited", read_requests=read))["steps"]
    texts = [s["text"] for s in steps["items"]]
    assert steps["remarks"] == "scored" and steps["read_requests"] is read
    assert [t for t in texts if t.startswith("Step ")] == [f"Step {k} in other words." for k in range(1, 7)]
    if not read:  # the mechanism matters: read against a remark alone, the call is a step
        assert call in texts and set(llm.asked) == {"action", "remark"}
        return
    assert call not in texts and set(llm.asked) == {"action", "remark", "request"}
    assert any(r.startswith(f"step {call!r}: segment ") and r.endswith(
        "reads as a request to the viewers, not an action of the task (-10.0 nats as an action against as a "
        "request), dropped") for r in steps["repairs"])


@pytest.mark.parametrize("named", [False, True])
def test_a_brief_action_naming_nothing_of_the_page_is_not_read_as_a_request_with_requests_name_the_page(
        named, monkeypatch):
    """Blind set 43's "Repeat that about five times.": a brief action naming no object of the task read as a
    request to the viewers, and --read-requests dropped a true step. With --requests-name-the-page only a text that
    names something of the video's page or channel is read against the request: the call to the viewers is still
    dropped, the brief action is read against a remark alone and kept, its repair saying so."""
    record = TRANSCRIPTS["bike_tyre"]
    call, brief = "Don't forget to subscribe to the channel.", "Repeat that about five times."

    def steps_for(lines):
        steps = own_words(record)
        steps[-1] = steps[-1] | {"text": brief}  # the last true step, written as a narrator says it
        return steps + [{"first_line": len(lines), "last_line": len(lines), "text": call}]

    labels = truth_labels(record)[:-1] + ["MORE"]
    use_llm(RequestScoringLLM(labels, steps_for, {call, brief}), monkeypatch)
    config = es.ExtractConfig(llm="smollm2-135m", grounding="cited", requests_name_the_page=named)
    steps = es.extract(record, config)["steps"]
    texts = [s["text"] for s in steps["items"]]
    assert steps["read_requests"] is True and steps["requests_name_the_page"] is named
    assert call not in texts  # names the channel: read as a request either way
    if not named:  # the mechanism matters: read against the request, the true step is lost
        assert brief not in texts
        return
    assert texts[-1] == brief
    assert any(r.startswith(f"step {brief!r}: segments ") and r.endswith(
        "reads as a request to the viewers (-10.0 nats as an action) but names nothing of the video's page or "
        "channel: read against a remark alone (+5.0), kept") for r in steps["repairs"])


def test_request_words_are_what_a_request_to_the_viewers_names():
    """The gate's words, on texts written for this test: calls to the viewers open it, brief actions do not."""
    from vi.pipelines.showhowto.step_remarks import names_the_page

    calls = ["Hit the bell so you don't miss the next one.", "Let me know how yours turned out.",
             "Send me a photo of your finished shelf.", "Links to everything are in the description.",
             "Give this a thumbs-up if it helped.", "Follow along on Instagram for more."]
    actions = ["Repeat that about five times.", "Do the same on the other side.", "Tune it up to pitch.",
               "Line it up again and drive the screws in.", "Give it a good shake."]
    assert all(names_the_page(t) for t in calls) and not any(names_the_page(t) for t in actions)


def test_read_requests_claims_nothing_where_the_backend_scores_no_text(monkeypatch):
    """A server scores no text: no step is read, and the record says so (remarks null, read_requests false)."""
    record = TRANSCRIPTS["bike_tyre"]
    use_llm(CopyingLLM(truth_labels(record), lambda lines: own_words(record)), monkeypatch)
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m", grounding="cited", read_requests=True))["steps"]
    assert steps["remarks"] is None and steps["read_requests"] is False


def spoken(record_id: str, title: str, lines: list[str], every: float = 4.0) -> dict:
    """A record whose transcript says `lines`, one every `every` seconds."""
    segments = [{"start": n * every + 0.5, "end": (n + 1) * every, "text": f" {text}"} for n, text in enumerate(lines)]
    return {"id": record_id, "title": title, "duration": len(lines) * every + 2,
            "transcript": {"segments": segments}}


BUTTER = spoken("butter", "Garlic herb butter", [
    "start with one stick of softened butter", "mince two cloves of garlic", "chop a handful of parsley",
    "mix them into the butter", "chill it for at least one hour", "slice it onto warm bread"])


@pytest.mark.parametrize("read", [False, True])
def test_a_clean_clip_whose_brief_instruction_is_labelled_talk_keeps_its_steps_with_read_listed_talk(
        read, monkeypatch):
    """Blind set 31's garlic butter: one short action per line, the 1.5B label pass calling the lines after
    the first MORE and "chill at least one hour" TALK, the model copying every line. The copied TALK line
    between the steps made the reply read as the narration listed, and the copies of MORE lines were folded
    into the first step. With --read-listed-talk that line is scored first: it reads as an action, so the
    copies are the model's chosen steps and stay (the TALK line itself is still dropped as talk)."""
    labels = ["STEP", "MORE", "MORE", "MORE", "TALK", "MORE"]
    llm = RemarkScoringLLM(labels, lambda lines: [{"first_line": n, "last_line": n, "text": text}
                                                  for n, text in enumerate(lines, 1)], remarks=set())
    use_llm(llm, monkeypatch)
    steps = es.extract(BUTTER, es.ExtractConfig(llm="smollm2-135m", grounding="cited",
                                                read_listed_talk=read))["steps"]
    assert steps["read_listed_talk"] is read
    if not read:  # the mechanism matters: without it the four actions are one step (its words line 0's)
        assert [s["lines"] for s in steps["items"]] == [[0, 0], [5, 5]]
        assert sum("copies a line labelled MORE" in r for r in steps["repairs"]) == 3
        return
    assert [s["lines"] for s in steps["items"]] == [[0, 0], [1, 1], [2, 2], [3, 3], [5, 5]]
    assert "segment 4: labelled talk and copied as a step, but reads as an action (+10.0 nats as an action " \
           "against as a remark): not taken as the narration listed" in steps["repairs"]
    assert not any("copies a line labelled MORE" in r for r in steps["repairs"])


def test_a_listed_narration_whose_copied_talk_reads_as_talk_is_still_folded_with_read_listed_talk(monkeypatch):
    """The failure the fold is for (every line of bike_tyre copied, the phone call among them) with
    --read-listed-talk: the copied phone call reads as a remark, so the reply is the narration listed and the
    copies of MORE lines are folded as without the option: the true steps, on their lines."""
    record = TRANSCRIPTS["bike_tyre"]
    labels = truth_labels(record)
    talk = {s["text"].strip() for s, label in zip(record["transcript"]["segments"], labels) if label == "TALK"}
    llm = RemarkScoringLLM(labels, lambda lines: [{"first_line": n, "last_line": n, "text": text}
                                                  for n, text in enumerate(lines, 1)], remarks=talk)
    use_llm(llm, monkeypatch)
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m", read_listed_talk=True))["steps"]
    assert [s["lines"] for s in steps["items"]] == [t["lines"] for t in record["truth"]["steps"]]
    assert sum("copies a line labelled MORE" in r for r in steps["repairs"]) == 6


NOODLES = spoken("noodles", "Peanut noodles", [
    "hey guys welcome back", "get a big pot of water boiling", "now drop the noodles in",
    "eight ounces of rice noodles for about six minutes", "drain them and rinse with cold water",
    "slice up a cucumber and some green onions", "my cat just jumped on the counter", "toss everything with the sauce"])


class FoldReadingLLM(RemarkScoringLLM):
    """RemarkScoringLLM that also scores --read-folds' request for a detail of the step before: a line in `details`
    is as likely its reply as an action's, every other line far likelier as an action."""

    def __init__(self, labels, steps_for, remarks, details):
        super().__init__(labels, steps_for, remarks)
        self.details, self.read_as_details = details, []

    def option_log_probs(self, messages, options, reply_prefix=""):
        if "not a new action" not in messages[-1]["content"]:
            return super().option_log_probs(messages, options, reply_prefix)
        self.read_as_details += list(options)
        return [-10.0 if text in self.details else -20.0 for text in options]


@pytest.mark.parametrize("read", [False, True])
def test_a_listed_narration_keeps_the_brief_actions_labelled_more_as_steps_with_read_folds(read, monkeypatch):
    """Blind set 34's peanut noodles: the model copied every line, the greeting and an aside too, so the labels
    say where a step ends, and the 1.5B label pass called the brief actions after "now drop the noodles in" MORE
    with its amount: folded by those labels, three steps were one. With --read-folds each copy to be folded is
    first read as an action against a detail of the step before: the amount is still folded, the two actions
    stay steps."""
    labels = ["TALK", "STEP", "STEP", "MORE", "MORE", "MORE", "TALK", "STEP"]
    amount = "eight ounces of rice noodles for about six minutes"
    llm = FoldReadingLLM(labels, lambda lines: [{"first_line": n, "last_line": n, "text": text}
                                                for n, text in enumerate(lines, 1)],
                         remarks={"hey guys welcome back", "my cat just jumped on the counter"}, details={amount})
    use_llm(llm, monkeypatch)
    steps = es.extract(NOODLES, es.ExtractConfig(llm="smollm2-135m", grounding="cited", read_folds=read))["steps"]
    assert steps["read_folds"] is read
    if not read:  # the mechanism matters: without it the noodles, the drain and the slicing are one step (its
        # words line 2's, so it is placed there)
        assert [s["lines"] for s in steps["items"]] == [[1, 1], [2, 2], [7, 7]]
        assert not llm.read_as_details
        return
    assert sorted(llm.read_as_details) == sorted([amount, "drain them and rinse with cold water",
                                                  "slice up a cucumber and some green onions"])
    assert [s["lines"] for s in steps["items"]] == [[1, 1], [2, 2], [4, 4], [5, 5], [7, 7]]
    assert "segment 4: labelled MORE and copied as a step, but reads as an action of its own (+10.0 nats as an " \
           "action against as a detail of the step before): not folded" in steps["repairs"]
    assert sum("copies a line labelled MORE" in r for r in steps["repairs"]) == 1  # the amount


def test_read_folds_folds_every_copy_where_the_backend_scores_no_text(monkeypatch):
    """A server scores no text: nothing is read, every copy labelled MORE is folded as without the option, and
    the record says no copy was read (read_folds false)."""
    labels = ["TALK", "STEP", "STEP", "MORE", "MORE", "MORE", "TALK", "STEP"]
    llm = CopyingLLM(labels, lambda lines: [{"first_line": n, "last_line": n, "text": text}
                                            for n, text in enumerate(lines, 1)])
    use_llm(llm, monkeypatch)
    steps = es.extract(NOODLES, es.ExtractConfig(llm="smollm2-135m", grounding="cited", read_folds=True))["steps"]
    assert steps["read_folds"] is False
    assert [s["lines"] for s in steps["items"]] == [[1, 1], [2, 2], [7, 7]]


GROUT = spoken("grout", "Regrouting tile", [
    "hey everyone welcome back", "put painter's tape along the edge of the tub",
    "then wipe the joints down with a damp sponge", "about two passes is plenty", "my dog keeps wandering in here",
    "mix the grout with water in a bucket", "now I know what you're thinking, this is a lot of work",
    "once it's dry, buff off the haze with a clean cloth"])


@pytest.mark.parametrize("marked", [False, True])
def test_a_listed_narration_keeps_copies_that_open_as_a_step_does_as_steps_with_marked_steps(marked, monkeypatch):
    """Blind set 40's tile: the model listed the narration, and the 1.5B label pass read "then wipe the joints
    down ..." and "once it's dry, ..." as going on with the step before, so their copies were folded away. With
    --marked-steps a copy labelled MORE that opens on a word that orders steps or on a condition clause stays a
    step unless the talk probe reads it as talk (the packaged one on the embedded MiniLM): "now I know what you're
    thinking" opens like a step and is still folded, and so is a detail with no such opening."""
    labels = ["TALK", "STEP", "MORE", "MORE", "TALK", "STEP", "MORE", "MORE"]
    use_llm(CopyingLLM(labels), monkeypatch)  # a server: nothing is scored, so --read-folds reads nothing
    config = es.ExtractConfig(llm="smollm2-135m", grounding="cited", read_folds=False, split_steps=False,
                              drop_previews=False, marked_steps=marked)
    steps = es.extract(GROUT, config)["steps"]
    assert steps["marked_steps"] is marked
    if not marked:  # the mechanism matters: without it the wiping goes into the taping, the buffing into the mix
        assert [s["lines"] for s in steps["items"]] == [[1, 1], [5, 5]], steps["repairs"]
        return
    assert [s["lines"] for s in steps["items"]] == [[1, 1], [2, 2], [5, 5], [7, 7]], steps["repairs"]
    kept = [r for r in steps["repairs"] if "opens as a step's first line" in r]
    assert [r.split(":")[0] for r in kept] == ["segment 2", "segment 7"]
    assert any("(segment 6) copies a line labelled MORE" in r for r in steps["repairs"])  # talk to the probe
    assert any("(segment 3) copies a line labelled MORE" in r for r in steps["repairs"])  # no such opening


def test_a_line_opens_as_a_step_on_an_ordering_word_or_a_condition_clause_past_fillers():
    from vi.pipelines.showhowto.step_citations import opens_a_step

    assert all(map(opens_a_step, ["Then wipe the joints.", "and then rinse again", "Now load up the float",
                                  "Next, the lid.", "Oh, no, sorry, first fill in the sides",
                                  "Once it's dried about an hour, wipe it again", "when that's cool, slice it"]))
    assert not any(map(opens_a_step, ["While that dries, quick story", "Nowhere near done", "Thenceforth",
                                      "once it's dry it's done", "eight ounces of noodles"]))


CORKS = spoken("corks", "Cork trivet", [
    "hey everyone welcome back to the workshop", "cut each cork in half lengthwise",
    "glue a ring of them around the edge", "this glue gun cost me five dollars and it still works great",
    "trim the last corks to fill the gaps", "some pieces only need to be an inch long",
    "my dog keeps stealing corks off the table", "stick felt pads on the bottom"])


@pytest.mark.parametrize("read", [False, True])
def test_a_copy_labelled_more_is_not_folded_into_an_aside_the_talk_probe_reads_as_talk_with_read_fold_targets(
        read, monkeypatch):
    """Blind set 35's trivet: the model listed the narration, the label pass called an aside a step (the price of
    the glue gun) and the brief action after it MORE, so the action was folded into the aside and lost (the
    aside's step copies one line, and is placed there alone). With --read-fold-targets the step a copy would go
    into is first read by the talk probe (the packaged one, on the embedded MiniLM: +2.0 log-odds for the aside
    here, the action -1.7): nothing is folded into the aside, and the detail after the action still goes into
    the action (which copies one line too, so it stays on that line)."""
    labels = ["TALK", "STEP", "STEP", "STEP", "MORE", "MORE", "TALK", "STEP"]
    llm = RemarkScoringLLM(labels, lambda lines: [{"first_line": n, "last_line": n, "text": text}
                                                  for n, text in enumerate(lines, 1)],
                           remarks={"hey everyone welcome back to the workshop",
                                    "my dog keeps stealing corks off the table"})
    use_llm(llm, monkeypatch)
    steps = es.extract(CORKS, es.ExtractConfig(llm="smollm2-135m", grounding="cited", read_folds=False,
                                               read_fold_targets=read))["steps"]
    assert steps["read_fold_targets"] is read
    aside = "this glue gun cost me five dollars and it still works great"
    if not read:  # the mechanism matters: without it the trimming is folded into the aside, and lost
        assert [s["lines"] for s in steps["items"]] == [[1, 1], [2, 2], [3, 3], [7, 7]]
        return
    assert [s["lines"] for s in steps["items"]] == [[1, 1], [2, 2], [3, 3], [4, 4], [7, 7]]
    assert any(r.startswith(f"step {aside!r} reads as talk to the talk probe (log-odds +") for r in steps["repairs"])
    assert sum("copies a line labelled MORE" in r for r in steps["repairs"]) == 1  # the detail, into the trimming


SOUP = spoken("soup", "Tomato soup", [
    "hi everyone welcome back", "chop one onion and two carrots", "then sweat them in butter for ten minutes",
    "my kids always steal the carrots", "pour in two cans of tomatoes", "about twenty eight ounces each",
    "blend it smooth with a stick blender"])


@pytest.mark.parametrize("split", [False, True])
def test_a_merged_step_is_cut_where_its_second_action_is_said_but_not_where_a_detail_is_with_split_steps(
        split, monkeypatch):
    """The model writes two actions said on two lines as one step, placed on the first line, and an action with the
    detail said on the next line as another. With --split-steps each is cut where its later clause is said (the
    embedded MPNet finds both), and a cut is made where that line reads as a step's first and not as talk to the
    packaged probes: the second action's line does ("then sweat them...": +0.35 and -3.0 log-odds), the amount's
    does not (-1.6 as a first line), so the amount stays with its action."""
    labels = ["TALK", "STEP", "MORE", "TALK", "STEP", "MORE", "STEP"]
    written = [{"first_line": 2, "last_line": 2,
                "text": "Chop one onion and two carrots, then sweat them in butter for ten minutes."},
               {"first_line": 5, "last_line": 5,
                "text": "Pour in two cans of tomatoes, about twenty-eight ounces each."},
               {"first_line": 7, "last_line": 7, "text": "Blend it smooth with a stick blender."}]
    use_llm(CopyingLLM(labels, lambda lines: written), monkeypatch)
    steps = es.extract(SOUP, es.ExtractConfig(llm="smollm2-135m", grounding="cited", split_steps=split))["steps"]
    assert steps["split_steps"] is split
    if not split:  # the mechanism matters: without it the butter step has no step (its line ends the chopping)
        assert [s["lines"] for s in steps["items"]] == [[1, 2], [4, 5], [6, 6]]
        return
    assert [(s["lines"], s["text"]) for s in steps["items"]] == [
        ([1, 1], "Chop one onion and two carrots."), ([2, 2], "Sweat them in butter for ten minutes."),
        ([4, 5], "Pour in two cans of tomatoes, about twenty-eight ounces each."),
        ([6, 6], "Blend it smooth with a stick blender.")]
    assert sum(r.endswith(": cut there") for r in steps["repairs"]) == 1
    assert sum(r.endswith(": not cut") for r in steps["repairs"]) == 1


def test_the_quality_scripts_stage_flags_are_the_stages_own_options():
    """Each stage option the quality script passes through is a flag built from ExtractConfig's field (its
    spelling, help and default said once, there); one left out keeps the stage's default (None here)."""
    import argparse
    import dataclasses

    parser = argparse.ArgumentParser()
    eq.add_stage_options(parser)
    args = parser.parse_args(["--after-more", "--no-drop-remarks", "--opening", "first-line"])
    assert {name: getattr(args, name) for name in eq.STAGE_OPTIONS} == {
        "talk_probe": None, "start_probe": None, "drop_remarks": False, "drop_previews": None,
        "opening": "first-line", "closing": None, "after_talk": None, "after_more": True, "ask_rest": None,
        "rest_after": None, "read_listed_talk": None, "read_requests": None, "requests_name_the_page": None,
        "read_folds": None,
        "marked_steps": None, "read_fold_targets": None, "split_steps": None, "reground_heads": None,
        "skip_conditions": None}
    helps = {action.dest: action.help for action in parser._actions}
    field = {f.name: f for f in dataclasses.fields(es.ExtractConfig)}["after_more"]
    assert helps["after_more"].endswith(field.metadata["help"])


class ListingLLM(CitingLLM):
    """A stand-in for the 1.5B model where it lists the narration: each line it is shown copied as a step citing
    it, until the schema's cap (MAX_STEPS); `asked` keeps the line numbers each request showed."""

    def __init__(self):
        super().__init__({})
        self.asked = []

    def chat(self, messages, schema=None, max_tokens=0, temperature=0.0, seed=0):
        shown = [line.split("] ", 1) for line in messages[-1]["content"].splitlines() if line.startswith("[")]
        self.asked.append([int(n[1:]) for n, _ in shown])
        steps = [{"first_line": int(n[1:]), "last_line": int(n[1:]), "text": text} for n, text in shown]
        return ChatReply(json.dumps({"title": "How to Fix a Flat",
                                     "steps": steps[:schema["properties"]["steps"]["maxItems"]]}), 0, 0, "stop")


@pytest.mark.parametrize("ask_rest", [False, True])
def test_a_reply_cut_at_the_step_cap_says_so_and_with_ask_rest_the_lines_after_it_are_asked_for(ask_rest,
                                                                                              monkeypatch):
    """A model that lists the narration line by line fills the reply's MAX_STEPS steps halfway through a long
    narration (blind sets 27 and 28: the steps after segments 14 and 20 written by nobody). The cap is said in repairs;
    with --ask-rest the lines after the last cited one are asked for alone, until a reply is not full."""
    record = TRANSCRIPTS["bike_tyre"]  # 20 lines, more than the cap
    llm = ListingLLM()
    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m", segmentation="model",
                                                ask_rest=ask_rest))["steps"]
    cap = es.MAX_STEPS
    said = [line for item in steps["items"] for line in item["lines"]]
    assert steps["ask_rest"] is ask_rest
    if not ask_rest:
        assert llm.asked == [list(range(1, 21))] and max(said) == cap - 1  # 0-based: segment 14 is line 15
        assert steps["repairs"][0] == (f"the model's reply holds {cap} steps, the most it may, the last on segment "
                                       f"{cap - 1}: segments {cap}-19 got no step from it (--ask-rest asks again)")
        return
    assert llm.asked == [list(range(1, 21)), list(range(cap + 1, 21))]  # the lines after the last cited one, alone
    assert max(said) == 19 and len(steps["items"]) > cap
    assert steps["repairs"][0] == (f"the model's reply holds {cap} steps, the most it may, the last on segment "
                                   f"{cap - 1}: asked again for segments {cap}-19, 5 steps")


@pytest.mark.parametrize("rest_after, cites_early", [("cited", True), ("said", True), ("said", False)])
def test_a_full_reply_that_cites_early_has_the_rest_asked_after_its_words_with_rest_after_said(rest_after,
                                                                                               cites_early,
                                                                                               monkeypatch):
    """Blind set 30's risotto: the 1.5B model's full reply ran to the narration's end in words while citing its
    middle (lines 14-21 for steps said on 23-32), so --ask-rest asked for the last lines again and they were
    written twice. With --rest-after said a full reply ends where its steps' words are said, where that is later
    than their citations: nothing is asked again here; a reply that truly stops halfway is asked on as before."""
    record = TRANSCRIPTS["bike_tyre"]  # 20 lines
    lines = [s["text"].strip() for s in record["transcript"]["segments"]]
    cap, asked = es.MAX_STEPS, []

    def steps_for(shown):
        asked.append(shown)
        if len(asked) == 1:  # full: lines 6-20 copied, cited as 1-15 (early) or lines 1-15 as they are
            copied = lines[len(lines) - cap:] if cites_early else lines[:cap]
            return [{"first_line": k, "last_line": k, "text": text} for k, text in enumerate(copied, 1)]
        start = len(lines) - len(shown) + 1
        return [{"first_line": start + k, "last_line": start + k, "text": text} for k, text in enumerate(shown)]

    use_llm(CopyingLLM(truth_labels(record), steps_for), monkeypatch)
    steps = es.extract(record, es.ExtractConfig(llm="smollm2-135m", rest_after=rest_after))["steps"]
    assert steps["ask_rest"] is True and steps["rest_after"] == rest_after
    full = f"the model's reply holds {cap} steps, the most it may, the last on segment {cap - 1}"
    if rest_after == "said" and cites_early:
        assert len(asked) == 1
        assert f"{full}, its steps' words said up to segment 19: no line left to ask for" in steps["repairs"]
        return
    assert len(asked) == 2 and asked[1] == lines[cap:]  # the lines after the last citation, asked again
    assert f"{full}: asked again for segments {cap}-19, 5 steps" in steps["repairs"]


def test_remark_quality_counts_what_the_stage_would_drop(tmp_path):
    """The texts script reads each hand-labelled step as the stage does (step_readings) and counts the drops by
    kind and form: here a call to the viewers kept without --read-requests and dropped with it, an action kept."""
    from vi.evaluation.showhowto import remark_quality as rq

    call, action = "Don't forget to subscribe to the channel.", "Pump the tyre up."
    data = tmp_path / "texts.jsonl"
    data.write_text(json.dumps({"id": "tyre", "title": "Fix a flat", "texts": [
        {"text": action, "kind": "action", "form": "action"},
        {"text": call, "kind": "remark", "form": "cta"}]}) + "\n")
    llm = RequestScoringLLM(["STEP"], None, {call})
    for requests, dropped in ((False, "0/1"), (True, "1/1")):
        rows = rq.read_videos(llm, rq.read_texts(data), requests)
        assert [(r["text"], r["dropped"]) for r in rows] == [(action, False), (call, requests)]
        table = rq.report(rows)
        assert f"| remark: cta | {dropped} |" in table and "| action | 0/1 |" in table
    data.write_text(json.dumps({"id": "tyre", "title": "Fix a flat", "texts": [{"text": action, "kind": "step"}]}))
    with pytest.raises(SystemExit, match="video tyre: text 'Pump the tyre up.' has kind 'step'"):
        rq.read_texts(data)
