"""vi filter-instructional and vi extract-steps: prompts, transcript text, chunking, repair,
and the stages end to end on the embedded LLMs (SmolLM2 for the mechanics, Qwen2.5 for
the quality evaluation/showhowto/RESULTS.md reports)."""

from __future__ import annotations

import json
import re

import pytest

from conftest import jsonl, run_vi, shared
from vi.core.errors import RecordError
from vi.core.models.llm import ChatReply
from vi.pipelines.showhowto import extract_steps as es
from vi.pipelines.showhowto import filter_instructional as fi
from vi.pipelines.common.chat_prompt import load_prompt, parse_prompt
from vi.pipelines.common.transcript_text import Segment, cut_text, is_speech, speech_segments

SMOL = "smollm2-135m"


def record(rid: str, lines: list[tuple[float, float, str]], **extra) -> dict:
    return {"id": rid, **extra,
            "transcript": {"segments": [{"start": a, "end": b, "text": t} for a, b, t in lines]}}


# --- prompts and transcript text ----------------------------------------------------------------

def test_packaged_prompts_render_with_examples_and_the_transcript_last():
    for name, needs in (("filter_instructional", "transcript"), ("extract_steps", "transcript"),
                        ("extract_steps_write", "steps")):
        messages = load_prompt(name, needs=("title", needs)).render(title="T", **{needs: "XYZ"})
        assert messages[0]["role"] == "system" and messages[-1]["role"] == "user"
        assert "XYZ" in messages[-1]["content"] and "${" not in json.dumps(messages)
        assert any(m["role"] == "assistant" for m in messages)  # worked examples


@pytest.mark.parametrize("text, message", [
    ("### user\nno transcript here ${title}", "never uses ${transcript}"),
    ("### user\n${title} ${transcript} ${speaker}", "unknown placeholders speaker"),
    ("### system\nhi\n### assistant\n${title} ${transcript}", "must end with a '### user'"),
    ("### narrator\n${title} ${transcript}", "unknown turn"),
    ("hello\n### user\n${title} ${transcript}", "text before the first turn"),
])
def test_a_bad_prompt_file_is_refused_with_the_reason(tmp_path, text, message):
    path = tmp_path / "p.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        load_prompt("extract_steps", path, needs=("title", "transcript"))


