"""vi judge progression --debias: a judge that prefers one letter whatever the captions is not believed.

Both orders (the paper's prompt and its twin with A and B swapped) cancel a preferred letter; contextual
calibration divides the scored letters by those content-free captions get; the sentence embedder decides
what the orders leave undecided. Fakes: a chat judge that always says one letter, a likelihood judge with
scripted letter probabilities, an embedder with scripted similarities; and the real minilm-l6."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from vi.core.models.llm import ChatReply
from vi.pipelines.progresscaptioner import judge_progression as jp
from vi.pipelines.progresscaptioner import keyframes as kf

SMOL = "smollm2-135m"
SWAPPED_MARK = "A. No Action Progression"  # only the swapped eval prompt says this
SWAPPED_PSEUDO_MARK = "A. There are noticeable changes"


def is_swapped(messages) -> bool:
    text = messages[-1]["content"]
    return SWAPPED_MARK in text or SWAPPED_PSEUDO_MARK in text


class AlwaysSays:
    """A chat judge (no likelihoods, like an openai: server) that answers one letter whatever it is asked."""

    n_ctx = 2048

    def __init__(self, letter: str):
        self.letter, self.asked = letter, []

    def count_message_tokens(self, messages) -> int:
        return sum(len(m["content"]) // 4 + 8 for m in messages)

    def chat(self, messages, schema=None, max_tokens=0, temperature=0.0, seed=0):
        self.asked.append(messages)
        return ChatReply(json.dumps({"answer": self.letter}), 0, 0, "stop")


class ScoredJudge(AlwaysSays):
    """A likelihood judge: letter probabilities scripted per order, for content-free captions and others."""

    def __init__(self, paper, swapped, free_paper, free_swapped):
        super().__init__("A")
        self.table = {(False, False): paper, (True, False): swapped, (False, True): free_paper,
                      (True, True): free_swapped}
        self.scored = []

    def option_log_probs(self, messages, options, reply_prefix=""):
        text = messages[-1]["content"]
        free = f"Image 1: {jp.CONTENT_FREE} Image 2: {jp.CONTENT_FREE}" in text
        self.scored.append((is_swapped(messages), free, reply_prefix))
        probs = self.table[is_swapped(messages), free]
        return [math.log(probs[o]) for o in options]


class ChannelJudge(AlwaysSays):
    """A likelihood judge whose letter is always A and whose log-likelihood of a second caption is scripted:
    `gain[caption]` more after each wording of the "later" hypothesis than after the "same" one's."""

    def __init__(self, gain: dict[str, float]):
        super().__init__("A")
        self.gain, self.scored = gain, []

    def count_tokens(self, text: str) -> int:
        return len(text) // 4

    def option_log_probs(self, messages, options, reply_prefix=""):
        text = messages[-1]["content"]
        later = any(mark in text for mark in ("taken later", "the action has advanced", "noticeable changes"))
        (caption,) = options
        self.scored.append((later, caption, reply_prefix, text))
        return [-20.0 + (self.gain[caption] if later else 0.0)]


class FakeEmbedder:
    """encode() gives two unit vectors whose dot product is the similarity scripted for the first text."""

    def __init__(self, similarity: dict[str, float]):
        self.similarity = similarity

    def encode(self, texts):
        s = self.similarity[texts[0]]
        return np.array([[1.0, 0.0], [s, math.sqrt(1 - s * s)]], np.float32)


def record(texts: list[str], **extra) -> dict:
    return {"id": "seq", "frames": [{"time": float(i)} for i in range(len(texts))], "action": "cut a lemon",
            "captions": {"model": "m", "items": [{"frame": i, "text": t} for i, t in enumerate(texts)]}, **extra}


def config(**options) -> jp.ProgressionConfig:
    return jp.ProgressionConfig(llms=(SMOL,), prompt="eval", device="cpu", **options)


