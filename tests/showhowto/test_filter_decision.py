"""vi filter-instructional asks the paper's question and its opposite, and combines them so that a
model's preferred answer word cannot decide the label (issue 38). Small fake backends, no model."""

from __future__ import annotations

import itertools
import json

import pytest

from vi.core.models.llm import ChatReply
from vi.pipelines.common.chat_prompt import load_prompt
from vi.pipelines.showhowto import filter_instructional as fi

SMOL = "smollm2-135m"
VLOG = {"id": "moving", "title": "MOVING VLOG: packing up",
        "transcript": {"segments": [{"start": 0.0, "end": 30.0, "text": "so today is moving day, I wrapped the "
                                     "plates and my sister came over and we had pizza on the floor"}]}}
HOWTO = {"id": "hinge", "title": "Fix a squeaky hinge",
         "transcript": {"segments": [{"start": 0.0, "end": 30.0, "text": "tap the pin out with a nail, wipe it, "
                                      "put a drop of oil on it and tap it back in"}]}}


def negated(messages: list[dict]) -> bool:
    """Whether the messages ask the opposite question (its system turn says when Yes means not a how-to)."""
    return "mainly about something other than teaching a task" in messages[0]["content"]


class AlwaysYes:
    """A judge that answers Yes to any question whatever the video, explaining what the video is."""

    name = "always-yes"
    n_ctx = 4096

    def __init__(self, explanation: str, opposite_explanation: str | None = None):
        self.explanation, self.calls = explanation, []
        self.opposite_explanation = opposite_explanation or explanation  # what it says to the opposite question

    def chat(self, messages, *, schema=None, max_tokens=512, temperature=0.0, seed=0):
        self.calls.append(messages)
        said = self.opposite_explanation if negated(messages) else self.explanation
        return ChatReply(json.dumps({"explanation": said, "answer": "Yes"}), 0, 0, "stop")


class ScoringAlwaysYes(AlwaysYes):
    """Always Yes when sampled, and scored answers with a bias toward Yes (BIAS) plus what the video
    says (`evidence` > 0: a how-to): log-odds of Yes = BIAS + evidence to the paper's question,
    BIAS - evidence to its opposite."""

    BIAS = 3.0

    def __init__(self, explanation: str, evidence: float, opposite_explanation: str | None = None):
        super().__init__(explanation, opposite_explanation)
        self.evidence, self.scored = evidence, []

    def option_log_probs(self, messages, options, reply_prefix=""):
        assert list(options) == ["Yes", "No"] and reply_prefix == fi.ANSWER_FIRST
        self.scored.append(messages)
        odds = self.BIAS + (-self.evidence if negated(messages) else self.evidence)
        return [odds, 0.0]


class Truthful:
    """Answers each question as it should be answered for a video that is (or is not) a how-to."""

    name = "truthful"
    n_ctx = 4096

    def __init__(self, howto: bool):
        self.howto = howto

    def chat(self, messages, *, schema=None, max_tokens=512, temperature=0.0, seed=0):
        yes = self.howto != negated(messages)
        what = "It shows step by step how to oil a hinge." if self.howto else "It is a vlog of a moving day."
        return ChatReply(json.dumps({"explanation": what, "answer": "Yes" if yes else "No"}), 0, 0, "stop")


def classify(record: dict, backend, monkeypatch, **options) -> dict:
    monkeypatch.setattr(fi.FilterConfig, "load_llm", lambda self: backend)
    return fi.classify(record, fi.FilterConfig(llm=SMOL, **options))["instructional"]


def test_a_judge_that_always_says_yes_does_not_label_a_vlog_instructional(monkeypatch):
    # Asked the paper's question alone, its Yes is the label, whatever it said of the video
    judge = AlwaysYes("The video is a vlog of the narrator's moving day.")
    alone = classify(VLOG, judge, monkeypatch, ask="paper")
    assert alone["label"] is True and len(judge.calls) == 1
    # Asked both ways (the default), its Yes says "how-to" once and "not a how-to" once: no evidence either
    # way, so it comes out uncertain and set aside, with the explanation of the answer that argued so
    judge = AlwaysYes("The video demonstrates how to pack boxes.", "The video is a vlog of the narrator's moving day.")
    out = classify(VLOG, judge, monkeypatch)
    assert len(judge.calls) == 2 and negated(judge.calls[1]) and not negated(judge.calls[0])
    assert out["label"] is False and out["decision"]["uncertain"] is True
    assert out["decision"]["method"] == "questions disagree; uncertain, set aside"
    assert out["decision"]["paper"]["answer"] == out["decision"]["negated"]["answer"] == "Yes"
    assert "vlog" in out["reason"]


