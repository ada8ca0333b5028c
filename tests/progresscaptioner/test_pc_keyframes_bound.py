"""keyframes_quality bound: what the keyframe targets ask of a pair judge, modelled on the blind sets' stages."""

from __future__ import annotations

import pytest

from vi.evaluation.progresscaptioner.keyframes_quality import (heldout_records, judge_at, kept_run_recalls,
                                                               meets_targets)

STAGES = [[0, 0, 1, 1, 2], [0, 1, 1, 1], [0, 0, 0, 1, 2, 2]]


def test_a_judge_right_on_every_pair_keeps_one_frame_per_stage_and_one_that_says_change_to_all_keeps_all():
    right = judge_at(STAGES, 1.0, 1.0, draws=5, seed=0)
    assert right["coverage"] == 1.0 and right["redundancy"] == 0.0 and meets_targets(right)
    every = judge_at(STAGES, 1.0, 0.0, draws=5, seed=0)
    assert every["coverage"] == 1.0 and every["redundancy"] == pytest.approx(7 / 15)  # 15 frames, 8 stages
    assert every["random_redundancy"] == pytest.approx(7 / 15) and not meets_targets(every)  # as random at its count


def test_on_a_blind_set_the_targets_ask_more_of_the_judge_than_the_pairs_target():
    """A judge right on 80% of the changes and of the same-stage pairs (the pairs' target) covers too few of
    measure13's stages; one right on 95% meets both keyframe targets; coverage rises with the rate."""
    _, stages = heldout_records("measure13")
    at = {rate: judge_at(stages, rate, rate, draws=20, seed=0) for rate in (0.8, 0.95)}
    assert not meets_targets(at[0.8]) and at[0.8]["coverage"] < 0.9
    assert meets_targets(at[0.95]) and at[0.95]["coverage"] > at[0.8]["coverage"]


def test_the_default_judges_own_recalls_are_read_from_its_kept_run():
    own = kept_run_recalls("measure13")  # RESULTS: change 38/46, coverage 0.879, redundancy 0.131
    assert own["change_recall"] == pytest.approx(38 / 46) and own["coverage"] == pytest.approx(0.8786, abs=1e-4)
    assert 0.5 < own["same_recall"] < 1 and kept_run_recalls("measure12") is None  # its run was not kept