def test_always_a_is_uncertain_not_progressed_under_both_orders():
    texts = ["A whole lemon on a board.", "The lemon cut in half.", "The lemon cut in half, seen closer."]
    judge = AlwaysSays("A")
    out = jp.judge_record(record(texts), config(debias="orders", embedder="none"), [("j", judge)])["progression"]
    assert [p["change"] for p in out["pairs"]] == [None, None]  # A in the paper's order, A in the swapped one
    assert [p["consensus"] for p in out["pairs"]] == ["C", "C"] and out["distinct"] == [0]
    assert len(judge.asked) == 4 and [is_swapped(m) for m in judge.asked] == [False, True, False, True]
    verdict = out["pairs"][0]["verdicts"]["captions"]["j"]
    assert verdict["letters"] == {"paper": "A", "swapped": "A"} and verdict["method"] == "orders"
    assert "disagree" in verdict["decision"]
    # the old single ask believes it: every pair progressed
    old = jp.judge_record(record(texts), config(debias="none"), [("j", AlwaysSays("A"))])["progression"]
    assert [p["change"] for p in old["pairs"]] == [True, True] and old["distinct"] == [0, 1, 2]


def test_always_a_is_corrected_by_the_embedder(monkeypatch):
    texts = ["A whole lemon on a board.", "The lemon cut in half.", "The lemon cut in half, seen closer."]
    fake = FakeEmbedder({texts[0]: 0.55, texts[1]: 0.93})
    monkeypatch.setattr(jp.ProgressionConfig, "text_embedder", lambda self: fake)
    # --debias channel on a backend without likelihoods falls back to both orders and the embedder
    out = jp.judge_record(record(texts), config(debias="channel", same_state=0.8),
                          [("j", AlwaysSays("A"))])["progression"]
    assert [p["change"] for p in out["pairs"]] == [True, False] and out["distinct"] == [0, 1]
    first, second = (p["verdicts"]["captions"]["j"] for p in out["pairs"])
    assert (first["method"], first["similarity"]) == ("orders+embedder", pytest.approx(0.55, abs=1e-4))
    assert second["letter"] == "B" and "0.930 >= 0.8" in second["decision"]
    assert out["pairs"][1]["answers"] == {"captions": {"j": "B"}}  # answers hold the paper's letter decided


@pytest.mark.parametrize("paper, swapped, similarity, change, method", [
    ("A", "B", None, True, "orders"),  # eval: A progressed, swapped B progressed: agree
    ("B", "A", None, False, "orders"),  # both say no progression
    ("A", "A", None, None, "orders"),  # a preferred letter: disagree, no embedder -> uncertain
    ("B", "B", 0.9, False, "orders+embedder"),  # disagree, alike captions -> same state
    ("B", "B", 0.5, True, "orders+embedder"),  # disagree, unalike captions -> change
    ("C", "B", 0.5, True, "orders+embedder"),  # one order uncertain: undecided, the embedder decides
    ("C", "C", None, None, "orders"),
    ("A", "B", 0.9, False, "orders+embedder"),  # agree on progressed, but the captions say the same thing
    ("B", "A", 0.5, False, "orders+embedder"),  # agree on no progression: stands, however unalike
])
def test_combination_of_the_orders(paper, swapped, similarity, change, method):
    evidence = {"method": "orders", "letters": {"paper": paper, "swapped": swapped}}
    if similarity is not None:
        evidence["similarity"] = similarity
    decided = jp.decide(evidence, "eval", 0.8)
    assert (decided["change"], decided["method"]) == (change, method)
    assert decided["letter"] == {True: "A", False: "B", None: "C"}[change]


def test_none_keeps_the_paper_letter_and_pseudo_meanings():
    assert jp.decide({"method": "none", "letters": {"paper": "A"}}, "eval", 0.8)["change"] is True
    assert jp.decide({"method": "none", "letters": {"paper": "A"}}, "pseudo", 0.8)["change"] is False
    # pseudo: paper B = changed, swapped A = changed
    decided = jp.decide({"method": "orders", "letters": {"paper": "B", "swapped": "A"}}, "pseudo", None)
    assert (decided["change"], decided["letter"]) == (True, "B")
    assert [jp.order_change(x, "pseudo", "swapped") for x in "ABC"] == [True, False, None]


def test_calibration_divides_by_the_content_free_letters():
    probs, free = {"A": 0.7, "B": 0.2, "C": 0.1}, {"A": 0.8, "B": 0.1, "C": 0.1}
    out = jp.calibrated(probs, free)  # ratios .875, 2, 1 over 3.875
    assert out == pytest.approx({"A": 0.875 / 3.875, "B": 2 / 3.875, "C": 1 / 3.875})
    assert jp.normalised([math.log(2), math.log(1), math.log(1)]) == pytest.approx({"A": .5, "B": .25, "C": .25})


