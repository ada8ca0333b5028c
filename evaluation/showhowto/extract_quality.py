"""`vi extract-steps` on hand-written narration whose true steps are known.

    python -m vi.evaluation.showhowto.extract_quality [--llm qwen2.5-coder-1.5b] [--llm smollm2-135m]
                                                      [--data FILE] [--only measure|tune] [--json]
                                                      [--segmentation model|labels|filtered] [--after-filter]
                                                      [--talk-probe] [--start-probe] [--drop-remarks]
                                                      [--no-drop-previews] [--opening until-step]
                                                      [--closing back-to-step]

The transcripts (tests/showhowto/data/extract_steps_transcripts.jsonl) are how-to narration as
it comes: an intro that lists what will be done, filler, asides (a phone call, a sponsor, the
dog), steps stated across two or three lines, a line stating two steps, silence gaps, an
outro; plus non-instructional ones (a review, a vlog) whose true step count is 0. Each record
carries `truth`: the steps with the [start, end] of the lines that state them, and which lines
are intro / outro / aside / other talk. `truth.use` says whether a transcript was looked at
while the prompt was tuned (`tune`) or kept for measuring only (`measure`).

Per transcript and LLM it prints: steps extracted / true; temporal recall and precision at
IoU >= 0.3 and >= 0.5 (one-to-one, greedy by IoU); the fraction of extracted steps whose start
lies inside a true step; and how many extracted steps sit on intro, outro or aside lines. Then
the real pressure-cooker transcript (../shared/data/showhowto/, when present): steps, order,
range, and how many start on lines where the narrator states an action.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from vi.core.models.catalog import DEFAULT_LLM, SMALL_LLM
from vi.evaluation.showhowto.quality import iou

DATA = Path(__file__).resolve().parents[2] / "tests" / "showhowto" / "data" / "extract_steps_transcripts.jsonl"
PRESSURE_COOKER = (Path(__file__).resolve().parents[3] / "shared" / "data" / "showhowto"
                   / "pressure_cooker_transcript.json")
# The pressure cooker's lines (0-based segment indices) that state an action: foil rings,
# potatoes on them, the water, 15 minutes, pop them out, pull it out, cut it open.
PRESSURE_COOKER_ACTIONS = [(4, 7), (8, 8), (11, 12), (16, 19), (26, 26), (31, 32), (35, 35)]
PRESSURE_COOKER_TALK = {"intro": [0, 1, 2, 3], "outro": [27, 28, 29, 30, 41, 42, 43, 44, 45, 46]}
HELDOUT = Path(__file__).resolve().parent / "heldout" / "extract_transcripts.jsonl"
NOT_STEPS = ("intro", "outro", "aside")
START_SLACK = 0.05  # seconds: a start on the boundary of a true step is inside it


def load_transcripts(path: Path = DATA) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def match(extracted: list[dict], truth: list[dict], threshold: float) -> int:
    """How many true steps an extracted step overlaps with IoU >= threshold, one to one."""
    pairs = sorted(((iou((e["start"], e["end"]), (t["start"], t["end"])), i, j)
                    for i, e in enumerate(extracted) for j, t in enumerate(truth)), reverse=True)
    used_e, used_t = set(), set()
    for score, i, j in pairs:
        if score >= threshold and i not in used_e and j not in used_t:
            used_e.add(i)
            used_t.add(j)
    return len(used_t)


def line_role(record: dict, index: int) -> str:
    truth = record["truth"]
    for role in ("intro", "outro", "aside", "other"):
        if index in truth.get(role, []):
            return role
    return "step"


def step_role(record: dict, step: dict) -> str:
    """What the lines under an extracted step are, by the time it overlaps each kind
    (a step of no length: the line its start is on)."""
    segments = record["transcript"]["segments"]
    weight: dict[str, float] = {}
    for i, seg in enumerate(segments):
        if step["end"] - step["start"] < 0.01:
            overlap = 1.0 if seg["start"] <= step["start"] <= seg["end"] else 0.0
        else:
            overlap = max(0.0, min(step["end"], seg["end"]) - max(step["start"], seg["start"]))
        if overlap > 0:
            role = line_role(record, i)
            weight[role] = weight.get(role, 0.0) + overlap
    return max(weight, key=weight.__getitem__) if weight else "silence"


def score(record: dict, items: list[dict]) -> dict:
    truth = record["truth"]["steps"]
    n, k = len(truth), len(items)
    roles = [step_role(record, s) for s in items]
    inside = [any(t["start"] - START_SLACK <= s["start"] <= t["end"] for t in truth) for s in items]
    row = {"id": record["id"], "use": record["truth"]["use"], "true": n, "steps": k,
           "inside": sum(inside) / k if k else None,
           **{role: roles.count(role) for role in NOT_STEPS}}
    for threshold in (0.3, 0.5):
        found = match(items, truth, threshold)
        row[f"recall@{threshold}"] = found / n if n else None
        row[f"precision@{threshold}"] = found / k if k else None
    return row


def by_line(record: dict, items: list[dict]) -> dict:
    """The issue's measures by line (`lines`: 0-based indices into transcript.segments, as the
    records and the truth both count): a true step is found when an extracted step starts on
    one of its lines (one to one, in time order); an extracted step is on a step when it starts
    on a true step's line; intro/outro: extracted steps starting on such a line."""
    truth = [tuple(s["lines"]) for s in record["truth"]["steps"]]
    starts = [int(s["lines"][0]) for s in items]
    used: set[int] = set()
    for a, b in truth:
        hit = next((k for k, line in enumerate(starts) if a <= line <= b and k not in used), None)
        if hit is not None:
            used.add(hit)
    on_step = sum(any(a <= line <= b for a, b in truth) for line in starts)
    talk = {role: sum(line in record["truth"].get(role, []) for line in starts) for role in ("intro", "outro")}
    return {"line_found": len(used), "line_true": len(truth), "line_on_step": on_step, "line_steps": len(starts),
            "line_recall": len(used) / len(truth) if truth else None,
            "line_precision": on_step / len(starts) if starts else None,
            "line_intro": talk["intro"], "line_outro": talk["outro"]}