def test_a_bad_prompt_file_stops_the_stage_before_any_record(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("### user\nsteps please\n")
    done = run_vi("extract-steps", "--prompt", str(path), stdin='{"id": "a"}\n')
    assert done.returncode == 2 and "never uses ${title}" in done.stderr and done.stdout == ""


def test_parse_prompt_keeps_json_braces_in_examples():
    prompt = parse_prompt('### user\n{"a": 1} ${title} ${transcript}', "inline")
    assert prompt.render(title="t", transcript="x")[0]["content"] == '{"a": 1} t x'


def test_music_and_noise_captions_are_not_speech():
    assert not any(is_speech(t) for t in ["[Music]", "♪ la la ♪", "(applause)", "*laughs*", "♪♪", ""])
    assert is_speech("Now add the flour [Music]")


def test_cut_text_cuts_at_a_word_and_marks_the_cut():
    assert cut_text("short", 100) == "short"
    cut = cut_text("alpha beta gamma delta", 13)
    assert cut == "alpha beta..." and len(cut) <= 16


@pytest.mark.parametrize("bad, message", [
    ({"id": "a"}, "no 'transcript' field"),
    ({"id": "a", "transcript": {"segments": "x"}}, "must be a list"),
    ({"id": "a", "transcript": {"segments": [{"start": 0, "end": 1}]}}, "no 'text' string"),
    ({"id": "a", "transcript": {"segments": [{"start": "0", "end": 1, "text": "hi"}]}}, "'start' is '0'"),
])
def test_bad_transcripts_are_specific_record_errors(bad, message):
    with pytest.raises(RecordError, match=re.escape(message)):
        speech_segments(bad)


# --- validation and repair of the model's steps -----------------------------------------------

def test_a_reply_that_breaks_the_schema_is_a_record_error():
    with pytest.raises(RecordError) as info:
        es.parse_reply('{"title": "How to", "steps": [{"first_line": 2, "text": "Boil', "v1")
    assert info.value.kind == "llm_output_invalid" and "--max-new-tokens" in info.value.message


class EchoLLM:
    """A stand-in LLM with a small context: one step per transcript line it is shown, citing
    that line, so chunking and merging can be checked exactly."""

    n_ctx = 1100

    def __init__(self):
        self.calls = 0

    def count_tokens(self, text: str) -> int:
        return len(text) // 4 + 1

    def count_message_tokens(self, messages) -> int:
        return sum(self.count_tokens(m["content"]) + 8 for m in messages)

    def chat(self, messages, schema=None, max_tokens=0, temperature=0.0, seed=0):
        self.calls += 1
        lines = re.findall(r"^\[(\d+)\] (.*)$", messages[-1]["content"], re.M)
        steps = [{"first_line": int(n), "last_line": int(n), "text": t} for n, t in lines]
        cited = schema["properties"]["steps"]["items"]["properties"]["first_line"]["enum"]
        assert cited == [int(n) for n, _ in lines]  # the model can cite the lines shown, no others
        return ChatReply(json.dumps({"title": "How to test", "steps": steps}), 0, 0, "stop")


def test_a_long_transcript_is_chunked_and_every_step_kept_once(monkeypatch):
    lines = [(i * 10.0, i * 10.0 + 8, f"Do thing number {i} with care, then check it twice") for i in range(40)]
    config = es.ExtractConfig(llm=SMOL, n_ctx=4096, max_new_tokens=100, overlap_s=25.0,
                              segmentation="model")
    llm = EchoLLM()
    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
    out = es.extract(record("long", lines, duration=400.0), config)["steps"]
    assert out["chunks"] > 2 and llm.calls == out["chunks"]
    assert [s["text"] for s in out["items"]] == [t for _, _, t in lines]
    assert [(s["start"], s["end"]) for s in out["items"]] == [(a, b) for a, b, _ in lines]
    assert out["repairs"] == []


def test_labels_by_likelihood_are_one_per_line_and_do_not_depend_on_the_record_before():
    from vi.core.models.llm import load_chat_llm
    from vi.pipelines.showhowto.narration_labels import LABELS, label_lines

    llm = load_chat_llm(SMOL, n_ctx=4096)
    pasta = ["Boil a big pot of salted water.", "Add the pasta and stir it,", "so it doesn't stick.",
             "Oh, my cat is here, hi cat.", "Drain it after ten minutes."]
    first = label_lines(llm, "Pasta", pasta)
    label_lines(llm, "Onions", ["Hi everyone, welcome back.", "Cut the onion in half."])
    assert label_lines(llm, "Pasta", pasta) == first  # the cache is reset at each record
    assert len(first) == len(pasta)
    for mark in first:
        assert mark["label"] in LABELS and abs(sum(mark["probs"]) - 1) < 0.01
        assert mark["p"] == max(mark["probs"]) == mark["probs"][LABELS.index(mark["label"])]


def test_chunks_cover_every_segment_within_budget_and_overlap():
    segments = [Segment(i * 5.0, i * 5.0 + 4, "x" * 40) for i in range(30)]
    chunks = es.plan_chunks(segments, lambda s: 10, budget=100, overlap_s=12.0)
    cores = [[s for s in c.segments if c.core_start <= s.start < c.core_end] for c in chunks]
    assert sum(cores, []) == segments  # each segment in exactly one core, in order
    assert all(len(c.segments) * 10 <= 100 for c in chunks)
    assert any(len(c.segments) > len(core) for c, core in zip(chunks, cores))  # context shown


def test_no_narration_is_a_clear_error_for_steps_and_a_label_for_the_filter(monkeypatch):
    music = record("m", [(0, 5, "[Music]"), (5, 9, "♪ ♪")])

    def no_model(self):
        raise AssertionError("no model is needed for a record without speech")

    monkeypatch.setattr(es.ExtractConfig, "load_llm", no_model)
    monkeypatch.setattr(fi.FilterConfig, "load_llm", no_model)
    with pytest.raises(RecordError) as info:
        es.extract(music, es.ExtractConfig(llm=SMOL))
    assert info.value.kind == "no_narration"
    out = fi.classify(music, fi.FilterConfig(llm=SMOL))["instructional"]
    assert out["label"] is False and out["model"] is None and "no narration" in out["reason"]


@pytest.mark.parametrize("stage", ["filter-instructional", "extract-steps"])
def test_a_missing_model_stops_the_stage_before_any_record(stage):
    done = run_vi(stage, "--model", "no-such-model", stdin=json.dumps(MUSIC) + "\n")
    assert done.returncode == 5 and done.stdout == "" and "no-such-model" in done.stderr


def test_a_stray_dollar_in_a_prompt_is_refused_before_any_record(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("### user\nIt costs $5. ${title} ${transcript}\n")
    with pytest.raises(ValueError, match=r"starts no placeholder; write \$\$"):
        load_prompt("extract_steps", path, needs=("title", "transcript"))


def test_a_transcript_line_longer_than_the_context_is_a_clear_error(monkeypatch):
    llm = EchoLLM()
    monkeypatch.setattr(es.ExtractConfig, "load_llm", lambda self: llm)
    huge = record("huge", [(0.0, 60.0, "word " * 3000)])
    with pytest.raises(RecordError) as info:
        es.extract(huge, es.ExtractConfig(llm=SMOL, max_new_tokens=100, segmentation="model"))
    assert info.value.kind == "context_too_small" and llm.calls == 0


def test_rejects_to_dev_null_works_and_one_new_file_for_both_is_refused(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(MUSIC) + "\n")
    done = run_vi("filter-instructional", "--model", SMOL, "-i", str(src), "--drop",
                  "--rejects", "/dev/null", "-q")
    assert done.returncode == 0 and done.stdout == "", done.stderr
    out = tmp_path / "out.jsonl"
    same = run_vi("filter-instructional", "--model", SMOL, "-i", str(src), "-o", str(out),
                  "--drop", "--rejects", str(tmp_path / "." / "out.jsonl"), "-q")
    assert same.returncode == 2 and "are the same file" in same.stderr


def test_the_filter_shows_more_transcript_for_long_videos():
    words = " ".join(["word"] * 2000)
    short = record("s", [(0, 100, words)])
    long = record("l", [(0, 500, words)])
    config = fi.FilterConfig(llm=SMOL)
    assert len(fi.transcript_excerpt(short, config)) <= 1503
    assert 3400 < len(fi.transcript_excerpt(long, config)) <= 3503


# --- the stages on a real (small) LLM --------------------------------------------------------

HOWTO = record("howto", [(0.5, 4.0, "Today we make a cup of tea."),
                         (4.5, 9.0, "First fill the kettle with water and switch it on."),
                         (9.5, 14.0, "Put a tea bag into a mug."),
                         (14.5, 19.0, "Pour the boiling water over the tea bag.")],
               title="How to make tea", duration=20.0)
MUSIC = record("music", [(0, 10, "[Music]")])
UPSTREAM = {"id": "broken", "errors": [{"stage": "transcribe", "kind": "x", "message": "y"}]}


@pytest.mark.slow
def test_filter_drop_routes_every_record_to_exactly_one_file_and_resumes(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [HOWTO, MUSIC, UPSTREAM]))
    out, rejects = tmp_path / "out.jsonl", tmp_path / "rejects.jsonl"
    args = ["filter-instructional", "--model", SMOL, "-i", str(src), "-o", str(out),
            "--drop", "--rejects", str(rejects), "-q"]
    done = run_vi(*args)
    assert done.returncode == 0, done.stderr
    kept, set_aside = jsonl(out.read_text()), jsonl(rejects.read_text())
    assert sorted(r["id"] for r in kept + set_aside) == ["broken", "howto", "music"]
    assert all(r["instructional"]["label"] is False for r in set_aside)
    assert "music" in {r["id"] for r in set_aside}
    assert {"label", "reason", "model"} <= set(next(r for r in kept + set_aside
                                                   if r["id"] == "howto")["instructional"])
    again = run_vi(*args[:-1], "--resume", "-q")  # nothing left to do, nothing duplicated
    assert again.returncode == 0 and "3 already done" in again.stderr
    assert len(jsonl(out.read_text()) + jsonl(rejects.read_text())) == 3


def test_drop_without_rejects_is_refused():
    done = run_vi("filter-instructional", "--drop", stdin="")
    assert done.returncode == 2 and "--drop needs --rejects FILE" in done.stderr


@pytest.mark.slow
def test_extract_steps_on_a_small_llm_is_valid_or_a_clear_error_and_deterministic(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [HOWTO, MUSIC]))
    args = ["extract-steps", "--model", SMOL, "--max-new-tokens", "300", "-i", str(src), "-q"]
    first, second = run_vi(*args), run_vi(*args)
    assert first.stdout == second.stdout  # greedy decoding: same input, same steps
    by_id = {r["id"]: r for r in jsonl(first.stdout)}
    assert by_id["music"]["errors"][-1]["kind"] == "no_narration"
    howto = by_id["howto"]
    if "errors" in howto:  # a 135 M model may ramble past the budget: then a clear error
        assert howto["errors"][-1]["kind"] in ("llm_output_invalid", "no_steps")
    else:
        items = howto["steps"]["items"]
        assert items and all(0 <= s["start"] <= s["end"] <= 20.0 for s in items)
        assert [s["start"] for s in items] == sorted(s["start"] for s in items)