def test_scored_judge_calibrated_in_both_orders():
    # The judge prefers A in either order (0.7 raw); content-free captions get A 0.8 in either order:
    # calibrated, the paper's order says B (no progression), the swapped order... A (no progression): agree.
    judge = ScoredJudge(paper={"A": .7, "B": .2, "C": .1}, swapped={"A": .9, "B": .05, "C": .05},
                        free_paper={"A": .8, "B": .1, "C": .1}, free_swapped={"A": .8, "B": .1, "C": .1})
    texts = ["A whole lemon on a board.", "A whole lemon lies on the board.", "Another view of the lemon."]
    out = jp.judge_record(record(texts), config(debias="calibrated", embedder="none"), [("j", judge)])["progression"]
    verdict = out["pairs"][0]["verdicts"]["captions"]["j"]
    assert verdict["method"] == "calibrated" and verdict["change"] is False and verdict["letter"] == "B"
    assert verdict["letters"] == {"paper": "A", "swapped": "A"}  # what the model preferred, raw, kept
    assert verdict["probs"]["paper"] == pytest.approx({"A": .7, "B": .2, "C": .1}, abs=1e-4)
    assert verdict["calibrated"]["paper"]["B"] == pytest.approx(2 / 3.875, abs=1e-4)
    assert out["debias"] == "calibrated" and out["distinct"] == [0]
    # the letters are scored after the constrained reply's opening, and content-free letters once per
    # (order, action): 2 pairs x 2 orders + 2 content-free
    assert {prefix for _, _, prefix in judge.scored} == {jp.REPLY_PREFIX}
    assert len(judge.scored) == 6 and sum(free for _, free, _ in judge.scored) == 2
    assert judge.asked == []  # nothing sampled


def test_backend_without_likelihoods_falls_back_to_orders():
    judge = AlwaysSays("B")
    pj = jp.PairJudge(judge, prompt="eval", debias="calibrated")
    assert not pj.scores_letters
    verdict = pj.verdict("a", "b", action="x")
    assert verdict["method"] == "orders" and verdict["change"] is None and len(judge.asked) == 2


def test_own_prompt_needs_its_swapped_twin(tmp_path):
    own = tmp_path / "own.txt"
    own.write_text("### user\nAction ${action}. 1: ${desc1} 2: ${desc2}. A progressed, B not, C unsure.\n")
    with pytest.raises(ValueError, match="--swapped-prompt-file"):
        config(prompt_file=own, debias="orders")
    assert set(config(prompt_file=own, debias="none").templates) == {"paper"}
    assert set(config(prompt_file=own).templates) == {"paper"}  # the default asks the paper's order only
    assert set(config(prompt_file=own, swapped_prompt_file=own, debias="orders").templates) == {"paper", "swapped"}
    with pytest.raises(ValueError, match="--debias must be one of"):
        config(debias="sometimes")


def test_keyframes_follow_the_debiased_decision(monkeypatch):
    monkeypatch.setattr(kf, "check_llm", lambda settings: None)
    texts = ["The bowl is empty.", "Flour is in the bowl.", "Flour is in the bowl, seen from above."]
    fake = FakeEmbedder({texts[0]: 0.4, texts[1]: 0.9})
    monkeypatch.setattr(kf, "load_embedder", lambda ref, device: fake)
    rec = record(texts)
    # a backend without likelihoods: --debias channel falls back to both orders and the embedder
    out = kf.keyframes(rec, kf.KeyframesConfig(llm=SMOL, debias="channel"), AlwaysSays("A"))
    assert [k["index"] for k in out["keyframes"]] == [0, 1]  # the always-A judge alone would keep all three
    method = out["keyframes_method"]
    assert method["debias"] == "channel" and method["answers"] == ["A", "B"]
    assert [v["method"] for v in method["verdicts"]] == ["orders+embedder"] * 2
    assert [v["letters"]["paper"] for v in method["verdicts"]] == ["A", "A"]
    old = kf.keyframes(rec, kf.KeyframesConfig(llm=SMOL, debias="none"), AlwaysSays("A"))
    assert [k["index"] for k in old["keyframes"]] == [0, 1, 2]
    # a backend that scores: the channel decides, and no embedder is loaded
    monkeypatch.setattr(kf, "load_embedder", lambda ref, device: pytest.fail("channel needs no embedder"))
    scored = kf.keyframes(rec, kf.KeyframesConfig(llm=SMOL, debias="channel"),
                          ChannelJudge({texts[1]: 4.0, texts[2]: -3.0}))
    assert [k["index"] for k in scored["keyframes"]] == [0, 1]
    assert [v["method"] for v in scored["keyframes_method"]["verdicts"]] == ["channel"] * 2


