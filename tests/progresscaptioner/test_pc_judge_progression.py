"""vi judge progression: the vote (consensus, ties, passed, distinct) with scripted judges, the eval prompt's
action, a judge that answers outside A/B/C (asked again, then an error record), missing caption fields, and
the constrained path on the real SmolLM2 through the command."""

from __future__ import annotations

import json

import pytest
from conftest import jsonl, run_vi
from vi.core.errors import RecordError
from vi.core.models.llm import ChatReply
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.progresscaptioner import judge_progression as jp

SMOL = "smollm2-135m"


class ScriptedLLM:
    """A judge that answers its scripted replies in order (a letter becomes {"answer": letter}); it
    ignores the schema, like a backend that cannot constrain decoding."""

    n_ctx = 2048

    def __init__(self, *replies: str):
        self.replies, self.asked = list(replies), []

    def count_message_tokens(self, messages) -> int:
        return sum(len(m["content"]) // 4 + 8 for m in messages)

    def chat(self, messages, schema=None, max_tokens=0, temperature=0.0, seed=0):
        self.asked.append(messages)
        reply = self.replies.pop(0)
        return ChatReply(json.dumps({"answer": reply}) if len(reply) == 1 else reply, 0, 0, "stop")


def record(n: int = 3, fields=("captions", "captions_b"), **extra) -> dict:
    out = {"id": "seq1", "frames": [{"time": float(i), "path": f"f{i}.jpg"} for i in range(n)], **extra}
    for name in fields:
        out[name] = {"model": "m", "kind": "offline-test",
                     "items": [{"frame": i, "text": f"{name} caption of frame {i}"} for i in range(n)]}
    return out


@pytest.fixture(scope="module")
def config() -> jp.ProgressionConfig:
    # checks the model file only; nothing loads. --debias none: the paper's one ask per pair, so the scripted
    # replies are the votes (the debiased asks are tests/progresscaptioner/test_pc_judge_debias.py's)
    return jp.ProgressionConfig(llms=(SMOL,), device="cpu", debias="none")


def test_consensus_ties_passed_and_distinct(config):
    # Per judge, in order: pair 0 (captions, captions_b), pair 1 (captions, captions_b).
    # Pair 0: captions B B A, captions_b A A B -> 3 B vs 3 A: a tie, no consensus, nobody passes.
    # Pair 1: captions B B B, captions_b A A B -> B 4 to 2: change; captions passes, captions_b (A) fails.
    judges = [("j1", ScriptedLLM("B", "A", "B", "A")), ("j2", ScriptedLLM("B", "A", "B", "A")),
              ("j3", ScriptedLLM("A", "B", "B", "B"))]
    out = jp.judge_record(record(), config, judges)["progression"]
    assert out["judges"] == ["j1", "j2", "j3"] and out["captioners"] == ["captions", "captions_b"]
    tie, change = out["pairs"]
    assert tie["frames"] == [0, 1] and tie["answers"]["captions"] == {"j1": "B", "j2": "B", "j3": "A"}
    assert (tie["consensus"], tie["change"], tie["passed"]) == (None, None, {"captions": False, "captions_b": False})
    assert (change["consensus"], change["change"]) == ("B", True)
    assert change["passed"] == {"captions": True, "captions_b": False}
    assert out["distinct"] == [0, 2]  # frame 1 only tied with frame 0: not kept


def test_letters_as_change_and_c_consensus(config):
    assert [jp.letter_to_change(x, "pseudo") for x in "ABC"] == [False, True, None]
    assert [jp.letter_to_change(x, "eval") for x in "ABC"] == [True, False, None]
    assert jp.letter_to_change(None, "eval") is None
    # C wins the vote: a consensus, but nothing decisive, so no captioner passes and no frame is added
    out = jp.judge_record(record(2, fields=("captions",)), config, [("j", ScriptedLLM("C"))])["progression"]
    assert out["pairs"][0]["consensus"] == "C" and out["pairs"][0]["change"] is None
    assert out["pairs"][0]["passed"] == {"captions": False} and out["distinct"] == [0]


def test_eval_prompt_uses_the_action_or_says_so():
    config = jp.ProgressionConfig(llms=(SMOL,), prompt="eval", device="cpu", debias="none")
    judge = ScriptedLLM("A", "B")
    out = jp.judge_record(record(2, fields=("captions",), action_label="slicing butter"), config, [("j", judge)])
    assert "Action: slicing butter" in judge.asked[0][-1]["content"]
    assert out["progression"]["action"] == "slicing butter" and out["progression"]["pairs"][0]["change"] is True
    out = jp.judge_record(record(2, fields=("captions",)), config, [("j", judge)])  # no action in the record
    assert f"Action: {jp.NO_ACTION}" in judge.asked[1][-1]["content"]
    assert out["progression"]["action"] is None and out["progression"]["distinct"] == [0]  # eval B: no progress


def test_answer_outside_abc_is_asked_again_then_an_error():
    judge = ScriptedLLM("D", "B")  # wrong once, then right: the second ask says what was wrong
    assert jp.judge_pair(judge, "a cup", "a full cup") == "B"
    assert len(judge.asked) == 2 and "does not match the required JSON schema" in judge.asked[1][-1]["content"]
    judge = ScriptedLLM("Z", "The images differ.", "maybe")
    with pytest.raises(RecordError) as caught:
        jp.judge_pair(judge, "a cup", "a full cup", where="record r, captions frames 0-1, judge j: ")
    assert caught.value.kind == "llm_output_invalid"
    assert "record r, captions frames 0-1, judge j" in caught.value.message
    assert "'maybe'" in caught.value.message and len(judge.asked) == 3


def test_missing_captions_and_frames(config):
    with pytest.raises(RecordError, match="no 'captions' field"):
        jp.caption_fields({"id": "x", "frames": []}, ())
    with pytest.raises(RecordError, match="no caption field 'captions_b'"):
        jp.caption_fields(record(fields=("captions",)), ("captions", "captions_b"))
    # a captioner without frame 1's caption is not asked about pairs 0-1 and 1-2, and fails them
    rec = record(3)
    rec["captions_b"]["items"] = [i for i in rec["captions_b"]["items"] if i["frame"] != 1]
    out = jp.judge_record(rec, config, [("j", ScriptedLLM("B", "B"))])["progression"]
    assert [p["answers"]["captions_b"] for p in out["pairs"]] == [None, None]
    assert [p["passed"] for p in out["pairs"]] == [{"captions": True, "captions_b": False}] * 2


def test_window_pairs_are_preferred():
    rec = record(3, fields=())
    rec["captions"] = {"items": [  # --window 2 --keep-both: frame 1's first caption is from (v0, v1)
        {"frame": 0, "text": "w01 zero", "from": [0, 1]}, {"frame": 1, "text": "w01 one", "from": [0, 1]},
        {"frame": 1, "text": "w12 one", "from": [1, 2]}, {"frame": 2, "text": "w12 two", "from": [1, 2]}]}
    first = jp.frame_texts(rec, "captions")
    assert jp.pair_texts(rec, "captions", first, 0) == ("w01 zero", "w01 one")
    assert jp.pair_texts(rec, "captions", first, 1) == ("w12 one", "w12 two")


def test_stage_turns_bad_records_into_errors(tmp_path, monkeypatch):
    config = jp.ProgressionConfig(llms=(SMOL,), captions=("captions_b",), device="cpu", debias="none")
    monkeypatch.setattr(jp.ProgressionConfig, "judges", lambda self: [(SMOL, ScriptedLLM("B", "A"))])
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(record(3)) + "\n" + json.dumps({**record(3, fields=("captions",)), "id": "x"}) + "\n")
    report = run_stage(Stage(jp.STAGE, writes=("progression",), process=lambda r: jp.judge_record(r, config)),
                       iter(jsonl(source.read_text())), StreamOptions(output=tmp_path / "out.jsonl", quiet=True))
    good, bad = jsonl((tmp_path / "out.jsonl").read_text())
    assert (report.ok, report.failed) == (1, 1)
    assert good["progression"]["captioners"] == ["captions_b"] and good["progression"]["distinct"] == [0, 1]
    assert "progression" not in bad and "'captions_b'" in bad["errors"][-1]["message"]


@pytest.mark.slow
def test_real_smollm2_answers_letters(tmp_path):
    rec = record(3, fields=(), action="slicing butter")
    rec["captions"] = {"items": [
        {"frame": 0, "text": "A person holds a knife above a block of butter on a plate."},
        {"frame": 1, "text": "The knife has cut the butter into two slices."},
        {"frame": 2, "text": "The knife has cut the butter into two slices."}]}
    done = run_vi("judge", "progression", "--llm", SMOL, "--threads", "2", "-q", stdin=json.dumps(rec) + "\n",
                  check=True)
    out = jsonl(done.stdout)[0]["progression"]
    letters = [p["answers"]["captions"][SMOL] for p in out["pairs"]]
    assert len(letters) == 2 and set(letters) <= {"A", "B", "C"}
    assert out["distinct"] == [0] + [p["frames"][1] for p in out["pairs"] if p["change"]]
