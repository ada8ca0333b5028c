"""vi judge progression --debias probe: a change probe on the difference of two captions' sentence vectors
decides, not the judge's letter. A judge that always says A is corrected; the paper's letter is kept and only
the paper's prompt is asked; vi keyframes follows the probe; the probe reads only its own embedder's vectors;
the packaged weights are those its training sets give, and the sets that measure it are not among them."""

from __future__ import annotations

import io
import json
from argparse import Namespace

import numpy as np
import pytest
from rich.console import Console

from tests.progresscaptioner.test_pc_judge_debias import SMOL, AlwaysSays, ChannelJudge, config, is_swapped, record
from vi.core.models.linear_probe import LinearProbe
from vi.evaluation.probe_training import file_differences
from vi.evaluation.progresscaptioner import keyframes_quality, train_progression_probe
from vi.pipelines.progresscaptioner import judge_progression as jp
from vi.pipelines.progresscaptioner import keyframes as kf

TEXTS = ["A whole lemon on a board.", "The lemon cut in half.", "The lemon cut in half, seen closer."]


class StateEmbedder:
    """encode() gives each caption a unit vector whose first axis is its object's state (whole 0, cut 1) and
    whose second is its wording: a change moves along the first axis, a rewording along the second."""

    VECTORS = {TEXTS[0]: (0.0, 1.0), TEXTS[1]: (1.0, 0.0), TEXTS[2]: (0.8, 0.6)}

    def encode(self, texts):
        return np.array([self.VECTORS[t] for t in texts], np.float32)


@pytest.fixture
def state_probe(monkeypatch):
    """A probe that reads the first axis of the difference: a state that moved by more than 0.5 is a change."""
    probe = LinearProbe("minilm-l6", (4.0, 0.0), -2.0)
    monkeypatch.setattr(jp, "load_change_probe", lambda: probe)
    monkeypatch.setattr(jp.ProgressionConfig, "text_embedder", lambda self: StateEmbedder())
    return probe


def test_always_a_is_corrected_by_the_change_probe(state_probe):
    judge = AlwaysSays("A")
    out = jp.judge_record(record(TEXTS), config(debias="probe"), [("j", judge)])["progression"]
    assert [p["change"] for p in out["pairs"]] == [True, False] and out["distinct"] == [0, 1]
    first, second = (p["verdicts"]["captions"]["j"] for p in out["pairs"])
    assert first["method"] == second["method"] == "probe"
    assert first["probe"] == pytest.approx(2.0) and second["probe"] == pytest.approx(-2.8)
    assert first["letters"] == second["letters"] == {"paper": "A"}  # the paper's letter, kept, not believed
    assert second["letter"] == "B" and "-2.80: no change" in second["decision"]
    assert len(judge.asked) == 2 and not any(is_swapped(m) for m in judge.asked)  # the paper's prompt once a pair
    # the pseudo prompt's letters mean the other way round
    pseudo = jp.PairJudge(AlwaysSays("A"), prompt="pseudo", debias="probe", embedder=StateEmbedder())
    assert [pseudo.verdict(a, b)["letter"] for a, b in zip(TEXTS, TEXTS[1:])] == ["B", "A"]


