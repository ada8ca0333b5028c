"""Trains `vi extract-steps`' line probes (pipelines/showhowto/narration_probe.py) and measures them by line.

    python -m vi.evaluation.showhowto.train_line_probes [--probe talk|start] [--write] [--check] [--measure FILE ...]

Each probe is a logistic regression on `minilm-l6`'s embedding of one narration line:
- talk: talk (intro, outro, aside, other) against a step's line;
- start: among a step's lines, its first line against the lines that go on with it.
Each is trained on the how-to narrations of its PROBES entry's files only: the stage's test transcripts,
a tune set written for this (evaluation/showhowto/tune/) and, for the start probe, held-out sets 5 and 6,
spent as blind sets by the talk probe's measurement before the start probe was made. The other held-out
narration sets (sets 1-4 choose L2 and the label pass's weight; set 7 and later measure the stage) and the
real pressure cooker are never trained on. Classes are weighted to count equally (the probe's log-odds
carry no prior), L2 on the weights (not the bias), fitted exactly by Newton's method
(evaluation/probe_training.py): the same files give the same weights.

Without --write it prints, per measured file, the probe's AUC and, at log-odds > 0, the share of each
class called as the truth has it; --write stores the weights in the package; --check fails (exit 1) if
the packaged weights are not those the files give.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vi.core.models.catalog import DEFAULT_TEXT_EMBEDDING
from vi.evaluation.probe_training import add_file_flags, auc, cpu_text_embedder, fit_logistic, keep_file

ROOT = Path(__file__).resolve().parents[2]
HELD_OUT = "evaluation/showhowto/heldout/extract_transcripts{}.jsonl"
TUNING = ("tests/showhowto/data/extract_steps_transcripts.jsonl", "evaluation/showhowto/tune/narrations_tune.jsonl")
MEASURE_FILES = tuple(HELD_OUT.format(s) for s in ("", "_2", "_3", "_4", "_5", "_6", "_7"))
EMBEDDER = DEFAULT_TEXT_EMBEDDING  # the stage's embedder; the probe's file names it, so a change shows in --check
TALK_ROLES = ("intro", "outro", "aside", "other")


def talk_classes(record: dict) -> list[tuple[str, int]]:
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


def start_classes(record: dict) -> list[tuple[str, int]]:
    """(line text, 1 if it starts a step else 0) for each line of a step's span that is not talk."""
    truth, segments = record["truth"], record["transcript"]["segments"]
    talk = {i for role in TALK_ROLES for i in truth.get(role, [])}
    return [(segments[i]["text"].strip(), int(i == step["lines"][0])) for step in truth["steps"]
            for i in range(step["lines"][0], step["lines"][1] + 1) if i not in talk]


@dataclass(frozen=True)
class ProbeSpec:
    classes: Callable[[dict], list[tuple[str, int]]]
    names: tuple[str, str]  # what a 1 and a 0 are, for the measures
    train_files: tuple[str, ...]
    l2: float
    llm_weight: float  # the label pass's weight beside the probe
    llm_weight_chosen: str


PROBES = {
    # L2 chosen on held-out sets 3 and 4 among 0.1, 0.3, 1, 3, 10 (AUC within 0.01 from 0.1 to 1); the label
    # pass's weight by the balanced accuracy of the TALK decision by line on sets 1-4 (the label pass's marks
    # of their 22 how-tos, qwen2.5-coder-1.5b): the label pass alone 0.773; with the probe, weight 0: 0.894,
    # 0.1: 0.905, 0.25: 0.900, 0.5: 0.877, 1: 0.837.
    "talk": ProbeSpec(talk_classes, ("talk", "action"), TUNING, 0.3, 0.1,
                      "chosen among 0, 0.1, 0.25, 0.5 and 1 by the balanced accuracy of TALK by line on held-out "
                      "sets 1-4 (evaluation/showhowto/RESULTS.md, seventh pass)"),
    # L2 and the weight together, by the balanced accuracy of STEP against MORE by line on sets 1-4's action
    # lines (225; the label pass alone 0.75): L2 1, weight 0: 0.836, 0.1: 0.854, 0.25: 0.852, 0.5: 0.837,
    # 1: 0.832; L2 3: 0.847, 0.845, 0.841, 0.824, 0.802.
    "start": ProbeSpec(start_classes, ("first", "later"), (*TUNING, HELD_OUT.format("_5"), HELD_OUT.format("_6")),
                       1.0, 0.1, "L2 and the weight chosen together among L2 1, 3 and weights 0, 0.1, 0.25, 0.5, "
                       "1 by the balanced accuracy of STEP against MORE by line on held-out sets 1-4 "
                       "(evaluation/showhowto/RESULTS.md, eighth pass)"),
}


