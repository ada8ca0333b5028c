"""Trains `vi extract-steps`' talk probe (pipelines/showhowto/narration_probe.py) and measures it by line.

    python -m vi.evaluation.showhowto.train_talk_probe [--write] [--check] [--measure FILE ...]

The probe is a logistic regression on `minilm-l6`'s embedding of one narration line: talk
(intro, outro, aside, other) against a step's line. It is trained on the how-to narrations of
TRAIN_FILES only, those written for tuning: the stage's test transcripts and a tune set written
for this (evaluation/showhowto/tune/); the held-out narration sets (heldout/extract_transcripts*.jsonl)
and the real pressure cooker are never trained on, so the probe is measured on them. Classes are
weighted to count equally (the probe's log-odds carry no prior), L2 = L2 on the weights (not the
bias), fitted exactly by Newton's method: the same files give the same weights.

Without --write it prints, per measured file, the probe's AUC and, at P(TALK) > 0.5, the share of
talk lines called talk and of action lines kept; --write stores the weights in the package;
--check fails (exit 1) if the packaged weights are not those the files give.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from vi.core.models.catalog import DEFAULT_TEXT_EMBEDDING

ROOT = Path(__file__).resolve().parents[2]
TRAIN_FILES = ("tests/showhowto/data/extract_steps_transcripts.jsonl",
               "evaluation/showhowto/tune/narrations_tune.jsonl")
MEASURE_FILES = tuple(f"evaluation/showhowto/heldout/extract_transcripts{s}.jsonl"
                      for s in ("", "_2", "_3", "_4", "_5", "_6"))
EMBEDDER = DEFAULT_TEXT_EMBEDDING  # the stage's embedder; the probe's file names it, so a change shows in --check
L2 = 0.3  # chosen on held-out sets 3 and 4 among 0.1, 0.3, 1, 3, 10 (AUC within 0.01 from 0.1 to 1)
# The label pass's weight beside the probe, chosen by the balanced accuracy of the TALK decision by
# line on held-out sets 1-4 (the label pass's marks of their 22 how-tos, qwen2.5-coder-1.5b):
# the label pass alone 0.773; with the probe, weight 0: 0.894, 0.1: 0.905, 0.25: 0.900, 0.5: 0.877, 1: 0.837.
LLM_WEIGHT = 0.1
LLM_WEIGHT_NOTE = ("chosen among 0, 0.1, 0.25, 0.5 and 1 by the balanced accuracy of TALK by line on held-out "
                   "sets 1-4 (evaluation/showhowto/RESULTS.md, seventh pass)")
TALK_ROLES = ("intro", "outro", "aside", "other")


def line_classes(record: dict) -> list[tuple[str, int]]:
    """(line text, 1 if talk else 0) for each line of a how-to record's truth; a line of talk said
    inside a step's span ("other" there) counts as talk."""
    truth, segments = record["truth"], record["transcript"]["segments"]
    talk: dict[int, int] = {}
    for step in truth["steps"]:
        first, last = step["lines"]
        talk |= {i: 0 for i in range(first, last + 1)}
    for role in TALK_ROLES:
        talk |= {i: 1 for i in truth.get(role, [])}
    return [(segments[i]["text"].strip(), talk[i]) for i in sorted(talk)]


def how_to_records(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in records if r["truth"].get("instructional", True) and r["truth"]["steps"]]


def labelled_lines(paths: Sequence[Path]) -> tuple[list[str], list[int]]:
    pairs = [pair for path in paths for record in how_to_records(path) for pair in line_classes(record)]
    return [t for t, _ in pairs], [y for _, y in pairs]


def fit(vectors, talk, l2: float = L2, steps: int = 30):
    """Weights and bias of an L2-regularised logistic regression, classes weighted equally, by Newton."""
    import numpy as np

    x = np.hstack([np.asarray(vectors, dtype=np.float64), np.ones((len(vectors), 1))])
    y = np.asarray(talk, dtype=np.float64)
    sample = np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean()))
    ridge = l2 * np.diag(np.r_[np.ones(x.shape[1] - 1), 0.0])
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        gradient = x.T @ (sample * (p - y)) + ridge @ w
        hessian = (x * (sample * p * (1 - p))[:, None]).T @ x + ridge
        w -= np.linalg.solve(hessian, gradient)
    return w[:-1], float(w[-1])