def pressure_cooker_record() -> dict | None:
    """The real transcript with its truth by line (PRESSURE_COOKER_ACTIONS), scored as the others."""
    if not PRESSURE_COOKER.exists():
        return None
    record = json.loads(PRESSURE_COOKER.read_text())
    segments = record["transcript"]["segments"]
    steps = [{"lines": [a, b], "start": segments[a]["start"], "end": segments[b]["end"], "text": ""}
             for a, b in PRESSURE_COOKER_ACTIONS]
    return record | {"truth": {"instructional": True, "use": "real", "steps": steps, "aside": [],
                               "other": [], **PRESSURE_COOKER_TALK}}


def meets_bar(row: dict) -> bool:
    """The issue's bar: step count within 2 of the truth, no intro/outro/aside step, and
    recall at IoU 0.3 of at least 4/6 on how-to narration."""
    recall_ok = row["true"] == 0 or (row["recall@0.3"] or 0.0) >= 4 / 6 - 1e-9
    return abs(row["steps"] - row["true"]) <= 2 and not any(row[r] for r in NOT_STEPS) and recall_ok


KEPT_READINGS = ("repairs", "line_labels")  # kept in each row beside the steps: a later rule is read off them


def run_one(record: dict, config) -> tuple[list[dict], str | None, float, dict]:
    """The record's steps, its error kind (or None), the seconds it took, and the stage's KEPT_READINGS."""
    from vi.core.errors import RecordError
    from vi.pipelines.showhowto.extract_steps import extract

    begun = time.perf_counter()
    try:
        steps = extract(record, config)["steps"]
        items, error, readings = steps["items"], None, {key: steps.get(key) for key in KEPT_READINGS}
    except RecordError as exc:
        items, error, readings = [], exc.kind, {key: None for key in KEPT_READINGS}
    return items, error, time.perf_counter() - begun, readings