def how_to_records(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in records if r["truth"].get("instructional", True) and r["truth"]["steps"]]


def labelled_lines(spec: ProbeSpec, paths: Sequence[Path]) -> tuple[list[str], list[int]]:
    pairs = [pair for path in paths for record in how_to_records(path) for pair in spec.classes(record)]
    return [t for t, _ in pairs], [y for _, y in pairs]


def train(kind: str) -> dict:
    """The `kind` probe's file contents, from its training files."""
    spec = PROBES[kind]
    texts, classes = labelled_lines(spec, [ROOT / f for f in spec.train_files])
    weights, bias = fit_logistic(cpu_text_embedder(EMBEDDER).encode(texts), classes, spec.l2)
    one, zero = spec.names
    return {"about": f"vi extract-steps' {kind} probe: a logistic regression on the sentence embedder's vector "
                     f"of one narration line; log-odds of {one} against {zero} (classes weighted equally). Made by "
                     f"python -m vi.evaluation.showhowto.train_line_probes --probe {kind} --write",
            "embedder": EMBEDDER, "l2": spec.l2, "llm_weight": spec.llm_weight,
            "llm_weight_chosen": spec.llm_weight_chosen,
            "trained_on": [{"file": f, "sha256": hashlib.sha256((ROOT / f).read_bytes()).hexdigest(),
                            f"{one}_lines": sum(y for _, y in lines), f"{zero}_lines": sum(1 - y for _, y in lines)}
                           for f in spec.train_files
                           for lines in [[p for r in how_to_records(ROOT / f) for p in spec.classes(r)]]],
            "bias": round(bias, 6), "weights": [round(float(w), 6) for w in weights]}


def measure(kind: str, probe: dict, paths: Sequence[Path]) -> list[str]:
    from vi.pipelines.showhowto.narration_probe import LineProbe

    spec, model = PROBES[kind], LineProbe.from_file_contents(probe)
    one, zero = spec.names
    out = []
    for path in paths:
        texts, classes = labelled_lines(spec, [path])
        scores = model.log_odds(cpu_text_embedder(EMBEDDER).encode(texts))
        said = [s > 0 for s in scores]
        ones, zeros = sum(classes), len(classes) - sum(classes)
        trained = " (trained on)" if str(path.relative_to(ROOT)) in spec.train_files else ""
        out.append(f"{kind} probe, {path.name}{trained}: {len(classes)} lines ({ones} {one}), "
                   f"AUC {auc(scores, classes):.3f}, {one} called {one} "
                   f"{sum(s and y for s, y in zip(said, classes))}/{ones}, {zero} called {zero} "
                   f"{sum(not s and not y for s, y in zip(said, classes))}/{zeros}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.showhowto.train_line_probes",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", choices=tuple(PROBES), action="append", help="which probe (default: both)")
    add_file_flags(parser)
    parser.add_argument("--measure", type=Path, action="append", help="narration files to measure on "
                        "(default: the held-out sets)")
    args = parser.parse_args(argv)
    from vi.pipelines.showhowto.narration_probe import PROBE_FILES

    stale = False
    for kind in args.probe or PROBES:
        target = ROOT / "pipelines" / "showhowto" / "model_configs" / PROBE_FILES[kind]
        probe = train(kind)
        checked = keep_file(target, probe, args, f"{kind} probe")
        if checked is not None:
            stale |= checked
            continue
        paths = [p.resolve() for p in args.measure] if args.measure else \
            [ROOT / f for f in MEASURE_FILES if (ROOT / f).exists()]
        for line in measure(kind, probe, paths):
            print(line)
    sys.exit(1 if stale else 0)


if __name__ == "__main__":
    main()