# --- quality on real transcripts, with the default model (Qwen2.5-Coder-1.5B) ---------------

@pytest.fixture(scope="module")
def pressure_cooker() -> dict:
    return json.loads(shared("showhowto", "pressure_cooker_transcript.json").read_text())


@pytest.mark.slow
def test_the_default_filter_keeps_a_real_howto_and_drops_a_real_talk(pressure_cooker, tmp_path):
    talk = shared("laion_talk", "laion_talk.mp4")
    transcribed = run_vi("transcribe", "-q", stdin=json.dumps({"id": "talk", "video": str(talk)}) + "\n")
    records = jsonl(transcribed.stdout) + [pressure_cooker]
    done = run_vi("filter-instructional", "-q", stdin="".join(json.dumps(r) + "\n" for r in records))
    labels = {r["id"]: r["instructional"]["label"] for r in jsonl(done.stdout)}
    assert labels == {"talk": False, "pressure_cooker_potato": True}, done.stderr


@pytest.mark.slow
def test_the_default_model_extracts_ordered_plausible_steps(pressure_cooker):
    # the label pass, the steps and their remark scores: 7.5 min beside the suite's other worker on the 2 cores
    # (453 s measured when it was switched on); the limit only stops a hang
    done = run_vi("extract-steps", "-q", stdin=json.dumps(pressure_cooker) + "\n", timeout=1800)
    steps = jsonl(done.stdout)[0]["steps"]
    items = steps["items"]
    assert steps["segmentation"] == "filtered"
    assert len(steps["line_labels"]) == len(pressure_cooker["transcript"]["segments"])
    assert steps["grounding"] == "said"  # each step where its words are said, not where it was cited
    assert len(items) >= 3 and "potato" in steps["title"].lower()
    assert all(0 <= s["start"] <= s["end"] <= 135.1 for s in items)
    assert [s["start"] for s in items] == sorted(s["start"] for s in items)
    words = " ".join(s["text"].lower() for s in items)
    assert sum(w in words for w in ("potato", "foil", "water", "steam", "cook")) >= 3


