"""vi pair-qa: parsing the model's Q:/A: lines, the filter's reasons, the paper's prompts, the
stage logic on a fake LLM, and the stage end to end on the embedded LLMs (SmolLM2 for the
mechanics, Qwen2.5 for the quality)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import jsonl, run_vi
from vi.pipelines.stepdiff.pair_qa import parse_types, prompt_overrides
from vi.core.errors import RecordError
from vi.core.models.llm import ChatReply
from vi.pipelines.stepdiff import pair_qa as pq

SMOL = "smollm2-135m"
KNIFE = "The person chops a red onion with a chef's knife on a wooden board."
PROCESSOR = "The person dices a white onion using a food processor."


def pair(rid: str, d1: str | None, d2: str | None, **clip_extra) -> dict:
    def clip(cid, text):
        return {"id": cid, "video": f"{cid}.mp4", "start": 1.0, "end": 5.0, "keystep": "chop onion",
                **({"description": {"step": text}} if text else {}), **clip_extra}
    return {"id": rid, "reference": clip(f"{rid}-r", d1), "candidate": clip(f"{rid}-c", d2),
            "keystep": "chop onion"}


# --- parsing ------------------------------------------------------------------------------------

@pytest.mark.parametrize("reply, expected", [
    ("Q: Which video uses a knife?\nA: Video 1.", [("Which video uses a knife?", "Video 1.")]),
    # a summary first, blank lines between pairs, prose at the end
    (("The videos differ in the tool.\n\nQ: What tool is used in Video 1?\nA: A chef's knife.\n\n"
      "Q: What colour is the onion in Video 2?\nA: White.\n\nI hope this helps!"),
     [("What tool is used in Video 1?", "A chef's knife."), ("What colour is the onion in Video 2?", "White.")]),
    # numbering and markdown in every style
    (("1. Q: What is chopped?\n1. A: An onion.\n2) **Q:** Which board?\n2) **A:** Wooden.\n"
      "**Q3:** What dices it?\n**A3:** A food processor.\n- Question 4: Which onion is red?\n- Answer 4: Video 1's."),
     [("What is chopped?", "An onion."), ("Which board?", "Wooden."), ("What dices it?", "A food processor."),
      ("Which onion is red?", "Video 1's.")]),
    # the answer on the line after its label, a label alone on its line, a multi-line answer
    (("Q:\nWhich video uses a processor?\nA:\nVideo 2.\nQ: How do they cut?\nA: Video 1 chops by hand,\n"
      "while Video 2 uses a machine.\n\nThat is all."),
     [("Which video uses a processor?", "Video 2."),
      ("How do they cut?", "Video 1 chops by hand, while Video 2 uses a machine.")]),
    # a question over two lines; question and answer on one line
    ("Q: Which video shows\nthe red onion?\nA: Video 1\nQ: Which uses a board? A: The first video.",
     [("Which video shows the red onion?", "Video 1"), ("Which uses a board?", "The first video.")]),
    # a missing final answer, an answer without a question, a quoted answer
    ('A: "Video 2"\nQ: Which is faster?\nA: "Video 2."\nQ: Which is louder?\nA:',
     [("", "Video 2"), ("Which is faster?", "Video 2."), ("Which is louder?", "")]),
    # a question whose answer never came, followed by another question
    ("Q: What is cut?\nQ: Which knife?\nA: A chef's knife.",
     [("What is cut?", ""), ("Which knife?", "A chef's knife.")]),
    ("YES", []),
    ("", []),
    ("1. Which video uses a knife?\n2. Which video uses a processor?", []),  # no Q:/A: labels at all
])
def test_parse_qa_reads_messy_replies_exactly(reply, expected):
    assert pq.parse_qa(reply) == expected


@pytest.mark.parametrize("text, expected", [
    ("YES", "YES"), ("Yes.", "YES"), ("yes, they do", "YES"), ("**Yes**", "YES"),
    ("The answer is YES.", "YES"), ("NO", "NO"), ("No.", "NO"), ("no, they don't", "NO"),
    ("Nope", None), ("Maybe", None), ("Yes and no", None), ("", None),
    ("Both videos show chopping an onion.", None),
])
def test_yes_no_normalises_type_3_answers(text, expected):
    assert pq.yes_no(text) == expected


def test_type_3_takes_the_first_answer_or_the_whole_reply_and_always_offers_one_qa():
    question = "Do the two videos share a similar main action?"
    assert pq.candidates(3, "Yes.", False, question) == [pq.QA(3, question, "YES")]
    assert pq.candidates(3, f"Q: {question}\nA: No, they differ.", False, question) == [pq.QA(3, question, "NO")]
    assert pq.candidates(3, "It depends on the onion.", False, question) == [pq.QA(3, question, "")]


def test_only_the_last_qa_of_a_cut_off_reply_is_marked():
    reply = "Q: One?\nA: An onion.\nQ: Two?\nA: A kni"
    assert [qa.cut_off for qa in pq.candidates(1, reply, True, "")] == [False, True]
    assert [qa.cut_off for qa in pq.candidates(1, reply, False, "")] == [False, False]


# --- the filter ---------------------------------------------------------------------------------

@pytest.mark.parametrize("qa, reason", [
    (pq.QA(1, "What is cut?", "A kni", cut_off=True), "truncated"),
    (pq.QA(1, "What is cut?", ""), "malformed"),
    (pq.QA(2, "", "Video 1."), "malformed"),
    (pq.QA(3, "Do they share the main action?", ""), "malformed"),
    (pq.QA(1, "What knife is used?", "It is not mentioned in the description."), "about_the_text"),
    (pq.QA(1, "Which description mentions a board?", "The first one."), "about_the_text"),
    (pq.QA(2, "What does Video 1 use?", "A chef's knife."), "not_which_question"),
    (pq.QA(2, "Which video uses a knife?", "Video 1 and Video 2."), "not_one_video"),
    (pq.QA(2, "Which video uses a knife?", "Both of them."), "not_one_video"),
    (pq.QA(2, "Which video uses a knife?", "The chef."), "not_one_video"),
    (pq.QA(1, "How do they cut?", " ".join(["chop"] * 31)), "too_long"),
    (pq.QA(1, "What colour is the onion in Video 2?", "Purple."), "unsupported"),
    (pq.QA(2, "Which video uses a blade?", "Video 1, with a steel blender jar."), "unsupported"),
    (pq.QA(1, "what tool is used in video 1", "A chef's knife."), "duplicate_question"),
    (pq.QA(2, "Which clip shows a knife used to chop the red onion?", "Video 1."), "duplicate_question"),
])
def test_each_drop_reason(qa, reason):
    kept = {pq.question_key("What tool is used in Video 1?"),
            pq.question_key("Which video shows chopping the red onion with a knife?")}
    assert pq.drop_reason(qa, pq.content_stems(f"{KNIFE} {PROCESSOR}"), kept, 30) == reason


@pytest.mark.parametrize("qa", [
    pq.QA(1, "What tool is used in Video 2?", "A food processor."),
    pq.QA(1, "How do they cut?", "Video 1 chops with a knife; Video 2 dices in a processor."),
    pq.QA(1, "How does Video 1 cut the onion?", "By chopping it."),  # stems: chop ~ chops
    pq.QA(2, "Which video uses a machine?", "Video 2."),
    pq.QA(2, "Which clip has a red onion?", "The first one."),
    pq.QA(2, "In which video is the onion white?", "In the second video."),
    pq.QA(2, "Which video shows a wooden board?", "the former"),
    pq.QA(3, "Do the two videos share a similar main action?", "YES"),
    pq.QA(1, " ".join(["Why"] * 3) + "?", " ".join(["knife"] * 30)),  # 30 words: not too long
])
def test_good_qa_is_kept(qa):
    assert pq.drop_reason(qa, pq.content_stems(f"{KNIFE} {PROCESSOR}"), set(), 30) is None


def test_questions_that_differ_in_a_comparison_or_a_video_are_not_duplicates():
    keys = {pq.question_key(q) for q in ["Which video uses more onion?", "Which video uses less onion?",
                                          "What tool does Video 1 use?", "What tool does Video 2 use?",
                                          "Which video chops the onion before the board is wiped?"]}
    assert len(keys) == 5


def test_filter_keeps_the_first_good_copy_and_counts_every_drop():
    items = [pq.QA(1, "What tool?", "Purple magic."), pq.QA(1, "What tool?", "A knife."),
             pq.QA(1, "What  TOOL??", "A food processor."), pq.QA(2, "Which video?", "Both.")]
    kept, dropped = pq.filter_qa(items, KNIFE, PROCESSOR, 30)
    assert kept == [items[1]]
    assert dropped == {"unsupported": 1, "duplicate_question": 1, "not_one_video": 1}


# --- prompts and descriptions -------------------------------------------------------------------

PAPER_SYSTEM = ('You are an AI assistant that asks questions comparing two videos based on their descriptions, '
                'and then answers them. Each question must be on a new line starting with "Q:" for question and '
                '"A:" for the answer. Use diverse language. Video 1: {d1} Video 2: {d2}')
PAPER_USER = {
    1: "Summarize the differences and generate 3 question-answer pairs comparing the two videos. "
       "Answers should be short and concise.",
    2: 'Generate 3 question-answer pairs of the form "Which video ... ?". The answer must only refer to one '
       'of the two videos.',
    3: "Do the two videos share a similar main action? Answer with a single word: YES or NO.",
}


@pytest.mark.parametrize("qa_type", pq.QA_TYPES)
def test_the_packaged_prompts_are_the_papers_words(qa_type):
    prompt = pq.load_prompt(pq.PROMPT_NAMES[qa_type], needs=("d1", "d2"))
    assert prompt.render(d1="{d1}", d2="{d2}") == [{"role": "system", "content": PAPER_SYSTEM},
                                                   {"role": "user", "content": PAPER_USER[qa_type]}]
    assert pq.first_question(PAPER_USER[3]) == "Do the two videos share a similar main action?"


def test_clip_text_prefers_the_description_then_the_narration_then_the_keystep():
    assert pq.clip_text({"description": {"step": " Cuts  it. "}}, "cut") == ("Cuts it.", "description")
    assert pq.clip_text({"description": "Cuts it."}, "cut") == ("Cuts it.", "description")
    assert pq.clip_text({"narration": "now slice it"}, "cut") == (
        'Step: cut. The narrator says: "now slice it"', "keystep+narration")
    assert pq.clip_text({"description": {"step": ""}}, "cut") == ("Step: cut.", "keystep")


def test_a_pair_without_any_description_is_an_error_and_one_missing_side_falls_back():
    with pytest.raises(RecordError) as info:
        pq.pair_texts(pair("p", None, None))
    assert info.value.kind == "missing_description"
    d1, d2, sources = pq.pair_texts(pair("p", KNIFE, None))
    assert (d1, d2) == (KNIFE, "Step: chop onion.")
    assert sources == {"reference": "description", "candidate": "keystep"}
    with pytest.raises(RecordError, match="no 'candidate' clip"):
        pq.pair_texts({"id": "p", "reference": {}, "keystep": "x"})


@pytest.mark.parametrize("text, types", [("1,2,3", (1, 2, 3)), ("3", (3,)), (" 2, 1", (2, 1))])
def test_types_parse(text, types):
    assert parse_types(text) == types
    assert pq.PairQAConfig(llm=SMOL, types=types).types == types


@pytest.mark.parametrize("types", [(), (4,), (1, 1), (0, 2)])
def test_bad_types_are_refused(types):
    with pytest.raises(ValueError, match="--types must list"):
        pq.PairQAConfig(llm=SMOL, types=types)
    with pytest.raises(ValueError, match="--types must list"):
        parse_types("one,2")


def test_prompt_overrides_name_their_type(tmp_path):
    assert prompt_overrides(["2=a.txt"], (1, 2)) == ((2, Path("a.txt")),)
    assert prompt_overrides(["2=a.txt", "b.txt"], (2,)) == ((2, Path("b.txt")),)  # the last one wins
    assert prompt_overrides(["1=x=y.txt"], (1, 3)) == ((1, Path("x=y.txt")),)
    with pytest.raises(ValueError, match="say which prompt type"):
        prompt_overrides(["a.txt"], (1, 2))
    path = tmp_path / "p.txt"
    path.write_text("### user\n${d1} ${d2}\n")
    with pytest.raises(ValueError, match="type 3 is not among --types"):
        pq.PairQAConfig(llm=SMOL, types=(1, 2), prompts=((3, path),))


# --- the stage on a fake LLM --------------------------------------------------------------------

class ScriptedLLM:
    """A stand-in LLM that answers each prompt type with a fixed reply and records its calls."""

    n_ctx = 4096

    def __init__(self, replies: dict[int, str], finish: str = "stop"):
        self.replies, self.finish, self.calls = replies, finish, []

    def count_message_tokens(self, messages) -> int:
        return sum(len(m["content"]) // 4 + 8 for m in messages)

    def chat(self, messages, schema=None, max_tokens=0, temperature=0.0, seed=0):
        qa_type = next(t for t, text in PAPER_USER.items() if messages[-1]["content"] == text)
        self.calls.append({"type": qa_type, "system": messages[0]["content"], "schema": schema,
                           "max_tokens": max_tokens, "temperature": temperature, "seed": seed})
        return ChatReply(self.replies[qa_type], 0, 0, self.finish)


GOOD_REPLIES = {
    1: "Video 1 chops by hand; Video 2 uses a machine.\n\nQ: What tool does Video 1 use?\nA: A chef's knife.\n"
       "Q: What colour is the onion in Video 2?\nA: Purple.\nQ: What tool does video 1 use\nA: A knife.",
    2: "1. Q: Which video uses a food processor?\n   A: Video 2\n2. Q: Which video has a red onion?\n"
       "   A: Both videos.\n3. Q: Which video shows a wooden board?\n   A: The first video.",
    3: "Yes.",
}


@pytest.fixture()
def scripted(monkeypatch):
    def install(replies=GOOD_REPLIES, finish="stop"):
        llm = ScriptedLLM(replies, finish)
        monkeypatch.setattr(pq.PairQAConfig, "load_llm", lambda self: llm)
        return llm
    return install


def test_one_call_per_type_and_the_kept_qa_with_their_counts(scripted):
    llm = scripted()
    out = pq.pair_qa(pair("p1", KNIFE, PROCESSOR), pq.PairQAConfig(llm=SMOL))
    assert [c["type"] for c in llm.calls] == [1, 2, 3]
    assert all(c["schema"] is None and c["temperature"] == 0.0 for c in llm.calls)  # free text, greedy
    assert llm.calls[0]["system"] == PAPER_SYSTEM.format(d1=KNIFE, d2=PROCESSOR)
    assert [c["max_tokens"] for c in llm.calls] == [384, 384, pq.YES_NO_MAX_TOKENS]
    assert out["qa"] == [
        {"type": 1, "q": "What tool does Video 1 use?", "a": "A chef's knife."},
        {"type": 2, "q": "Which video uses a food processor?", "a": "Video 2"},
        {"type": 2, "q": "Which video shows a wooden board?", "a": "The first video."},
        {"type": 3, "q": "Do the two videos share a similar main action?", "a": "YES"}]
    dropped = out["qa_stats"].pop("dropped_items")  # the QA themselves, each with its reason, in reply order
    assert out["qa_stats"] == {
        "model": SMOL, "sources": {"reference": "description", "candidate": "description"},
        "generated": {"1": 3, "2": 3, "3": 1}, "kept": {"1": 1, "2": 2, "3": 1},
        "dropped": {"duplicate_question": 1, "not_one_video": 1, "unsupported": 1}}
    assert [(d["type"], d["reason"]) for d in dropped] == [(1, "unsupported"), (1, "duplicate_question"),
                                                           (2, "not_one_video")]
    assert dropped[0] == {"type": 1, "q": "What colour is the onion in Video 2?", "a": "Purple.", "reason": "unsupported"}


def test_types_select_the_prompts_and_the_seed_is_per_record(scripted):
    llm = scripted()
    config = pq.PairQAConfig(llm=SMOL, types=(3, 2), temperature=0.7, seed=5)
    out = pq.pair_qa(pair("p1", KNIFE, PROCESSOR), config)
    assert [c["type"] for c in llm.calls] == [3, 2]
    assert {c["seed"] for c in llm.calls} == {pq.record_seed(5, "p1") % 2**32}
    assert all(c["temperature"] == 0.7 for c in llm.calls)
    assert set(out["qa_stats"]["generated"]) == {"3", "2"} and {q["type"] for q in out["qa"]} == {2, 3}
    pq.pair_qa(pair("p2", KNIFE, PROCESSOR), config)
    assert llm.calls[-1]["seed"] != llm.calls[0]["seed"]


def test_a_pair_whose_qa_are_all_dropped_still_gets_qa_and_stats(scripted):
    scripted({1: "Sorry, I cannot compare videos.", 2: "Q: Which video?\nA: Neither.", 3: "Perhaps."})
    out = pq.pair_qa(pair("p", KNIFE, PROCESSOR), pq.PairQAConfig(llm=SMOL))
    assert out["qa"] == []
    assert out["qa_stats"]["generated"] == {"1": 0, "2": 1, "3": 1}
    assert out["qa_stats"]["dropped"] == {"malformed": 1, "not_one_video": 1}


def test_the_last_qa_of_a_reply_cut_off_by_max_tokens_is_dropped(scripted):
    scripted({1: "Q: What tool does Video 1 use?\nA: A chef's knife.\nQ: What does Video 2 use?\nA: A food"},
             finish="length")
    out = pq.pair_qa(pair("p", KNIFE, PROCESSOR), pq.PairQAConfig(llm=SMOL, types=(1,)))
    assert [q["a"] for q in out["qa"]] == ["A chef's knife."]
    assert out["qa_stats"]["dropped"] == {"truncated": 1}


def test_a_prompt_file_replaces_one_type(tmp_path, scripted):
    path = tmp_path / "which.txt"
    path.write_text("### system\nCompare. One: ${d1} Two: ${d2}\n### user\n" + PAPER_USER[2] + "\n")
    llm = scripted()
    pq.pair_qa(pair("p", KNIFE, PROCESSOR), pq.PairQAConfig(llm=SMOL, prompts=((2, path),)))
    assert [c["system"].startswith("Compare. One: The person chops") for c in llm.calls] == [False, True, False]
    path.write_text("### user\nno descriptions here ${d1}\n")
    with pytest.raises(ValueError, match=re.escape("never uses ${d2}")):
        pq.PairQAConfig(llm=SMOL, prompts=((2, path),))


def test_descriptions_too_long_for_the_context_are_a_clear_error(scripted):
    llm = scripted()
    with pytest.raises(RecordError) as info:
        pq.pair_qa(pair("p", KNIFE * 400, PROCESSOR), pq.PairQAConfig(llm=SMOL))
    assert info.value.kind == "context_too_small" and llm.calls == []


# --- the stage through the CLI ------------------------------------------------------------------

def test_bad_options_stop_the_stage_before_any_record(tmp_path):
    for args, code, message in [(["--types", "1,4"], 2, "--types"), (["--model", "no-such-model"], 5, "no-such-model"),
                                (["--prompt", "x.txt"], 2, "say which prompt type"),
                                (["--max-new-tokens", "5000"], 2, "--max-new-tokens")]:
        done = run_vi("pair-qa", *args, stdin=json.dumps(pair("p", KNIFE, PROCESSOR)) + "\n")
        assert done.returncode == code and message in done.stderr and done.stdout == "", (args, done.stderr)


PAIRS = [pair("onion", KNIFE, PROCESSOR),
         pair("narrated", None, PROCESSOR, narration="now I chop the onion really fine with my knife"),
         pair("empty", None, None)]
UPSTREAM = {"id": "broken", "errors": [{"stage": "pair", "kind": "x", "message": "y"}]}


@pytest.mark.slow
def test_pair_qa_on_a_small_llm_keeps_the_contract_and_is_deterministic(tmp_path):
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [*PAIRS, UPSTREAM]))
    args = ["pair-qa", "--model", SMOL, "--max-new-tokens", "64", "-i", str(src), "-q"]
    first, second = run_vi(*args), run_vi(*args)
    assert first.returncode == 3, first.stderr  # "empty" fails, the rest succeed
    assert first.stdout == second.stdout  # greedy decoding: same input, same QA
    out = {r["id"]: r for r in jsonl(first.stdout)}
    assert list(out) == ["onion", "narrated", "empty", "broken"]
    assert out["empty"]["errors"][-1]["kind"] == "missing_description" and "qa" not in out["empty"]
    assert out["broken"] == UPSTREAM
    assert out["narrated"]["qa_stats"]["sources"] == {"reference": "keystep+narration", "candidate": "description"}
    for rid in ("onion", "narrated"):
        record, stats = out[rid], out[rid]["qa_stats"]
        assert record["reference"] == PAIRS[0 if rid == "onion" else 1]["reference"]  # passed through
        assert set(stats["generated"]) == set(stats["kept"]) == {"1", "2", "3"}
        assert stats["generated"]["3"] == 1
        assert sum(stats["generated"].values()) == len(record["qa"]) + sum(stats["dropped"].values())
        assert set(stats["dropped"]) <= set(pq.DROP_REASONS)
        for qa in record["qa"]:
            assert qa["type"] in (1, 2, 3) and qa["q"] and qa["a"]
            assert qa["type"] != 3 or qa["a"] in ("YES", "NO")


# --- quality with the default model (Qwen2.5-Coder-1.5B) ---------------------------------------

@pytest.mark.slow
def test_the_default_model_writes_well_formed_kept_qa_of_every_type():
    pairs = [pair("onion", KNIFE, PROCESSOR),
             pair("tyre", "The person levers the tyre off the rim with two plastic tyre levers.",
                  "The person pulls the tyre off the rim by hand, without any tools.")]
    done = run_vi("pair-qa", "-q", stdin="".join(json.dumps(r) + "\n" for r in pairs))
    assert done.returncode == 0, done.stderr
    for record in jsonl(done.stdout):
        assert {qa["type"] for qa in record["qa"]} == {1, 2, 3}, record["qa_stats"]


def test_the_quality_report_counts_well_formed_kept_and_agreement():
    from vi.evaluation.stepdiff.pair_qa_quality import summarise

    results = [
        {"model": "m", "pair": "a", "type": 2, "seconds": 2.0, "expected": None,
         "qa": [{"q": "Which?", "a": "Video 1", "dropped": None}, {"q": "Which?", "a": "", "dropped": "malformed"},
                {"q": "Which?", "a": "Both", "dropped": "not_one_video"}]},
        {"model": "m", "pair": "b", "type": 2, "seconds": 4.0, "expected": None, "qa": []},  # a reply without QA
        {"model": "m", "pair": "a", "type": 3, "seconds": 1.0, "expected": "NO",
         "qa": [{"q": "Same?", "a": "YES", "dropped": None}]},
        {"model": "m", "pair": "b", "type": 3, "seconds": 1.0, "expected": "NO",
         "qa": [{"q": "Same?", "a": "NO", "dropped": None}]},
    ]
    two, three = summarise(results)
    assert two == {"model": "m", "type": 2, "calls": 2, "qa": 3, "qa_per_call": 1.5, "well_formed": 2 / 3,
                   "kept": 1 / 3, "dropped": {"malformed": 1, "not_one_video": 1}, "seconds_per_call": 3.0}
    assert three["agreement"] == 0.5 and three["kept"] == 1.0


def test_the_quality_report_judges_saved_replies_like_the_stage():
    from vi.evaluation.stepdiff.pair_qa_quality import judge

    replies = {1: "Q: Which video uses a food processor?\nA: Video 2 does.", 2: GOOD_REPLIES[2], 3: "NO"}
    results = [{"model": "m", "pair": "onion", "type": t, "reply": r, "finish": "stop"} for t, r in replies.items()]
    judge(results, max_answer_words=30)
    fates = [[(q["a"], q["dropped"]) for q in r["qa"]] for r in results]
    assert fates == [[("Video 2 does.", None)],
                     [("Video 2", "duplicate_question"), ("Both videos.", "not_one_video"), ("The first video.", None)],
                     [("NO", None)]]