@pytest.mark.parametrize("evidence, label", [(-1.0, False), (1.0, True)])
def test_a_yes_bias_in_the_scored_answers_cancels_and_the_content_decides(monkeypatch, evidence, label):
    # The judge's Yes outweighs the content in each question alone (3 vs 1): it writes Yes to both, and
    # scored alone each question would say Yes. Combined, (paper - opposite) / 2 leaves the content.
    judge = ScoringAlwaysYes("It shows how to pack for a move.", evidence, "It is a vlog of a moving day.")
    out = classify(VLOG if not label else HOWTO, judge, monkeypatch)
    assert out["label"] is label
    assert out["decision"]["score"] == pytest.approx(evidence)
    assert out["decision"]["paper"]["log_odds"] == pytest.approx(3.0 + evidence)
    assert out["decision"]["negated"]["log_odds"] == pytest.approx(3.0 - evidence)
    assert "uncertain" not in out["decision"] and len(judge.scored) == 2
    if label:  # the paper's written Yes agrees: one reply written, the opposite question only scored
        assert out["decision"]["method"] == "log-odds of both questions; the paper's answer agrees"
        assert len(judge.calls) == 1 and "answer" not in out["decision"]["negated"]
    else:  # the paper's Yes is overruled: the opposite question's reply is written for the reason
        assert out["decision"]["method"] == "log-odds of both questions; the paper's answer overruled"
        assert len(judge.calls) == 2 and out["decision"]["negated"]["answer"] == "Yes"


@pytest.mark.parametrize("account, howto", [
    ("The video demonstrates how to make overnight oats, ingredient by ingredient.", True),
    ("The video is a vlog of the narrator's moving day, with physical steps.", False)])
def test_one_account_answered_both_ways_is_read_not_its_answer_words(monkeypatch, account, howto):
    # The model gives the same account of the video to both questions and its favourite word to each (set 9's
    # overnight oats, set 14's range hood, filter set 3's oven racks): the answer words say nothing, so the
    # accounts are read for the paper's criterion, whatever the near-zero score says
    for evidence in (-0.05, 0.05):
        opposite = account.split(",")[0] + ", as the narrator goes."
        judge = ScoringAlwaysYes(account, evidence, opposite)
        out = classify(HOWTO if howto else VLOG, judge, monkeypatch)
        if evidence > 0:  # the paper's Yes agrees with the score: the opposite is never written, nothing to read
            assert out["decision"]["method"] == "log-odds of both questions; the paper's answer agrees"
            continue
        assert out["label"] is howto and out["decision"]["one_account"] is True
        assert out["reason"] == (account if howto else opposite)  # an explanation that says what the label does
    if not howto:
        return
    # where the accounts differ (a how-to's to one question, a vlog's to the other), the opposite's Yes
    # overrules as before
    judge = ScoringAlwaysYes(account, -0.05, "It is a vlog of a moving day, not a demonstration.")
    other = classify(HOWTO, judge, monkeypatch)
    assert "one_account" not in other["decision"] and other["label"] is False
    assert other["decision"]["method"] == "log-odds of both questions; the paper's answer overruled"


class SaysNo(ScoringAlwaysYes):
    """Writes No to the paper's question and Yes to its opposite (not a how-to), whatever its accounts say;
    scored as ScoringAlwaysYes."""

    def chat(self, messages, *, schema=None, max_tokens=512, temperature=0.0, seed=0):
        self.calls.append(messages)
        said = self.opposite_explanation if negated(messages) else self.explanation
        return ChatReply(json.dumps({"explanation": said, "answer": "Yes" if negated(messages) else "No"}), 0, 0,
                         "stop")


CABINET = ("The video shows how to replace cabinet knobs with pulls using a drill template, not a demonstration "
           "of how to do a task with physical steps.")


@pytest.mark.parametrize("opposite, howto", [
    ("The video shows how to swap old cabinet knobs for pulls, drilling through a template.", True),
    ("It is a renovation vlog of the narrator's kitchen.", False)])
def test_a_no_against_its_own_account_has_the_opposite_written_and_the_accounts_read(monkeypatch, opposite, howto):
    # Extract-steps' screen on blind set 29's cabinet pulls: the paper's No, written under an account that says
    # the video shows how to do the task, near a zero score that agrees with the No: the how-to was refused with
    # a reason that argues for one. The opposite question is written too, and where both accounts say how-to,
    # that is the label; where the opposite's says something else, the No stands with the reason that argues it.
    judge = SaysNo(CABINET, -0.2, opposite)
    out = classify(HOWTO, judge, monkeypatch)
    assert len(judge.calls) == 2 and negated(judge.calls[1])  # the opposite written, only for its account
    assert out["label"] is howto
    if howto:
        assert out["decision"]["method"] == "a No against its own account: the accounts read"
        assert out["decision"]["one_account"] is True
    else:
        assert out["decision"]["method"] == "log-odds of both questions; the paper's answer agrees, not its account"
        assert out["reason"] == opposite  # not the paper's account of a how-to
    # before: the opposite only scored, the score and the paper's word decide, the how-to's account the reason
    unread = fi.decide(fi.Answer.from_json(out["decision"]["paper"]),
                       fi.Answer(None, log_odds=out["decision"]["negated"]["log_odds"]))
    assert unread["label"] is False and unread["reason"] == CABINET
    # a No whose account does not claim the task is not asked again
    judge = SaysNo("The video is a vlog of a kitchen makeover.", -0.2)
    assert classify(VLOG, judge, monkeypatch)["label"] is False and len(judge.calls) == 1