def test_channel_decides_by_the_captions_not_the_letter():
    """A judge whose letter is always A: under --debias channel its letter is kept and has no
    say; the second caption's likelihood as a later moment against as the same moment decides."""
    texts = ["A whole lemon on a board.", "The lemon cut in half.", "The lemon cut in half, seen closer."]
    judge = ChannelJudge({texts[1]: 3.5, texts[2]: -2.0})
    out = jp.judge_record(record(texts), config(debias="channel"), [("j", judge)])["progression"]
    assert out["debias"] == "channel"
    assert [p["change"] for p in out["pairs"]] == [True, False] and out["distinct"] == [0, 1]
    first, second = (p["verdicts"]["captions"]["j"] for p in out["pairs"])
    assert first["method"] == second["method"] == "channel"
    assert first["letters"] == second["letters"] == {"paper": "A"}  # the paper's letter, kept
    assert (first["channel"], second["channel"]) == (pytest.approx(7.0), pytest.approx(-4.0))  # two wordings
    assert second["log_probs"] == {"same": pytest.approx(-20.0), "later": pytest.approx(-22.0),
                                   "same_paper": pytest.approx(-20.0), "later_paper": pytest.approx(-22.0)}
    assert second["letter"] == "B" and "no change" in second["decision"]
    assert out["pairs"][1]["answers"] == {"captions": {"j": "B"}}
    # each second caption is scored whole, as the reply (no prefix), after both hypotheses in both wordings;
    # each names the action and shows the first caption, never the second
    assert [(later, caption) for later, caption, _, _ in judge.scored] == [
        (later, caption) for caption in texts[1:] for later in (False, False, True, True)]
    assert all(prefix == "" for _, _, prefix, _ in judge.scored)
    assert all(texts[0] in text and texts[1] not in text and "cut a lemon" in text
               for _, _, _, text in judge.scored[:4])
    assert "slight object adjustments" in judge.scored[1][3]  # the paper's own words for "no progression"
    assert len(judge.asked) == 2  # the paper's prompt, once per pair
    # the paper's single ask believes the letter: both pairs progressed
    old = jp.judge_record(record(texts), config(debias="none"), [("j", ChannelJudge({}))])["progression"]
    assert [p["change"] for p in old["pairs"]] == [True, True]


def test_channel_under_the_pseudo_prompt_and_its_margin():
    texts = ["A whole lemon on a board.", "The lemon cut in half."]
    judge = ChannelJudge({texts[1]: 0.0})
    out = jp.judge_record(record(texts), jp.ProgressionConfig(llms=(SMOL,), prompt="pseudo", device="cpu",
                                                              debias="channel"), [("j", judge)])["progression"]
    verdict = out["pairs"][0]["verdicts"]["captions"]["j"]
    assert verdict["change"] is False and verdict["letter"] == "A"  # pseudo A: similar; a tie is no change
    assert {later for later, *_ in judge.scored} == {False, True}
    assert all("cut a lemon" not in text for *_, text in judge.scored)  # pseudo names no action
    decided = jp.decide({"method": "channel", "channel": 0.01, "letters": {"paper": "A"}}, "pseudo", None)
    assert (decided["change"], decided["letter"]) == (True, "B")


def test_channel_says_when_the_captions_do_not_fit():
    judge = ChannelJudge({})
    judge.n_ctx = 40
    pj = jp.PairJudge(judge, prompt="eval", debias="channel")
    with pytest.raises(jp.RecordError, match="raise --n-ctx"):
        pj.channel_evidence("a " * 50, "b", action="x", paper="A")


