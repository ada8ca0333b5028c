"""Another change probe read off a keyframes_quality run's verdicts: what `vi judge progression` and `vi keyframes
--method progress` would have decided with it beside the channel, without judging again.

    python -m vi.evaluation.progresscaptioner.probe_readoff RUN.json --split SPLIT [--train SPLIT ...] [--spread 1.1]

RUN.json is `keyframes_quality captions --debias channel+probe --split SPLIT --json RUN.json`. The read is exact:
each verdict of channel+probe keeps the channel's score (the LLM's evidence), and a probe reads only the two
captions, so another probe's log-odds are computed again from the captions and summed with the same channel score,
in spreads, as the stage sums them (channel / CHANNEL_SPREAD + log-odds / spread, a change above 0: --keep-bias 0).
The candidate is trained by train_progression_probe.train on --train (default CANDIDATE_SPLITS, the sets every blind
set from measure8 on has read it with) and read in units of --spread (its leave-one-set-out spread on those sets).

Prints one row per decision: the run's own (checked: read again from its verdicts, it keeps the frames the run kept),
the channel alone, the packaged probe alone, the candidate beside the channel, the candidate alone; each with the
pairs' balanced accuracy, the frames kept, their stage coverage and redundancy against random frames at the same
counts, and even spacing at the same counts.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

# the probe's own training sets (train_progression_probe.TRAIN_SPLITS) and the four blind sets spent after them
CANDIDATE_SPLITS = ("judge_pairs_tune", "judge_pairs_measure", "keyframes_sequences_tune",
                    "keyframes_sequences_measure", "keyframes_sequences_measure2", "keyframes_sequences_measure3",
                    "keyframes_sequences_measure4", "keyframes_sequences_measure5", "keyframes_sequences_measure6",
                    "keyframes_sequences_measure7")
CANDIDATE_SPREAD = 1.1  # the ten sets' leave-one-set-out log-odds' standard deviation (1.105 over 590 pairs)


def kept_frames(changes: Sequence[bool], sizes: Sequence[int]) -> list[list[int]]:
    """What --reference previous keeps from the pairs' decisions: frame 0, and each frame judged a change."""
    out, k = [], 0
    for n in sizes:
        out.append([0] + [t for t in range(1, n + 1) if changes[k + t - 1]])
        k += n
    return out


def decisions(run: dict, split: str, train: Sequence[str], spread: float,
              trainer: Callable[[Sequence[str]], dict] | None = None) -> tuple[dict[str, list[bool]], dict]:
    """Each row's change decision per pair, in the run's order, and what they are measured against."""
    from vi.core.models.linear_probe import LinearProbe
    from vi.evaluation.progresscaptioner import train_progression_probe as tp
    from vi.evaluation.progresscaptioner.keyframes_quality import heldout_records, judged_run
    from vi.pipelines.progresscaptioner.judge_progression import CHANNEL_SPREAD

    row = judged_run(run)
    records, stages = heldout_records(split)
    pairs = tp.pairs(f"keyframes_sequences_{split}")  # as the probe's training reads a set's pairs
    verdicts = [v for seq in row["sequences"] for v in seq["verdicts"]]
    if [seq["id"] for seq in row["sequences"]] != [r["id"] for r in records] or len(verdicts) != len(pairs):
        raise SystemExit(f"the run's sequences are not --split {split}'s ({len(verdicts)} verdicts, {len(pairs)} "
                         "pairs): read a run off the split it judged")
    candidate = LinearProbe.from_file_contents((trainer or tp.train)(train)).log_odds(tp.differences(pairs))
    own = [bool(v["change"]) for v in verdicts]
    if kept_frames(own, [len(seq["verdicts"]) for seq in row["sequences"]]) != [s["kept"] for s in row["sequences"]]:
        raise SystemExit("read again from its verdicts, the run's decisions do not keep the frames it kept "
                         "(a run at --keep-bias other than 0?): nothing read off")
    rows = {"the run's (channel + packaged probe)": own,
            "channel alone": [v["channel"] > 0 for v in verdicts],
            "packaged probe alone": [v["probe"] > 0 for v in verdicts],
            f"channel + probe trained on {len(train)} sets (/{spread:g})":
                [v["channel"] / CHANNEL_SPREAD + float(s) / spread > 0 for v, s in zip(verdicts, candidate)],
            f"probe trained on {len(train)} sets, alone": [float(s) > 0 for s in candidate]}
    return rows, {"truth": [y for _, _, y in pairs], "stages": stages,
                  "sizes": [len(seq["verdicts"]) for seq in row["sequences"]]}


def measured(rows: dict[str, list[bool]], against: dict) -> dict[str, dict]:
    from vi.evaluation.progresscaptioner.judge_heldout import balanced_accuracy
    from vi.evaluation.progresscaptioner.keyframes_quality import DRAWS, SEED, chance, scores
    from vi.pipelines.progresscaptioner.keyframes import uniform_indices

    truth = [{"change": bool(y)} for y in against["truth"]]
    out = {}
    for name, changes in rows.items():
        kept, stages = kept_frames(changes, against["sizes"]), against["stages"]
        even = scores([uniform_indices(len(plan), len(k)) for k, plan in zip(kept, stages)], stages)
        out[name] = {**balanced_accuracy(truth, [{"change": c} for c in changes]),
                     **scores(kept, stages), "chance": chance(kept, stages, DRAWS, SEED),
                     "even": {"coverage": even["coverage"], "redundancy": even["redundancy"]}}
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from vi.evaluation.progresscaptioner.keyframes_quality import SPLITS

    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.progresscaptioner.probe_readoff",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a keyframes_quality captions --json file")
    parser.add_argument("--split", choices=SPLITS, required=True, help="the caption set the run judged")
    parser.add_argument("--train", action="append", help="a heldout/ set the candidate probe is trained on "
                        "(repeatable; default: CANDIDATE_SPLITS)")
    parser.add_argument("--spread", type=float, default=CANDIDATE_SPREAD, help="the candidate's log-odds per unit "
                        "beside the channel's CHANNEL_SPREAD nats")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows, against = decisions(json.loads(args.run.read_text()), args.split, args.train or CANDIDATE_SPLITS,
                              args.spread)
    out = measured(rows, against)
    print(f"{args.split}: {len(against['truth'])} pairs ({sum(against['truth'])} changes), "
          f"{sum(against['sizes']) + len(against['sizes'])} frames")
    print("| decision | pairs: balanced acc. (change / same) | kept | coverage (random) | redundancy (random) "
          "| even spacing at that count |\n|---|---|---|---|---|---|")
    for name, m in out.items():
        print(f"| {name} | {m['balanced_accuracy']:.3f} ({m['change_recall']:.2f} / {m['same_recall']:.2f}) "
              f"| {m['kept']} | {m['coverage']:.3f} ({m['chance']['coverage']:.2f}) | {m['redundancy']:.3f} "
              f"({m['chance']['redundancy']:.2f}) | {m['even']['coverage']:.2f}, {m['even']['redundancy']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"split": args.split, "rows": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