def test_the_filter_asks_for_its_explanation_before_its_label():
    # Asked label first, the 1.5B model said Yes to a vlog it then called a vlog (2 of 12 held-out labels
    # against their own reasons; 0 of 12 explanation first: evaluation/showhowto/filter_quality.py). The
    # constrained reply writes the properties in the schema's order, and the worked examples show it.
    from vi.pipelines.common.chat_prompt import load_prompt
    from vi.pipelines.showhowto.filter_instructional import ANSWER_SCHEMA, parse_answer

    assert list(ANSWER_SCHEMA["properties"]) == ["explanation", "answer"]
    assert ANSWER_SCHEMA["required"] == ["explanation", "answer"]
    examples = [m["content"] for m in load_prompt("filter_instructional", None, ("title", "transcript")).render(
        title="t", transcript="x") if m["role"] == "assistant"]
    assert examples and all(e.index('"explanation"') < e.index('"answer"') for e in examples)
    reply = '{"explanation": "A vlog of a weekend.", "answer": "No"}'
    assert parse_answer(reply, "r") == (False, "A vlog of a weekend.")


def test_the_default_model_scores_actions_above_remarks_written_for_this_test():
    """--drop-remarks with the embedded default model (step_remarks.py): on step-list lines written for this test
    (not from any measured set), each action is kept and each remark (an opinion, a look at the result, the
    goodbye, a story) is likelier as a remark by more than the margin, so it goes."""
    from vi.core.models.catalog import DEFAULT_LLM
    from vi.core.models.chat import LLMSettings, load_llm
    from vi.pipelines.showhowto.step_remarks import REMARK_MARGIN, instruction_scores

    actions = ["Water the plant a day before repotting.", "Loosen the root ball with your fingers.",
               "Add two inches of fresh potting mix to the new pot.", "Tap the pot on the table so the soil settles."]
    remarks = ["Honestly this is my favourite pot, I've had it for years.", "Look how happy it looks now.",
               "Thanks so much for watching, see you next week.", "I killed my first one doing this, so yeah."]
    llm = load_llm(LLMSettings(DEFAULT_LLM, n_ctx=1024, threads=2))
    scores = instruction_scores(llm, "How to Repot a Houseplant", actions + remarks)
    assert min(scores[:4]) > 1.0 and max(scores[4:]) < -REMARK_MARGIN, scores