@pytest.mark.slow
def test_real_minilm_tells_a_rewording_from_a_change():
    """With the real embedder, a judge that always says A keeps the frames of a change and drops the
    rewordings; without the embedder (or without both orders) it cannot."""
    pairs = [("A whole lemon lies on the cutting board.", "The lemon has been sliced into thin wheels.", True),
             ("A hand holds a knife next to a whole lemon.", "A whole lemon sits beside a knife held in a hand.",
              False),
             ("The shoe's laces are untied and loose.", "The shoe's laces are tied in a neat bow.", True),
             ("A closed jar of jam stands on the table.",
              "On the table stands a closed jar of jam, seen from the left.", False)]
    embedder = jp.load_embedder("minilm-l6", "cpu")
    judged = [jp.PairJudge(AlwaysSays("A"), prompt="eval", embedder=embedder, same_state=jp.SAME_STATE)
              .verdict(a, b, action="make a snack") for a, b, _ in pairs]
    assert [v["change"] for v in judged] == [truth for _, _, truth in pairs]
    assert all(v["method"] == "orders+embedder" for v in judged)
    alone = [jp.PairJudge(AlwaysSays("A"), prompt="eval", debias="none").verdict(a, b) for a, b, _ in pairs]
    assert [v["change"] for v in alone] == [True] * 4  # the preferred letter, believed


@pytest.mark.slow
def test_real_default_judge_channel_tells_a_rewording_from_a_change():
    """The default judge (qwen2.5-coder-1.5b) on four pairs of the tune split (heldout/judge_pairs_tune.json
    t09, t15, t04, t18): its letter says "progressed" for all four, the two rewordings included; the channel
    (the second caption as a later moment against as the same one) tells them apart."""
    from vi.core.models.catalog import DEFAULT_LLM
    from vi.core.models.chat import LLMSettings, load_llm

    pairs = [("A small hole has been dug in the soil of the garden bed.",
              "A tomato seedling now stands in the hole, with soil pressed around its stem.", "plant a seedling", True),
             ("Two whole eggs sit next to an empty bowl.",
              "The eggs have been cracked and their yolks are in the bowl.", "crack eggs", True),
             ("A brush dipped in white paint is held near a grey, unpainted fence panel.",
              "Seen from a lower angle, the grey fence panel is still unpainted while a hand holds a paintbrush.",
              "paint a fence", False),
             ("A person holds a screwdriver against a loose shelf bracket.",
              "The shelf bracket is still loose; the screwdriver is held slightly higher.", "fix a shelf bracket",
              False)]
    llm = load_llm(LLMSettings(DEFAULT_LLM, n_ctx=2048, threads=2))
    judge = jp.PairJudge(llm, prompt="eval", debias="channel")
    assert judge.scores_captions
    verdicts = [judge.verdict(a, b, action=action) for a, b, action, _ in pairs]
    assert [v["letters"]["paper"] for v in verdicts] == ["A"] * 4  # the letter alone: every pair progressed
    assert [v["change"] for v in verdicts] == [truth for *_, truth in pairs]
    assert all(abs(v["channel"]) > 1.0 for v in verdicts)  # by more than a nat each way