def test_an_account_claims_a_task_in_the_papers_words_unless_it_negates_them():
    assert fi.claims_task("The video demonstrates how to clean a range hood filter, with physical steps.")
    assert fi.claims_task("The narrator teaches knife skills") and fi.claims_task("It shows step by step a repair")
    assert not fi.claims_task("The video shows a day in Lisbon, how to get there and what to eat.")  # after the head
    assert not fi.claims_task("It is not a demonstration of how to do a task")
    assert not fi.claims_task("The video is about a marathon runner's diet")


def test_accounts_are_read_only_where_the_written_answers_disagree():
    same = "The video demonstrates how to oil a hinge."
    agree = fi.decide(fi.Answer(True, same, 0.5), fi.Answer(False, same, 1.5))
    assert agree["decision"]["method"] == "both written answers agree, against the log-odds"
    unscored = fi.decide(fi.Answer(True, same), fi.Answer(True, same))
    assert unscored["label"] is True and unscored["decision"]["one_account"] is True
    before = fi.decide(fi.Answer(True, same), fi.Answer(True, same), read_accounts=False)
    assert before["decision"]["method"] == "questions disagree; uncertain, set aside"
    apart = fi.decide(fi.Answer(True, same), fi.Answer(True, "It is a vlog."))
    assert apart["decision"]["method"] == "questions disagree; uncertain, set aside"
    assert apart["reason"] == "It is a vlog."


def test_written_answers_that_agree_outweigh_scores_that_say_otherwise():
    paper = fi.Answer(True, "It shows how to oil a hinge.", 0.5)
    opposite = fi.Answer(False, "It teaches how to oil a hinge.", 1.5)  # No to "is it something else?"
    out = fi.decide(paper, opposite)
    assert out["label"] is True and out["decision"]["method"] == "both written answers agree, against the log-odds"
    assert out["decision"]["score"] == pytest.approx(-0.5)


@pytest.mark.parametrize("howto", [True, False])
def test_answers_that_agree_decide_and_the_reason_is_the_papers_question(monkeypatch, howto):
    out = classify(HOWTO if howto else VLOG, Truthful(howto), monkeypatch)
    assert out["label"] is howto and out["decision"]["method"] == "both questions agree"
    assert out["reason"] == out["decision"]["paper"]["explanation"]
    assert set(out) == {"label", "reason", "model", "decision"}


@pytest.mark.parametrize("paper_yes, negated_yes, scores", list(itertools.product(
    [True, False], [True, False], [None, (0.5, 2.0), (2.0, 0.5)])))
def test_the_reason_is_always_an_explanation_that_argues_for_the_label(paper_yes, negated_yes, scores):
    paper_odds, negated_odds = scores or (None, None)
    paper = fi.Answer(paper_yes, "paper says " + ("how-to" if paper_yes else "not"), paper_odds)
    other = fi.Answer(negated_yes, "opposite says " + ("not" if negated_yes else "how-to"), negated_odds)
    out = fi.decide(paper, other)
    argues = {paper.explanation: paper_yes, other.explanation: not negated_yes}  # explanation -> says how-to
    assert argues[out["reason"]] is out["label"]


def test_the_opposite_question_has_the_papers_examples_with_their_answers_flipped():
    def turns(name: str) -> list[tuple[str, str]]:
        rendered = load_prompt(name, None, ("title", "transcript")).render(title="t", transcript="x")
        return [(m["role"], m["content"]) for m in rendered[1:]]

    paper, opposite = turns("filter_instructional"), turns("filter_instructional_negated")
    assert [r for r, _ in paper] == [r for r, _ in opposite]
    for (role, said), (_, flipped) in zip(paper, opposite):
        if role == "user":
            assert said == flipped
        else:
            a, b = json.loads(said), json.loads(flipped)
            assert a["explanation"] == b["explanation"] and {a["answer"], b["answer"]} == {"Yes", "No"}
    assert list(json.loads(opposite[1][1])) == ["explanation", "answer"]  # the explanation first, as the paper's


def test_a_bad_ask_is_refused_before_any_record():
    with pytest.raises(ValueError, match="--ask must be one of both, paper"):
        fi.FilterConfig(llm=SMOL, ask="twice")