def test_the_default_model_reads_calls_to_the_viewers_as_requests_written_for_this_test():
    """--read-requests with the embedded default model: on step-list lines written for this test (not from any
    measured set), a closing's calls to the viewers are kept when read against a remark alone (the model takes
    them for actions the viewer carries out) and dropped when read against a request to the viewers too; the
    actions stay either way."""
    from vi.core.models.catalog import DEFAULT_LLM
    from vi.core.models.chat import LLMSettings, load_llm
    from vi.pipelines.showhowto.step_remarks import REMARK_MARGIN, step_readings

    actions = ["Shift onto the smallest cog at the back.", "Push the old pin out with the chain tool.",
               "Thread the new chain through the rear derailleur.", "Join the two ends with the quick link."]
    calls = ["Tag me in a photo of your bike.", "Tell me below how many miles your old chain had.",
             "Hit like and subscribe for more bike fixes."]
    llm = load_llm(LLMSettings(DEFAULT_LLM, n_ctx=1024, threads=2))
    remark_only = step_readings(llm, "How to Replace a Bike Chain", actions + calls)
    both = step_readings(llm, "How to Replace a Bike Chain", actions + calls, requests=True)
    assert min(r.score for r in both[:4]) > -REMARK_MARGIN, both
    assert all(r.score < -REMARK_MARGIN and r.against == "request" for r in both[4:]), both
    assert any(r.score >= -REMARK_MARGIN for r in remark_only[4:]), remark_only  # the mechanism matters


def test_the_default_model_reads_brief_actions_apart_from_details_of_the_step_before_written_for_this_test():
    """--read-folds with the embedded default model: on narration lines written for this test (not from any
    measured set), brief actions of their own read as actions by more than the margin against a detail of the
    step before, so they would stay steps; an amount, a size or a time said after its action does not, so it is
    still folded. (A known limit: an action that carries its amount reads closer to a detail: "Halve a cup of
    cherry tomatoes." reads +0.6 here, under the margin, and would still be folded.)"""
    from vi.core.models.catalog import DEFAULT_LLM
    from vi.core.models.chat import LLMSettings, load_llm
    from vi.pipelines.showhowto.step_remarks import REMARK_MARGIN, detail_scores

    actions = ["Toss the pasta with the pesto.", "Slice the cherry tomatoes in half.",
               "Grate some parmesan over the top."]
    details = ["About half a pound.", "Ten minutes or so.", "A quarter inch thick."]
    llm = load_llm(LLMSettings(DEFAULT_LLM, n_ctx=1024, threads=2))
    scores = detail_scores(llm, "Pesto Pasta Salad", actions + details)
    assert min(scores[:3]) > REMARK_MARGIN and max(scores[3:]) < REMARK_MARGIN, scores


def test_remark_scores_do_not_depend_on_what_the_model_evaluated_before():
    """A record's --drop-remarks scores are the same whatever the model evaluated before it (the record before
    in a shard, or none after --resume). llama.cpp's numbers move with how its cache was filled: here the cache
    holds the very request the scoring asks, evaluated a token at a time as a generated reply fills it, and
    reusing it would move the scores by most of a nat. So the scoring empties the context first."""
    from vi.core.models.chat import LLMSettings, load_llm
    from vi.core.models.llm import chat_prompt_tokens
    from vi.pipelines.showhowto.step_remarks import hypothesis_prompts, instruction_scores

    title = "How to Repot a Houseplant"
    texts = ["Loosen the root ball with your fingers.", "Look how happy it looks now."]
    llm = load_llm(LLMSettings(SMOL, n_ctx=1024, threads=2))
    first = instruction_scores(llm, title, texts)
    llm.llama.reset()
    for token in chat_prompt_tokens(llm, hypothesis_prompts()["action"].render(title=title)):
        llm.llama.eval([token])
    assert instruction_scores(llm, title, texts) == first
