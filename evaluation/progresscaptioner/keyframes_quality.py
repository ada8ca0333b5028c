"""What `vi keyframes` keeps, on real captions and on sample sequences whose stages are known.

    python -m vi.evaluation.progresscaptioner.keyframes_quality real [--models M1,M2] [--show 10] [--threads N]
    python -m vi.evaluation.progresscaptioner.keyframes_quality samples [--models M1,M2] [--n 24] [--seed 0]
        [--debias none,channel+probe] [--captioner offline] [--draws 200] [--threads N] [--json FILE]
    python -m vi.evaluation.progresscaptioner.keyframes_quality captions [--models M1,M2]
        [--debias channel,channel+probe] [--keep-bias 0,0.5]
        [--split measure13|measure12|...|measure2|measure|tune]
    python -m vi.evaluation.progresscaptioner.keyframes_quality bound [--splits measure13,...] [--recalls 0.8,0.9]

real: the 141 FrameCapEval sequences shipped with ProgressCaptioner (../shared/data/progcaptioner/output/
*.json) with ProgressCaptioner-7B's own captions (`response0`, parsed by `parse_frame_replies`). There are no
frames, so keyframes come from the captions alone (`keyframes_method.captions` = "sequence": adjacent captions
of one full-sequence reply, not of 2-frame windows). For --show sequences (spread over both sources, seeded) it
prints every caption and, per embedded LLM, the judge's letter on each adjacent pair and the frames kept, for a
person to judge; and the letter distribution over those sequences.

samples: `samples.make_progress_sequences` (2-6 frames, each a jittered photo of its stage; adjacent frames of
one stage are the no-progression pairs), the "measure" split only. Frames are captioned by vi caption-frames'
library (--captioner, window 2 with both captions kept, the paper's windows), then per method:
- progress (per judge LLM and --debias), uniform (per judge: as many frames as that judge's progress run kept on the
  record, the stage's own default), kmeans (efficientnet-lite0 features, K by silhouette; its own count);
- change precision / recall: a kept frame t > 0 predicts "a new stage starts at t"; the truth is every t
  whose stage differs from t-1's (pooled over sequences). Frame 0 is kept by progress and uniform alike and
  scored by neither;
- stage coverage: the share of a sequence's stages with a kept frame (mean over sequences); redundancy: the
  share of kept frames showing a stage an earlier kept frame already shows;
- chance: the same number of frames per sequence drawn at random (frame 0 kept when the method keeps it),
  --draws draws seeded, averaged.
captions: heldout/keyframes_sequences_{split}.json, hand-written caption sequences with known stages, the frames
of one stage worded differently (as a captioning VLM varies); the same rows as samples but kmeans (there are no
images). --split: measure13 (the default) to measure3 (fourteen sequences each) and measure2 (twelve), each written
blind to the judge by a separate writer before any run on it (measure2 and measure3 train the change probe of
--debias probe and channel+probe, measure4 set its spread, measure5 and measure6 chose channel+probe as the
default, measure7 measured that default and chose nothing, measure6 and measure7 were read for --keep-bias,
measure8 turned down the probe retrained on every spent set, measure9 measured the default and chose nothing;
measure10 turned it down again and measured the default, measure11 measured that default and chose nothing;
measure12, whose stages are of uneven length, turned down --keep-bias 0.3 by the rule in RESULTS; measure13, also
uneven, turned down the retrained probe a third time by the rule in RESULTS, read off with probe_readoff.py);
measure (ten) and tune (eight), written in this project beside the judge's design: their change captions often
say so by their own words ("has been cut"), which a judge can read without comparing the two captions
(evaluation/progresscaptioner/RESULTS.md).
bound: no LLM. A judge right at a rate on each pair, independently (`judge_at`), run on each blind split's stages:
the coverage and redundancy it would give, whether that meets the keyframe targets (coverage >= 0.9, redundancy
at most half of random's), and where the default's run on the split is kept (measured/), the same model at that
judge's own change and same-stage recalls beside what it kept: what the targets ask of the judge.
Each LLM call is one greedy, grammar-constrained answer; on 2 busy CPU cores SmolLM2-135M takes 5-20 s a
call and Qwen2.5-1.5B several times more, so --models and --n bound the run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from vi.core.models.catalog import DEFAULT_IMAGE_CLASSIFIER, DEFAULT_LLM, SMALL_LLM
from vi.core.models.chat import LLMSettings, load_llm
from vi.pipelines.progresscaptioner import keyframes as kf
from vi.pipelines.progresscaptioner.judge_progression import DEFAULT_DEBIAS, SCORED, decide

REPO = Path(__file__).resolve().parents[2]
RELEASE = REPO.parent / "shared" / "data" / "progcaptioner" / "output"
DEFAULT_MODELS = f"{SMALL_LLM},{DEFAULT_LLM}"
RELEASE_MODEL = "ProgressCaptioner-7B (release response0)"


def release_records() -> list[dict]:
    """The release's sequences as vi records: id <source>/<idx> (with the video when an idx repeats),
    captions parsed from response0."""
    from vi.pipelines.progresscaptioner.frame_replies import parse_frame_replies
    from vi.pipelines.progresscaptioner.frame_sources import framecap_ids

    records = []
    for path, source in ((RELEASE / "htc_valhs_seq.json", "HTC"), (RELEASE / "coin_valhs_seq.json", "COIN")):
        if not path.exists():
            raise SystemExit(f"{path} is absent: the shared material lives beside the repository")
        entries = json.loads(path.read_text())
        for entry, record_id in zip(entries, framecap_ids(entries, source)):  # vi frames' ids
            parsed = parse_frame_replies(entry["response0"], entry["n_frames"])
            items = [{"frame": i, "text": t} for i, t in enumerate(parsed.texts) if t]
            records.append({"id": record_id, "source": source, "action": entry["action_label"],
                            "captions": {"model": RELEASE_MODEL, "kind": "release", "window": "full", "items": items,
                                         "repairs": parsed.repairs}})
    return records


def judge_config(model: str, threads: int | None, **extra) -> tuple[kf.KeyframesConfig, object]:
    config = kf.KeyframesConfig(llm=model, threads=threads, **extra)
    return config, load_llm(LLMSettings(model, n_ctx=config.n_ctx, threads=threads))


def run_real(args, console: Console) -> dict:
    records = release_records()
    rng = random.Random(args.seed)
    by_source = {s: [r for r in records if r["source"] == s] for s in ("HTC", "COIN")}
    half = args.show // 2
    shown = sorted(rng.sample(by_source["HTC"], half) + rng.sample(by_source["COIN"], args.show - half),
                   key=lambda r: r["id"])
    results: dict[str, dict[str, dict]] = {}
    for model in args.models:
        config, llm = judge_config(model, args.threads)
        results[model] = {}
        for record in shown:
            start = time.time()
            results[model][record["id"]] = {**kf.keyframes(record, config, llm), "seconds": time.time() - start}
    for record in shown:
        console.rule(f"{record['id']}  action: {escape(record['action'])}")
        for item in record["captions"]["items"]:
            console.print(f"[bold]<Frame {item['frame'] + 1}>[/bold] {escape(item['text'])}", highlight=False)
        for model in args.models:
            out = results[model][record["id"]]
            letters = " ".join(f"{t}-{t + 1}:{a}" for t, a in enumerate(out["keyframes_method"]["answers"]))
            kept = [k["index"] + 1 for k in out["keyframes"]]
            console.print(f"  [cyan]{model}[/cyan] pairs {letters} -> keeps <Frame i> {kept}", highlight=False)
    table = Table(title=f"Judge letters on the {len(shown)} shown sequences' adjacent pairs (eval prompt)")
    for column in ("LLM", "pairs", "A (progress)", "B (none)", "C (uncertain)", "kept / frames", "s per call"):
        table.add_column(column, justify="right")
    summary = {}
    for model in args.models:
        letters = Counter(a for out in results[model].values() for a in out["keyframes_method"]["answers"])
        pairs = sum(letters.values())
        kept = sum(len(out["keyframes"]) for out in results[model].values())
        frames = sum(len(r["captions"]["items"]) for r in shown)
        seconds = sum(out["seconds"] for out in results[model].values()) / max(pairs, 1)
        summary[model] = {"pairs": pairs, **{k: letters.get(k, 0) for k in "ABC"}, "kept": kept, "frames": frames}
        table.add_row(model, str(pairs), *(str(letters.get(k, 0)) for k in "ABC"), f"{kept} / {frames}",
                      f"{seconds:.1f}")
    console.print(table)
    return {"shown": [r["id"] for r in shown], "summary": summary,
            "keyframes": {m: {rid: [k["index"] for k in out["keyframes"]] for rid, out in res.items()}
                          for m, res in results.items()}}


# --- samples: keyframes against the known stages -------------------------------------------------------

DRAWS, SEED = 200, 0  # random keyframe sets drawn at each method's counts (--draws), and their seed (--seed)

def scores(kept: list[list[int]], stages: list[list[int]]) -> dict:
    hit = predicted = true = 0
    coverage, kept_total, repeats = [], 0, 0
    for frames, plan in zip(kept, stages):
        changes = {t for t in range(1, len(plan)) if plan[t] != plan[t - 1]}
        guessed = {t for t in frames if t > 0}
        hit, predicted, true = hit + len(guessed & changes), predicted + len(guessed), true + len(changes)
        shown = [plan[t] for t in sorted(frames)]
        coverage.append(len(set(shown)) / (plan[-1] + 1))
        kept_total, repeats = kept_total + len(shown), repeats + len(shown) - len(set(shown))
    return {"precision": hit / predicted if predicted else None, "recall": hit / true if true else None,
            "coverage": sum(coverage) / len(coverage), "redundancy": repeats / kept_total if kept_total else None,
            "kept": kept_total}


def chance(kept: list[list[int]], stages: list[list[int]], draws: int, seed: int) -> dict:
    """The mean of `scores` over random keyframe sets of the same sizes (frame 0 where the method kept it)."""
    rng = random.Random(f"keyframes-chance:{seed}")
    totals: dict[str, list[float]] = {}
    for _ in range(draws):
        drawn = []
        for frames, plan in zip(kept, stages):
            fixed = [0] if 0 in frames else []
            others = [t for t in range(len(plan)) if t not in fixed]
            drawn.append(fixed + rng.sample(others, len(frames) - len(fixed)))
        for key, value in scores(drawn, stages).items():
            if value is not None:
                totals.setdefault(key, []).append(value)
    return {key: sum(values) / len(values) for key, values in totals.items()}


def kept_at(verdicts: list[dict], lean: float, prompt: str) -> list[int]:
    """The frames --reference previous keeps when the same verdicts' scores are read at `lean` (--keep-bias):
    each pair's evidence is the judge's whatever the lean, so one run gives every lean; a verdict no score
    decided (letters) is as it was."""
    kept = [0]
    for t, verdict in enumerate(verdicts, 1):
        change = verdict["change"]
        if verdict["method"] in SCORED:
            change = decide(verdict, prompt, None, lean)["change"]
        if change is True:
            kept.append(t)
    return kept


def judged_rows(records: list[dict], stages: list[list[int]], args) -> dict[str, dict]:
    """Per judge LLM, --debias, --reference and --keep-bias: what `vi keyframes --method progress` keeps, and
    uniform frames of the same count; each row scored against the stages and against chance at the same
    counts. Under --reference previous the pairs judged do not depend on what is kept, so the judge runs
    once and every further --keep-bias reads the same verdicts (kept_at)."""
    rows: dict[str, dict] = {}
    for model, debias, reference in itertools.product(args.models, args.debias, args.reference):
        runs: dict[float, dict] = {}
        for lean in args.keep_bias:
            if reference == "previous" and runs:
                read_off, first = next(iter(runs.items()))
                kept = [kept_at(seq["verdicts"], lean, first["prompt"]) for seq in first["sequences"]]
                runs[lean] = {**first, "kept": kept, "seconds": None, "read_off": read_off,
                              "sequences": [{**seq, "kept": k} for seq, k in zip(first["sequences"], kept)]}
                continue
            config, llm = judge_config(model, args.threads, debias=debias, reference=reference, keep_bias=lean)
            start = time.time()
            outs = [kf.keyframes(r, config, llm) for r in records]
            kept = [[k["index"] for k in o["keyframes"]] for o in outs]
            runs[lean] = {
                "kept": kept, "seconds": round(time.time() - start, 1), "prompt": config.prompt,
                "letters": dict(Counter(a for o in outs for a in o["keyframes_method"]["answers"])),
                "methods": dict(Counter(v["method"] for o in outs for v in o["keyframes_method"]["verdicts"])),
                # per sequence: what was kept and each pair's verdict (the evidence), for --json
                "sequences": [{"id": r["id"], "kept": k, "verdicts": o["keyframes_method"]["verdicts"]}
                              for r, k, o in zip(records, kept, outs)]}
        for lean, run in runs.items():
            name = (f"{model}, --debias {debias}" + ("" if reference == "previous" else f", --reference {reference}")
                    + ("" if args.keep_bias == [kf.KEEP_BIAS] else f", --keep-bias {lean:g}"))
            rows[f"progress ({name})"] = scored(run["kept"], stages, args, **{k: v for k, v in run.items()
                                                                             if k != "kept" and v is not None})
            rows[f"uniform (count of {name})"] = scored(
                [kf.uniform_indices(len(plan), len(frames)) for frames, plan in zip(run["kept"], stages)], stages,
                args)
    return rows


def scored(kept: list[list[int]], stages: list[list[int]], args, **extra) -> dict:
    return {**scores(kept, stages), "chance": chance(kept, stages, args.draws, args.seed), **extra}


def print_rows(rows: dict[str, dict], title: str, console: Console) -> None:
    table = Table(title=title)
    for column in ("method", "kept", "change P", "chance", "change R", "chance", "coverage", "chance",
                   "redundancy", "chance"):
        table.add_column(column, justify="right")

    def cell(value):
        return "-" if value is None else f"{value:.2f}"

    for name, row in rows.items():
        table.add_row(escape(name), str(row["kept"]),
                      *(cell(v) for key in ("precision", "recall", "coverage", "redundancy")
                        for v in (row[key], row["chance"].get(key))))
    console.print(table)
    for name, row in rows.items():
        if "letters" in row:
            how = (f"{row['seconds']}s" if "seconds" in row  # a lean read off an earlier lean's verdicts took no time
                   else f"read off the --keep-bias {row['read_off']:g} run's verdicts")
            console.print(f"{name}: letters {row['letters']} (decided by {row['methods']}), {how}", highlight=False)


def run_samples(args, console: Console) -> dict:
    from vi.evaluation.progresscaptioner.samples import make_progress_sequences
    from vi.pipelines.progresscaptioner.caption_frames import caption_batch

    out_dir = Path(args.out or tempfile.mkdtemp(prefix="vi-keyframes-quality-"))
    paths = make_progress_sequences(out_dir, args.n, args.seed)
    truth = {t["id"]: t for t in map(json.loads, paths["labels"].read_text().splitlines())}
    records = [r for r in map(json.loads, paths["sequences"].read_text().splitlines()) if r["split"] == "measure"]
    start = time.time()
    captioner = kf.pair_captioner(args.captioner, device="cpu", seed=args.seed)
    made = caption_batch(records, captioner)
    failed = [(r["id"], m) for r, m in zip(records, made) if isinstance(m, Exception)]
    records = [{**r, **m} for r, m in zip(records, made) if not isinstance(m, Exception)]
    console.print(f"captioned {len(records)} measure sequences with {captioner.model} in {time.time() - start:.0f}s"
                  + (f"; failed: {failed}" if failed else ""), highlight=False)
    stages = [truth[r["id"]]["stages"] for r in records]
    rows = judged_rows(records, stages, args)
    kmeans = kf.KeyframesConfig(method="kmeans", image_model=DEFAULT_IMAGE_CLASSIFIER, device="cpu", seed=args.seed)
    rows["kmeans (efficientnet-lite0)"] = scored(
        [[k["index"] for k in kf.keyframes(r, kmeans)["keyframes"]] for r in records], stages, args)
    rows["all frames"] = scored([list(range(len(plan))) for plan in stages], stages, args)
    print_rows(rows, f"Keyframes vs the true stages: {len(records)} sample sequences, "
                     f"{sum(len(p) for p in stages)} frames, {sum(p[-1] + 1 for p in stages)} stages", console)
    return {"sequences": len(records), "captioner": captioner.model, "rows": rows, "out": str(out_dir)}


# --- captions: hand-written caption sequences whose stages are known -------------------------------------

SPLITS = ("measure13", "measure12", "measure11", "measure10", "measure9", "measure8", "measure7", "measure6",
          "measure5", "measure4", "measure3", "measure2", "measure", "tune")
HELDOUT_SEQUENCES = {split: Path(__file__).parent / "heldout" / f"keyframes_sequences_{split}.json"
                     for split in SPLITS}


def heldout_records(split: str = SPLITS[0]) -> tuple[list[dict], list[list[int]]]:
    """A split's sequences as records with their captions (one full-sequence reply's, as a VLM's captions of
    a whole sequence), and each frame's stage."""
    data = json.loads(HELDOUT_SEQUENCES[split].read_text())
    if data.get("split") != split:
        raise SystemExit(f"{HELDOUT_SEQUENCES[split]} says it is the {data.get('split')!r} split, not {split!r}")
    sequences = data["sequences"]
    records = [{"id": s["id"], "action": s["action"],
                "captions": {"model": "hand-written", "kind": "heldout", "window": "full",
                             "items": [{"frame": i, "text": t} for i, t in enumerate(s["captions"])]}}
               for s in sequences]
    return records, [s["stages"] for s in sequences]