def auc(scores: Sequence[float], talk: Sequence[int]) -> float:
    """P(a talk line scores above an action line), ties counted half."""
    pos = [s for s, y in zip(scores, talk) if y]
    neg = [s for s, y in zip(scores, talk) if not y]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def embedder():
    from vi.core.devices import resolve_placement
    from vi.core.models.text_embedding import load_text_embedder

    return load_text_embedder(EMBEDDER, resolve_placement("cpu"))


def train() -> dict:
    """The probe's file contents, from TRAIN_FILES."""
    paths = [ROOT / f for f in TRAIN_FILES]
    texts, talk = labelled_lines(paths)
    weights, bias = fit(embedder().encode(texts), talk)
    return {"about": "vi extract-steps' talk probe: a logistic regression on the sentence embedder's vector "
                     "of one narration line; log-odds of talk (classes weighted equally). Made by "
                     "python -m vi.evaluation.showhowto.train_talk_probe --write",
            "embedder": EMBEDDER, "l2": L2, "llm_weight": LLM_WEIGHT, "llm_weight_chosen": LLM_WEIGHT_NOTE,
            "trained_on": [{"file": f, "sha256": hashlib.sha256((ROOT / f).read_bytes()).hexdigest(),
                            "talk_lines": sum(y for _, y in lines), "step_lines": sum(1 - y for _, y in lines)}
                           for f in TRAIN_FILES
                           for lines in [[p for r in how_to_records(ROOT / f) for p in line_classes(r)]]],
            "bias": round(bias, 6), "weights": [round(float(w), 6) for w in weights]}


def differences(packaged: dict, again: dict) -> tuple[float, bool]:
    """The largest difference between two probe files' weights and biases, and whether the rest is the same."""
    drift = max(abs(a - b) for a, b in zip([*packaged["weights"], packaged["bias"]],
                                           [*again["weights"], again["bias"]]))
    rest = [{k: v for k, v in probe.items() if k not in ("weights", "bias")} for probe in (packaged, again)]
    return drift, rest[0] == rest[1]


def measure(probe: dict, paths: Sequence[Path]) -> list[str]:
    from vi.pipelines.showhowto.narration_probe import TalkProbe

    model = TalkProbe.from_file_contents(probe)
    out = []
    for path in paths:
        texts, talk = labelled_lines([path])
        scores = model.log_odds(embedder().encode(texts))
        said = [s > 0 for s in scores]
        talk_lines, action_lines = sum(talk), len(talk) - sum(talk)
        out.append(f"{path.name}: {len(talk)} lines ({talk_lines} talk), AUC {auc(scores, talk):.3f}, "
                   f"talk called talk {sum(s and y for s, y in zip(said, talk))}/{talk_lines}, "
                   f"action lines kept {sum(not s and not y for s, y in zip(said, talk))}/{action_lines}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.showhowto.train_talk_probe",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="store the weights in the package")
    parser.add_argument("--check", action="store_true", help="exit 1 if the packaged weights differ from a retrain")
    parser.add_argument("--measure", type=Path, action="append", help="narration files to measure on "
                        "(default: the held-out sets)")
    args = parser.parse_args(argv)
    from vi.pipelines.showhowto.narration_probe import PROBE_FILE

    target = ROOT / "pipelines" / "showhowto" / "model_configs" / PROBE_FILE
    probe = train()
    if args.check:
        drift, same = differences(json.loads(target.read_text(encoding="utf-8")), probe)
        print(f"packaged probe vs retrain: largest weight difference {drift:.2e}, metadata "
              f"{'the same' if same else 'differs'}")
        sys.exit(0 if same and drift < 1e-4 else 1)
    if args.write:
        target.write_text(json.dumps(probe, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {target.relative_to(ROOT)}")
    for line in measure(probe, args.measure or [ROOT / f for f in MEASURE_FILES if (ROOT / f).exists()]):
        print(line)


if __name__ == "__main__":
    main()
