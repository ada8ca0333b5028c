"""Trains `vi judge progression --debias probe`'s change probe (pipelines/progresscaptioner/judge_progression.py)
and measures it by pair.

    python -m vi.evaluation.progresscaptioner.train_progression_probe [--write] [--check] [--measure SPLIT ...]

The probe is a logistic regression on the difference of `minilm-l6`'s vectors of two adjacent captions
(the second's minus the first's): a change of an object's state against the same state (reworded, seen
from elsewhere, a hand or tool moved). A difference, not a similarity: how alike two captions are does not
say whether the state changed (a similarity threshold is at chance on the sets written blind), but the
direction they differ in does ("cut into rings", "poured in" against "seen from above", "held over").

It is trained on TRAIN_SPLITS, every caption set of heldout/ that has been measured on already (the judge's
pair sets, the keyframes tune and measure sets and the two sets written blind, measure2 and measure3); later
sets, measure4 on, are never trained on and measure it. Classes are weighted equally, L2 = L2, chosen by
leave-one-set-out on measure2 and measure3 (each held out, trained on the others). --write stores the weights
in the package; --check fails (exit 1) if the packaged weights are not those the sets give; without either it
prints the probe's balanced accuracy on --measure (default: the sets not trained on).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path

from vi.core.models.catalog import DEFAULT_TEXT_EMBEDDING
from vi.core.models.linear_probe import LinearProbe
from vi.evaluation.probe_training import add_file_flags, auc, cpu_text_embedder, fit_logistic, keep_file

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = Path(__file__).resolve().parent / "heldout"
TRAIN_SPLITS = ("judge_pairs_tune", "judge_pairs_measure", "keyframes_sequences_tune", "keyframes_sequences_measure",
                "keyframes_sequences_measure2", "keyframes_sequences_measure3")
EMBEDDER = DEFAULT_TEXT_EMBEDDING
# Leave-one-set-out balanced accuracy (measure2 held out / measure3 held out): L2 0.3: 0.774 / 0.761,
# 1: 0.774 / 0.809, 3: 0.762 / 0.778 (the channel judge on them: 0.669 / 0.702).
L2 = 1.0


def pairs(split: str) -> list[tuple[str, str, int]]:
    """(first caption, second caption, 1 if the state changed) of a heldout/ set, read as its own quality
    script reads it: a judge_pairs_* set's pairs (judge_heldout), or each keyframes_sequences_* sequence's
    adjacent captions, a change where the stage rises (keyframes_quality)."""
    from vi.evaluation.progresscaptioner.judge_heldout import load_pairs
    from vi.evaluation.progresscaptioner.keyframes_quality import heldout_records

    if split.startswith("judge_pairs_"):
        return [(p["desc1"], p["desc2"], int(p["change"])) for p in load_pairs(split.removeprefix("judge_pairs_"))]
    records, stages = heldout_records(split.removeprefix("keyframes_sequences_"))
    return [(items[i]["text"], items[i + 1]["text"], int(stage[i + 1] != stage[i]))
            for record, stage in zip(records, stages) for items in [record["captions"]["items"]]
            for i in range(len(items) - 1)]


def differences(rows: Sequence[tuple[str, str, int]]):
    """The second caption's vector minus the first's, per pair, as the stage computes them."""
    from vi.pipelines.progresscaptioner.judge_progression import caption_differences

    return caption_differences(cpu_text_embedder(EMBEDDER), [(a, b) for a, b, _ in rows])


def train(splits: Sequence[str] = TRAIN_SPLITS, l2: float = L2) -> dict:
    by_split = {split: pairs(split) for split in splits}
    rows = [row for split in splits for row in by_split[split]]
    weights, bias = fit_logistic(differences(rows), [y for _, _, y in rows], l2)
    return {"about": "vi judge progression --debias probe: a logistic regression on the difference of the sentence "
                     "embedder's vectors of two adjacent captions (second minus first); log-odds of a change of "
                     "state (classes weighted equally). Made by python -m "
                     "vi.evaluation.progresscaptioner.train_progression_probe --write",
            "embedder": EMBEDDER, "l2": l2,
            "trained_on": [{"file": f"evaluation/progresscaptioner/heldout/{split}.json",
                            "sha256": hashlib.sha256((HELDOUT / f"{split}.json").read_bytes()).hexdigest(),
                            "changes": sum(y for _, _, y in by_split[split]),
                            "same": sum(1 - y for _, _, y in by_split[split])} for split in splits],
            "bias": round(bias, 6), "weights": [round(float(w), 6) for w in weights]}


def measure(probe: dict, splits: Sequence[str]) -> list[str]:
    from vi.evaluation.progresscaptioner.judge_heldout import balanced_accuracy

    model = LinearProbe.from_file_contents(probe)
    out = []
    for split in splits:
        rows = pairs(split)
        scores, classes = model.log_odds(differences(rows)), [y for _, _, y in rows]
        acc = balanced_accuracy([{"change": bool(y)} for y in classes], [{"change": s > 0} for s in scores])
        out.append(f"{split}: {len(rows)} pairs ({sum(classes)} changes), balanced accuracy "
                   f"{acc['balanced_accuracy']:.3f} (change {acc['change_recall']:.2f}, "
                   f"same {acc['same_recall']:.2f}), AUC {auc(scores, classes):.3f}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.progresscaptioner.train_progression_probe",
                                     description=__doc__.split("\n\n")[0])
    add_file_flags(parser)
    parser.add_argument("--measure", action="append", help="a heldout/ set's name (default: those not trained on)")
    args = parser.parse_args(argv)
    from vi.pipelines.progresscaptioner.judge_progression import PROBE_FILE

    target = ROOT / "pipelines" / "progresscaptioner" / "model_configs" / PROBE_FILE
    probe = train()
    stale = keep_file(target, probe, args)
    if stale is not None:
        sys.exit(1 if stale else 0)
    untouched = sorted(p.stem for p in HELDOUT.glob("*.json") if p.stem not in TRAIN_SPLITS)
    for line in measure(probe, args.measure or untouched):
        print(line)


if __name__ == "__main__":
    main()