def test_channel_and_probe_each_in_their_spread_decide_together(state_probe):
    """--debias channel+probe (the default): the channel's score and the probe's log-odds, each over its spread,
    summed. A channel that is wrong by a little either way is outweighed by a probe that is sure; a sure channel
    outweighs an unsure probe; without likelihoods the probe decides alone."""
    judge = ChannelJudge({TEXTS[1]: -1.0, TEXTS[2]: 1.0})  # the channel alone gets both pairs wrong
    alone = jp.judge_record(record(TEXTS), config(debias="channel"),
                            [("j", ChannelJudge({TEXTS[1]: -1.0, TEXTS[2]: 1.0}))])
    assert [p["change"] for p in alone["progression"]["pairs"]] == [False, True]
    out = jp.judge_record(record(TEXTS), config(), [("j", judge)])["progression"]  # the default
    assert out["debias"] == "channel+probe"
    assert [p["change"] for p in out["pairs"]] == [True, False] and out["distinct"] == [0, 1]
    first, second = (p["verdicts"]["captions"]["j"] for p in out["pairs"])
    assert first["method"] == second["method"] == "channel+probe"
    assert (first["channel"], first["probe"]) == (pytest.approx(-2.0), pytest.approx(2.0))
    assert (second["channel"], second["probe"]) == (pytest.approx(2.0), pytest.approx(-2.8))
    assert first["letters"] == {"paper": "A"} and second["letter"] == "B"
    assert f"{-2.0 / jp.CHANNEL_SPREAD + 2.0 / jp.PROBE_SPREAD:+.2f}: change" in first["decision"]
    assert len(judge.asked) == 2 and not any(is_swapped(m) for m in judge.asked)  # no second order asked
    sure_channel = {"method": "channel+probe", "channel": -12.0, "probe": 0.5, "letters": {"paper": "A"}}
    assert jp.decide(sure_channel, "eval", None)["change"] is False
    assert jp.decide({**sure_channel, "method": "probe"}, "eval", None)["change"] is True
    # a backend without likelihoods: the probe alone, the paper's prompt once a pair
    chat_only = AlwaysSays("A")
    out = jp.judge_record(record(TEXTS), config(debias="channel+probe"), [("j", chat_only)])["progression"]
    assert [v["method"] for p in out["pairs"] for v in p["verdicts"]["captions"].values()] == ["probe"] * 2
    assert [p["change"] for p in out["pairs"]] == [True, False] and len(chat_only.asked) == 2
    with pytest.raises(ValueError, match="--debias channel\\+probe reads minilm-l6's vectors"):
        config(debias="channel+probe", embedder="mpnet-base")
    from vi.pipelines.progresscaptioner.offline_captioner import KIND

    assert jp.field_debias("channel+probe", {"kind": KIND, "items": []}) == "orders"


def test_keyframes_follow_the_change_probe(state_probe, monkeypatch):
    monkeypatch.setattr(kf, "check_llm", lambda settings: None)
    monkeypatch.setattr(kf, "load_embedder", lambda ref, device: StateEmbedder())
    out = kf.keyframes(record(TEXTS), kf.KeyframesConfig(llm=SMOL, debias="probe"), AlwaysSays("A"))
    assert [k["index"] for k in out["keyframes"]] == [0, 1]  # the always-A judge alone keeps all three
    assert [v["method"] for v in out["keyframes_method"]["verdicts"]] == ["probe"] * 2


def test_the_probe_reads_only_its_own_embedders_vectors():
    with pytest.raises(ValueError, match="--debias probe reads minilm-l6's vectors"):
        config(debias="probe", embedder="mpnet-base")


def test_offline_captions_are_not_given_to_the_probe():
    from vi.pipelines.progresscaptioner.offline_captioner import KIND

    assert jp.field_debias("probe", {"kind": KIND, "items": []}) == "orders"
    assert jp.field_debias("probe", {"model": "v", "items": []}) == "probe"


def test_the_packaged_change_probe_is_what_its_sets_give():
    packaged = json.loads((train_progression_probe.ROOT / "pipelines" / "progresscaptioner" / "model_configs"
                           / jp.PROBE_FILE).read_text())
    drift, same = file_differences(packaged, train_progression_probe.train())
    assert same and drift < 1e-4
    trained = {f["file"].rsplit("/", 1)[1] for f in packaged["trained_on"]}
    assert "keyframes_sequences_measure4.json" not in trained  # the set written blind to measure it
    assert jp.load_change_probe().embedder == packaged["embedder"] == "minilm-l6"


def test_a_lean_moves_where_a_score_is_read_and_nothing_else():
    """decide's `lean` (vi keyframes' --keep-bias), in spreads: a score a little under 0 becomes a change, one well
    under stays no change, each signal in its own units; a letter is not moved by it."""
    unsure = {"method": "channel+probe", "channel": 8.0, "probe": -0.73 * 1.3, "letters": {"paper": "B"}}  # -0.3
    assert jp.decide(unsure, "eval", None)["change"] is False
    leaning = jp.decide(unsure, "eval", None, lean=0.5)
    assert leaning["change"] is True and leaning["letter"] == "A" and "-0.30 (read at -0.50 spreads): change" in \
        leaning["decision"]
    assert jp.decide({**unsure, "probe": -0.73 * 1.8}, "eval", None, lean=0.5)["change"] is False  # -0.8
    assert jp.decide({"method": "channel", "channel": -3.0}, "eval", None, lean=0.5)["change"] is True  # 4 nats
    assert jp.decide({"method": "channel", "channel": -5.0}, "eval", None, lean=0.5)["change"] is False
    assert jp.decide({"method": "probe", "probe": -0.3}, "eval", None, lean=0.5)["change"] is True  # 0.365
    assert jp.decide({"method": "none", "letters": {"paper": "B"}}, "eval", None, lean=5.0)["change"] is False
    orders = {"method": "orders", "letters": {"paper": "B", "swapped": "A"}}  # both orders: no change
    assert jp.decide(orders, "eval", None, lean=5.0)["change"] is False