def judged_run(run: dict) -> dict:
    """A `captions --json` run's `vi keyframes --method progress` row judged with channel+probe (the one whose
    verdicts keep both: probe_readoff and `bound` read it)."""
    rows = [row for name, row in run.get("rows", {}).items()
            if name.startswith("progress (") and "--debias channel+probe" in name and "read_off" not in row]
    if len(rows) != 1:
        raise SystemExit(f"the run has {len(rows)} progress rows judged with --debias channel+probe; read off one: "
                         "keyframes_quality captions --models M --debias channel+probe --json FILE")
    return rows[0]


def run_captions(args, console: Console) -> dict:
    """Unlike the samples, whose offline captions are identical for the frames of one stage (any judge
    keeps one frame per stage there), these captions word one stage differently from frame to frame, as
    a VLM does: a judge that calls every reworded pair a change keeps about as many redundant frames as
    chance."""
    records, stages = heldout_records(args.split)
    rows = judged_rows(records, stages, args)
    rows["all frames"] = scored([list(range(len(plan))) for plan in stages], stages, args)
    what = "measure only" if args.split == SPLITS[0] else f"the {args.split} split"
    print_rows(rows, f"Keyframes vs the true stages: {len(records)} hand-written caption sequences ({what}), "
                     f"{sum(len(p) for p in stages)} frames, {sum(p[-1] + 1 for p in stages)} stages", console)
    return {"sequences": len(records), "rows": rows}