def test_offline_captions_are_judged_by_the_orders_not_the_channel(monkeypatch):
    """The offline captioner's captions are label lists, not descriptions: the channel reads nearly all their
    pairs as no change, so a field of that kind is judged by both orders and the embedder, and says so."""
    from vi.pipelines.progresscaptioner.offline_captioner import KIND

    texts = ["An ImageNet classifier's top labels: lemon (80%).",
             "The scene changed from the previous frame (image-feature distance 0.60). Labels: knife (70%)."]
    fake = FakeEmbedder({texts[0]: 0.4})
    monkeypatch.setattr(jp.ProgressionConfig, "text_embedder", lambda self: fake)
    offline = record(texts)
    offline["captions"]["kind"] = KIND
    offline["captions_vlm"] = {"model": "v", "items": [{"frame": i, "text": t} for i, t in enumerate(texts)]}
    judge = ChannelJudge({texts[1]: -5.0})  # the channel would say no change
    out = jp.judge_record(offline, config(debias="channel"), [("j", judge)])["progression"]
    verdicts = out["pairs"][0]["verdicts"]
    assert verdicts["captions"]["j"]["method"] == "orders+embedder" and verdicts["captions"]["j"]["change"] is True
    assert verdicts["captions_vlm"]["j"]["method"] == "channel" and verdicts["captions_vlm"]["j"]["change"] is False
    assert jp.field_debias("channel", offline["captions"]) == "orders"
    assert jp.field_debias("none", offline["captions"]) == "none"  # an explicit choice stands
    monkeypatch.setattr(kf, "check_llm", lambda settings: None)
    monkeypatch.setattr(kf, "load_embedder", lambda ref, device: fake)
    kept = kf.keyframes(offline, kf.KeyframesConfig(llm=SMOL, debias="channel"), ChannelJudge({texts[1]: -5.0}))
    assert [k["index"] for k in kept["keyframes"]] == [0, 1]
    assert kept["keyframes_method"]["verdicts"][0]["method"] == "orders+embedder"


@pytest.mark.slow
def test_a_pairs_scores_do_not_depend_on_what_the_judge_scored_before():
    """A pair's evidence is the same whatever the judge evaluated before it: the pair before in a shard, none
    after --resume, or its own letter asked first (the stage asks it, the quality scripts pass it in).
    llama.cpp's numbers move with how its cache was filled: on the default judge, reusing the prompts' head the
    pair before left moved the channel by up to half a nat (tune split). On SmolLM2-135M only a cache filled a
    token at a time (as a generated reply fills it) moves them, so the cache here holds the pair's own first
    prompt, filled that way, before each pair is judged again; both scored --debias."""
    from vi.core.models.chat import LLMSettings, load_llm
    from vi.core.models.llm import chat_prompt_tokens

    llm = load_llm(LLMSettings(SMOL, n_ctx=1024, threads=2))
    first, second, action = ("A whole onion lies on the board.", "The onion has been cut into thin rings.",
                             "slice an onion")

    def filled_a_token_at_a_time(judge: jp.PairJudge, order: str) -> None:
        llm.llama.reset()
        for token in chat_prompt_tokens(llm, judge.messages(order, first, second, action, ""))[:-3]:
            llm.llama.eval([token])

    alone = {}
    for debias, order in (("channel", "same"), ("calibrated", "paper")):
        judge = jp.PairJudge(llm, prompt="eval", debias=debias)
        alone[debias] = judge.evidence(first, second, action=action)
        filled_a_token_at_a_time(judge, order)
        assert judge.evidence(first, second, action=action) == alone[debias], debias
    paper = alone["channel"]["letters"]["paper"]
    judge = jp.PairJudge(llm, prompt="eval", debias="channel")
    filled_a_token_at_a_time(judge, "same")
    assert judge.channel_evidence(first, second, action=action, paper=paper) == alone["channel"]


@pytest.mark.slow
def test_the_default_judges_pair_scores_the_same_after_another_pair():
    """The default judge (qwen2.5-coder-1.5b) on two pairs of the tune split (heldout/judge_pairs_tune.json t02,
    t03), scored as the quality scripts score them (the letter passed in): t03's channel after t02 is t03's
    channel alone. Reusing the prompts' head that t02 left in the cache moved it by 0.50 nats."""
    from vi.core.models.catalog import DEFAULT_LLM
    from vi.core.models.chat import LLMSettings, load_llm

    before = ("A person holds a serrated knife next to an uncut loaf of bread.",
              "An uncut loaf of bread is on the board; a hand grips a bread knife beside it.", "slice bread")
    pair = ("A wooden fence panel is bare and weathered grey.", "The fence panel is now coated in fresh white paint.",
            "paint a fence")
    judge = jp.PairJudge(load_llm(LLMSettings(DEFAULT_LLM, n_ctx=2048, threads=2)), prompt="eval", debias="channel")
    alone = judge.channel_evidence(*pair[:2], action=pair[2], paper="A")
    judge.channel_evidence(*before[:2], action=before[2], paper="A")
    assert judge.channel_evidence(*pair[:2], action=pair[2], paper="A") == alone