def pressure_cooker(config) -> dict | None:
    if not PRESSURE_COOKER.exists():
        return None
    record = json.loads(PRESSURE_COOKER.read_text())
    segments = record["transcript"]["segments"]
    items, error, seconds, readings = run_one(record, config)
    actions = [(segments[a]["start"], segments[b]["end"]) for a, b in PRESSURE_COOKER_ACTIONS]
    on_action = sum(any(a - START_SLACK <= s["start"] <= b for a, b in actions) for s in items)
    return {"steps": len(items), "error": error, "on_action_lines": on_action,
            **by_line(pressure_cooker_record(), items),
            "ordered": [s["start"] for s in items] == sorted(s["start"] for s in items),
            "in_range": all(0 <= s["start"] <= s["end"] <= 135.1 for s in items),
            "seconds": round(seconds, 1), "items": items, **readings}


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report(llm: str, rows: list[dict], cooker: dict | None) -> str:
    head = (f"{'transcript':18} {'use':7} {'steps/true':>10} {'R@.3':>5} {'P@.3':>5} {'R@.5':>5} "
            f"{'P@.5':>5} {'start in':>8} {'intro':>5} {'outro':>5} {'aside':>5} {'bar':>4} {'s':>5}")
    lines = [f"LLM {llm}", head]
    for r in rows:
        lines.append(f"{r['id']:18} {r['use']:7} {str(r['steps']) + '/' + str(r['true']):>10} "
                     f"{fmt(r['recall@0.3']):>5} {fmt(r['precision@0.3']):>5} {fmt(r['recall@0.5']):>5} "
                     f"{fmt(r['precision@0.5']):>5} {fmt(r['inside']):>8} {r['intro']:>5} {r['outro']:>5} "
                     f"{r['aside']:>5} {'yes' if meets_bar(r) else 'NO':>4} {r['seconds']:>5.1f}"
                     + (f"  ({r['error']})" if r["error"] else ""))
    howto = [r for r in rows if r["true"]]
    n_true, n_steps = sum(r["true"] for r in howto), sum(r["steps"] for r in howto)
    for threshold in (0.3, 0.5) if n_true else ():
        found = sum(round(r[f"recall@{threshold}"] * r["true"]) for r in howto)
        lines.append(f"how-to overall @IoU {threshold}: recall {found}/{n_true} = {found / n_true:.2f}, "
                     f"precision {found}/{n_steps} = {found / max(1, n_steps):.2f}")
    lines.append(f"bar met on {sum(meets_bar(r) for r in rows)}/{len(rows)} transcripts")
    if cooker is not None:
        error = f" ({cooker['error']})" if cooker["error"] else ""
        lines.append(f"pressure cooker: {cooker['steps']} steps{error}, "
                     f"ordered {cooker['ordered']}, times in 0-135 s {cooker['in_range']}, "
                     f"{cooker['on_action_lines']}/{cooker['steps']} start on action lines, {cooker['seconds']} s")
        lines += [f"    {s['start']:7.2f} {s['end']:7.2f}  {s['text']}" for s in cooker["items"]]
    return "\n".join(lines)