# --- bound: what the keyframe targets ask of a pair judge ------------------------------------------------

MEASURED = Path(__file__).parent / "measured"  # kept `captions --json` runs: keyframes_{split}.json
BOUND_RECALLS = (0.75, 0.8, 0.85, 0.9, 0.95)
BLIND_SPLITS = tuple(s for s in SPLITS if s not in ("measure", "tune"))  # each written blind to the judge


def judge_at(stages: list[list[int]], change_recall: float, same_recall: float, draws: int, seed: int) -> dict:
    """What a judge right at these rates, pair by pair and independently of each other, keeps under --reference
    previous (frame 0 and every pair it calls a change), scored as `scores`, with random frames' redundancy at
    the same counts (`chance`); the means over `draws` judges."""
    rng = random.Random(f"keyframes-judge-at:{seed}")
    totals: dict[str, list[float]] = {}
    for _ in range(draws):
        kept = [[0] + [t for t in range(1, len(plan))
                       if (rng.random() < change_recall if plan[t] != plan[t - 1] else rng.random() >= same_recall)]
                for plan in stages]
        found = scores(kept, stages)
        for key, value in (("coverage", found["coverage"]), ("redundancy", found["redundancy"]),
                           ("random_redundancy", chance(kept, stages, 20, rng.randrange(2**31))["redundancy"])):
            totals.setdefault(key, []).append(value)
    return {key: sum(values) / len(values) for key, values in totals.items()}


