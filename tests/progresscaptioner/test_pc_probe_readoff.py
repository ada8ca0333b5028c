"""probe_readoff: another change probe read off a keyframes_quality run's verdicts, without judging again."""

from __future__ import annotations

import pytest

from vi.evaluation.progresscaptioner import probe_readoff as pr
from vi.evaluation.progresscaptioner.keyframes_quality import heldout_records
from vi.pipelines.progresscaptioner.judge_progression import CHANNEL_SPREAD

SPLIT = "measure12"


def fake_run(split: str = SPLIT) -> dict:
    """A channel+probe run whose channel is sure and right on every pair, its packaged probe silent (0)."""
    records, stages = heldout_records(split)
    sequences = []
    for record, plan in zip(records, stages):
        verdicts = [{"change": plan[t] != plan[t - 1], "channel": 4.0 if plan[t] != plan[t - 1] else -4.0,
                     "probe": 0.0} for t in range(1, len(plan))]
        sequences.append({"id": record["id"], "verdicts": verdicts,
                          "kept": [0] + [t for t, v in enumerate(verdicts, 1) if v["change"]]})
    return {"rows": {"progress (m, --debias channel+probe)": {"sequences": sequences}, "all frames": {}}}


def says_no_change(splits) -> dict:
    """A candidate probe sure that nothing changes (5 nats), whatever the captions: trained on nothing."""
    return {"embedder": "minilm-l6", "weights": [0.0] * 384, "bias": -5.0}


def test_a_probe_read_off_a_run_is_summed_with_the_runs_own_channel_scores():
    """The candidate's log-odds are summed with each verdict's channel score in spreads: a candidate sure of
    "no change" (-5 / 1.1 spreads) outweighs a channel at +4 nats (0.5 spreads), so beside the channel it keeps
    only frame 0; the run's own decisions and the channel's are read as they were."""
    rows, against = pr.decisions(fake_run(), SPLIT, ("judge_pairs_tune",), 1.1, trainer=says_no_change)
    out = pr.measured(rows, against)
    own, candidate = out["the run's (channel + packaged probe)"], out["channel + probe trained on 1 sets (/1.1)"]
    assert own["balanced_accuracy"] == 1.0 and own["coverage"] == 1.0 and own["redundancy"] == 0.0
    assert out["channel alone"]["balanced_accuracy"] == 1.0
    assert candidate["balanced_accuracy"] == 0.5 and candidate["kept"] == len(against["sizes"])  # frame 0 each
    assert 4.0 / CHANNEL_SPREAD - 5.0 / 1.1 < 0 < 4.0 / CHANNEL_SPREAD - 5.0 / 20.0  # so the spread decides it
    wide, _ = pr.decisions(fake_run(), SPLIT, ("judge_pairs_tune",), 20.0, trainer=says_no_change)
    assert wide["channel + probe trained on 1 sets (/20)"] == wide["channel alone"]


def test_a_run_is_read_off_only_the_split_it_judged_and_only_where_its_verdicts_give_its_frames():
    with pytest.raises(SystemExit, match="not --split measure11's"):
        pr.decisions(fake_run(), "measure11", ("judge_pairs_tune",), 1.1, trainer=says_no_change)
    run = fake_run()
    run["rows"]["progress (m, --debias channel+probe)"]["sequences"][0]["kept"] = [0]
    with pytest.raises(SystemExit, match="do not keep the frames it kept"):
        pr.decisions(run, SPLIT, ("judge_pairs_tune",), 1.1, trainer=says_no_change)
    with pytest.raises(SystemExit, match="0 progress rows judged with --debias channel"):
        pr.decisions({"rows": {}}, SPLIT, ("judge_pairs_tune",), 1.1, trainer=says_no_change)