def test_keyframes_read_at_a_lean_keep_an_unsure_frame_and_the_judge_is_not_moved(state_probe, monkeypatch):
    """The rewording pair (lemon cut -> cut, seen closer) scores a little under 0 with channel+probe (the channel
    +28 nats, the probe -2.8): vi judge progression calls it no change, and so do keyframes read at 0; read
    --keep-bias 0.5 spreads toward change the frame is kept, and the record says at what it was read."""
    monkeypatch.setattr(kf, "check_llm", lambda settings: None)
    monkeypatch.setattr(kf, "load_embedder", lambda ref, device: StateEmbedder())
    gains = {TEXTS[1]: -1.0, TEXTS[2]: 14.0}  # channel = 2 wordings x gain
    judged = jp.judge_record(record(TEXTS), config(), [("j", ChannelJudge(gains))])["progression"]
    assert [p["change"] for p in judged["pairs"]] == [True, False]
    kept, verdicts = {}, {}
    for lean in (0.0, 0.5):
        out = kf.keyframes(record(TEXTS), kf.KeyframesConfig(llm=SMOL, keep_bias=lean), ChannelJudge(gains))
        kept[lean], verdicts[lean] = [k["index"] for k in out["keyframes"]], out["keyframes_method"]["verdicts"]
        assert out["keyframes_method"]["keep_bias"] == lean
    assert kept == {0.0: [0, 1], 0.5: [0, 1, 2]}
    # the quality script reads every lean off one run's verdicts: the same frames as running at that lean
    assert keyframes_quality.kept_at(verdicts[0.0], 0.5, "eval") == kept[0.5]
    assert keyframes_quality.kept_at(verdicts[0.5], 0.0, "eval") == kept[0.0]


def test_the_quality_script_reads_every_lean_off_one_run_and_prints_it(state_probe, monkeypatch):
    """keyframes_quality --keep-bias 0,0.5 judges once and reads 0.5 off the same verdicts: its row keeps the
    frames of a run at 0.5, its --json sequences say so, and the table prints (a read-off row has no seconds: the
    twenty-third pass's measure12 run died printing it)."""
    monkeypatch.setattr(kf, "check_llm", lambda settings: None)
    monkeypatch.setattr(kf, "load_embedder", lambda ref, device: StateEmbedder())
    gains = {TEXTS[1]: -1.0, TEXTS[2]: 14.0}
    judges = []

    def judge_config(model, threads, **extra):
        judges.append(ChannelJudge(gains))
        return kf.KeyframesConfig(llm=model, threads=threads, **extra), judges[-1]

    monkeypatch.setattr(keyframes_quality, "judge_config", judge_config)
    args = Namespace(models=[SMOL], debias=["channel+probe"], reference=["previous"], keep_bias=[0.0, 0.5],
                     threads=None, draws=3, seed=0)
    rows = keyframes_quality.judged_rows([record(TEXTS)], [[0, 1, 1]], args)
    assert len(judges) == 1  # one run
    at = {lean: rows[f"progress ({SMOL}, --debias channel+probe, --keep-bias {lean})"] for lean in ("0", "0.5")}
    assert [s["kept"] for s in at["0"]["sequences"]] == [[0, 1]] and at["0"]["redundancy"] == 0
    assert [s["kept"] for s in at["0.5"]["sequences"]] == [[0, 1, 2]] and at["0.5"]["read_off"] == 0.0
    assert at["0.5"]["redundancy"] == pytest.approx(1 / 3)
    out = io.StringIO()
    keyframes_quality.print_rows(rows, "t", Console(file=out, width=200))
    assert "read off the --keep-bias 0 run's verdicts" in out.getvalue()