def meets_targets(row: dict) -> bool:
    """Issue 38's keyframe targets: stage coverage at least 0.9, redundancy at most half of random frames'."""
    return row["coverage"] >= 0.9 and row["redundancy"] <= row["random_redundancy"] / 2


def kept_run_recalls(split: str) -> dict | None:
    """The default judge's own change and same-stage recall, coverage and redundancy on `split`, from its kept
    run (MEASURED), or None where none is kept."""
    path = MEASURED / f"keyframes_{split}.json"
    if not path.exists():
        return None
    row = judged_run(json.loads(path.read_text()))
    _, stages = heldout_records(split)
    hits = {True: [], False: []}
    for seq, plan in zip(row["sequences"], stages):
        for t, verdict in enumerate(seq["verdicts"], 1):
            change = plan[t] != plan[t - 1]
            hits[change].append(bool(verdict["change"]) == change)
    return {"change_recall": sum(hits[True]) / len(hits[True]), "same_recall": sum(hits[False]) / len(hits[False]),
            "coverage": row["coverage"], "redundancy": row["redundancy"]}


def run_bound(args, console: Console) -> dict:
    """Per blind split, what a judge at each balanced accuracy (change and same-stage recall equal; with
    --same-recall, each rate its change recall and the same-stage recall held there) keeps, and
    whether that meets the keyframe targets; where the default's run is kept, a judge at its own two recalls
    beside what it kept, so the model's fit can be read. No LLM runs: seconds."""
    out: dict[str, dict] = {}
    held = "" if args.same_recall is None else f" (on changes; on same-stage pairs {args.same_recall:g})"
    table = Table(title=f"A pair judge right at a rate{held}, independently per pair, on each split's stages: "
                        "coverage / redundancy (half of random's); * meets both keyframe targets")
    table.add_column("split", justify="left")
    for recall in args.recalls:
        table.add_column(f"judge at {recall:g}", justify="right")
    table.add_column("the default: its recalls (change / same): modelled; measured", justify="right")
    for split in args.splits:
        _, stages = heldout_records(split)
        rows = {f"{recall:g}": judge_at(stages, recall, recall if args.same_recall is None else args.same_recall,
                                        args.draws, args.seed) for recall in args.recalls}
        cells = [f"{r['coverage']:.2f} / {r['redundancy']:.2f} ({r['random_redundancy'] / 2:.2f})"
                 + ("*" if meets_targets(r) else "") for r in rows.values()]
        own = kept_run_recalls(split)
        if own:
            rows["default"] = {**judge_at(stages, own["change_recall"], own["same_recall"], args.draws, args.seed),
                               "measured": own}
            cells.append(f"{own['change_recall']:.2f}/{own['same_recall']:.2f}: {rows['default']['coverage']:.2f}/"
                         f"{rows['default']['redundancy']:.2f}; {own['coverage']:.2f}/{own['redundancy']:.2f}")
        else:
            cells.append("-")
        table.add_row(split, *cells)
        out[split] = rows
    console.print(table)
    for recall in args.recalls:
        met = sum(meets_targets(out[split][f"{recall:g}"]) for split in args.splits)
        console.print(f"judge at {recall:g}: both targets met on {met} of {len(args.splits)} splits", highlight=False)
    return {"recalls": list(args.recalls), "same_recall": args.same_recall, "draws": args.draws, "splits": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("real", "samples", "captions", "bound"))
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--debias", default=f"none,{DEFAULT_DEBIAS}", help="the judges' --debias, comma-separated "
                        f"(none,{DEFAULT_DEBIAS}: the paper's single ask beside the default)")
    parser.add_argument("--reference", default="previous", help="vi keyframes --reference, comma-separated")
    parser.add_argument("--keep-bias", default=f"{kf.KEEP_BIAS:g}", help="vi keyframes --keep-bias, comma-separated "
                        "(under --reference previous, read off one run's verdicts)")
    parser.add_argument("--split", choices=SPLITS, default=SPLITS[0], help="captions: which set")
    parser.add_argument("--splits", default=",".join(BLIND_SPLITS), help="bound: which sets, comma-separated")
    parser.add_argument("--recalls", default=",".join(f"{r:g}" for r in BOUND_RECALLS),
                        help="bound: the judges' balanced accuracies, comma-separated")
    parser.add_argument("--same-recall", type=float, help="bound: hold the judges' same-stage recall here and read "
                        "--recalls as their change recall")
    parser.add_argument("--show", type=int, default=10)
    parser.add_argument("--n", type=int, default=24, help="sample sequences made (about 70%% are measured)")
    parser.add_argument("--out", help="where the sample sequences go (default: a temporary folder)")
    parser.add_argument("--captioner", default="offline")
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    args.debias = [d for d in args.debias.split(",") if d]
    args.reference = [r for r in args.reference.split(",") if r]
    args.keep_bias = [float(b) for b in args.keep_bias.split(",") if b]
    args.splits = [s for s in args.splits.split(",") if s]
    if unknown := [s for s in args.splits if s not in SPLITS]:
        parser.error(f"--splits: no caption set {', '.join(unknown)} (one of {', '.join(SPLITS)})")
    args.recalls = [float(r) for r in args.recalls.split(",") if r]
    console = Console(width=150)
    result = {"real": run_real, "samples": run_samples, "captions": run_captions,
              "bound": run_bound}[args.what](args, console)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