def line_table(rows: list[dict], cooker: dict | None, before: dict | None = None) -> str:
    """The issue's measures by line (by_line), per transcript, with those of an earlier run
    (`before`: what --save wrote) beside them where it has the same transcript."""
    earlier = {r["id"]: r for r in (before or {}).get("rows", [])}
    if before and before.get("pressure_cooker"):
        earlier["pressure_cooker"] = before["pressure_cooker"]
    both = [*rows, *([cooker | {"id": "pressure_cooker", "use": "real", "true": len(PRESSURE_COOKER_ACTIONS)}]
                     if cooker else [])]

    def cells(r: dict | None) -> str:
        if r is None or "line_found" not in r:
            return f"{'':>7} {'':>7} {'':>5}"
        found = f"{r['line_found']}/{r['line_true']}" if r["line_true"] else "-"
        on = f"{r['line_on_step']}/{r['line_steps']}" + (f" ({r['error']})" if r.get("error") else "")
        return f"{found:>7} {on:>7} {r['line_intro'] + r['line_outro']:>5}"

    head = f"{'transcript':22} {'use':7} {'found':>7} {'on step':>7} {'talk':>5}"
    lines = ["by line (0-based segment indices): found = true steps an extracted step starts on (one to one); "
             "on step = extracted steps starting on a true step's line; talk = starting on an intro/outro line",
             head + ("   | before: " + f"{'found':>7} {'on step':>7} {'talk':>5}" if before else "")]
    for r in both:
        lines.append(f"{r['id']:22} {r['use']:7} {cells(r)}" + (f"   |         {cells(earlier.get(r['id']))}"
                                                             if before else ""))
    sets = sorted({(r.get("source") or "", r["use"]) for r in rows})
    for (source, use), group in ((key, [r for r in rows if (r.get("source") or "", r["use"]) == key and r["line_true"]])
                                 for key in sets):
        name = f"{source} ({use})"
        if group:
            found, true = sum(r["line_found"] for r in group), sum(r["line_true"] for r in group)
            on, steps = sum(r["line_on_step"] for r in group), sum(r["line_steps"] for r in group)
            lines.append(f"{name}: recall by line {found}/{true} = {found / true:.2f}, "
                         f"steps on a true step's line {on}/{steps} = {on / max(1, steps):.2f}")
    return "\n".join(lines)


def evaluate(llm: str, records: list[dict], with_cooker: bool = True, after_filter: bool = False,
             progress: Path | None = None, **config_args) -> tuple[list[dict], dict | None]:
    """Rows of `score` per record; with `after_filter`, each record goes through
    `vi filter-instructional` (same LLM) first, and one it labels not instructional gets no
    steps (extract-steps' own not_instructional error), as in the pipelines."""
    from vi.pipelines.showhowto.extract_steps import ExtractConfig
    from vi.pipelines.showhowto.filter_instructional import FilterConfig, classify

    config = ExtractConfig(llm=llm, **config_args)
    screen = FilterConfig(llm=llm) if after_filter else None
    rows = []
    for record in records:
        if screen is not None:
            record = record | classify(record, screen)
        items, error, seconds, readings = run_one(record, config)
        rows.append(score(record, items) | by_line(record, items) | {"error": error, "seconds": seconds, "items": items,
                                                                    "source": record.get("source"), **readings})
        row = rows[-1]
        print(f"  {llm} {record['id']}: {row['steps']}/{row['true']} steps, R@.3 {fmt(row['recall@0.3'])}, "
              f"by line {row['line_found']}/{row['line_true']} found, {row['line_on_step']}/{row['line_steps']} "
              f"on a step, {seconds:.0f} s", file=sys.stderr, flush=True)  # progress: a run takes minutes
        if progress is not None:  # each row as soon as it is measured: a long run cut short keeps them
            with progress.open("a", encoding="utf-8") as out:
                out.write(json.dumps(row) + "\n")
    cooker = pressure_cooker(config) if with_cooker else None
    if cooker is not None:
        print(f"  {llm} pressure cooker: by line {cooker['line_found']}/{cooker['line_true']} found, "
              f"{cooker['line_on_step']}/{cooker['line_steps']} on a step", file=sys.stderr, flush=True)
        if progress is not None:
            with progress.open("a", encoding="utf-8") as out:
                out.write(json.dumps(cooker | {"id": "pressure_cooker", "use": "real"}) + "\n")
    return rows, cooker


# vi extract-steps' options a run can set (each a flag here, its help and spelling the stage's own); those left
# out keep the stage's defaults
STAGE_OPTIONS = ("talk_probe", "start_probe", "drop_remarks", "drop_previews", "opening", "closing", "after_talk",
                 "after_more", "ask_rest", "rest_after", "read_listed_talk", "read_requests", "requests_name_the_page",
                 "read_folds",
                 "marked_steps", "read_fold_targets", "split_steps", "reground_heads", "skip_conditions")


def add_stage_options(parser: argparse.ArgumentParser, names: Sequence[str] = STAGE_OPTIONS) -> None:
    """One flag per `names` field of ExtractConfig, built from the field: a bool as --x / --no-x."""
    from vi.core.config import cli_fields, long_flag
    from vi.pipelines.showhowto.extract_steps import ExtractConfig

    fields = {f.name: f for f in cli_fields(ExtractConfig)}
    for name in names:
        field = fields[name]
        flag = long_flag(field).split("/")[0]  # a bool's own "--x/--no-x": argparse's action adds the --no-
        what = f"vi extract-steps {flag} (default: the stage's own, {field.default}). " + field.metadata["help"]
        parser.add_argument(flag, dest=name, help=what.replace("%", "%%"),
                            action=argparse.BooleanOptionalAction if isinstance(field.default, bool) else "store")


def main(argv: Sequence[str] | None = None) -> None:
    from vi.pipelines.showhowto.extract_steps import SEGMENTATIONS

    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.showhowto.extract_quality",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", action="append", help="an embedded LLM alias or .gguf (repeatable); "
                        "default: qwen2.5-coder-1.5b and smollm2-135m")
    parser.add_argument("--data", type=Path, action="append", help=(
        f"a transcripts file (repeatable); default: {DATA.name} (tests/showhowto/data/); "
        f"--data {HELDOUT.relative_to(HELDOUT.parents[3])} holds the held-out narrations"))
    parser.add_argument("--only", choices=("tune", "measure"), help="only the transcripts of this use")
    parser.add_argument("--id", action="append", help="only this transcript (repeatable)")
    parser.add_argument("--no-cooker", action="store_true", help="skip the pressure-cooker transcript")
    parser.add_argument("--verbose", action="store_true", help="print each extracted step")
    parser.add_argument("--json", action="store_true", help="also print every row as JSON")
    parser.add_argument("--save", type=Path, help="write the rows (and the pressure cooker's) to this JSON file")
    parser.add_argument("--before", type=Path, help="a file --save wrote from an earlier run: its measures "
                        "by line are printed beside this run's")
    parser.add_argument("--segmentation", choices=SEGMENTATIONS, default="filtered",
                        help="vi extract-steps --segmentation (default: the stage's own, filtered)")
    add_stage_options(parser)
    parser.add_argument("--after-filter", action="store_true", help="each transcript goes through "
                        "vi filter-instructional first (same LLM), as in the pipelines: one it labels "
                        "not instructional gets no steps")
    args = parser.parse_args(argv)
    records = [r | {"source": path.name} for path in args.data or [DATA] for r in load_transcripts(path)
               if args.only in (None, r["truth"]["use"]) and (not args.id or r["id"] in args.id)]
    options = {name: getattr(args, name) for name in STAGE_OPTIONS
               if getattr(args, name) is not None}  # those named; the rest the stage's defaults
    for llm in args.llm or [DEFAULT_LLM, SMALL_LLM]:
        rows, cooker = evaluate(llm, records, with_cooker=not args.no_cooker, after_filter=args.after_filter,
                                progress=args.save.with_suffix(".rows.jsonl") if args.save else None,
                                segmentation=args.segmentation, **options)
        print(report(f"{llm}, --segmentation {args.segmentation}" + "".join(
                         f", --{kind} {on}" if isinstance(on, str)
                         else f", --{'' if on else 'no-'}{kind.replace('_', '-')}" for kind, on in options.items())
                     + (", after vi filter-instructional" if args.after_filter else ""), rows, cooker), flush=True)
        if args.verbose:
            for r in rows:
                print(f"  {r['id']}:")
                for s in r["items"]:
                    print(f"    {s['start']:7.2f} {s['end']:7.2f}  {s['text']}")
        print(line_table(rows, cooker, json.loads(args.before.read_text()) if args.before else None), flush=True)
        if args.json:
            print(json.dumps({"llm": llm, "rows": rows, "pressure_cooker": cooker}))
        if args.save:
            args.save.write_text(json.dumps({"llm": llm, "rows": rows, "pressure_cooker": cooker}) + "\n")
        print()


if __name__ == "__main__":
    main()
