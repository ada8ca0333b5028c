"""`vi extract-steps` on hand-written narration whose true steps are known.

    python -m vi.evaluation.showhowto.extract_quality [--llm qwen2.5-coder-1.5b] [--llm smollm2-135m]
                                                      [--data FILE] [--only measure|tune] [--json]
                                                      [--segmentation model|labels|filtered] [--after-filter]

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
PRESSURE_COOKER = Path(__file__).resolve().parents[3] / "shared" / "data" / "showhowto" / "pressure_cooker_transcript.json"
# The pressure cooker's lines (0-based segment indices) that state an action: foil rings,
# potatoes on them, the water, 15 minutes, pop them out, pull it out, cut it open.
PRESSURE_COOKER_ACTIONS = [(4, 7), (8, 8), (11, 12), (16, 19), (26, 26), (31, 32), (35, 35)]
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


def meets_bar(row: dict) -> bool:
    """The issue's bar: step count within 2 of the truth, no intro/outro/aside step, and
    recall at IoU 0.3 of at least 4/6 on how-to narration."""
    recall_ok = row["true"] == 0 or (row["recall@0.3"] or 0.0) >= 4 / 6 - 1e-9
    return abs(row["steps"] - row["true"]) <= 2 and not any(row[r] for r in NOT_STEPS) and recall_ok


def run_one(record: dict, config) -> tuple[list[dict], str | None, float]:
    from vi.core.errors import RecordError
    from vi.pipelines.showhowto.extract_steps import extract

    begun = time.perf_counter()
    try:
        items, error = extract(record, config)["steps"]["items"], None
    except RecordError as exc:
        items, error = [], exc.kind
    return items, error, time.perf_counter() - begun


def pressure_cooker(config) -> dict | None:
    if not PRESSURE_COOKER.exists():
        return None
    record = json.loads(PRESSURE_COOKER.read_text())
    segments = record["transcript"]["segments"]
    items, error, seconds = run_one(record, config)
    actions = [(segments[a]["start"], segments[b]["end"]) for a, b in PRESSURE_COOKER_ACTIONS]
    on_action = sum(any(a - START_SLACK <= s["start"] <= b for a, b in actions) for s in items)
    return {"steps": len(items), "error": error, "on_action_lines": on_action,
            "ordered": [s["start"] for s in items] == sorted(s["start"] for s in items),
            "in_range": all(0 <= s["start"] <= s["end"] <= 135.1 for s in items),
            "seconds": round(seconds, 1), "items": items}


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
    for threshold in (0.3, 0.5):
        found = sum(round(r[f"recall@{threshold}"] * r["true"]) for r in howto)
        lines.append(f"how-to overall @IoU {threshold}: recall {found}/{n_true} = {found / n_true:.2f}, "
                     f"precision {found}/{n_steps} = {found / max(1, n_steps):.2f}")
    lines.append(f"bar met on {sum(meets_bar(r) for r in rows)}/{len(rows)} transcripts")
    if cooker is not None:
        lines.append(f"pressure cooker: {cooker['steps']} steps{' (' + cooker['error'] + ')' if cooker['error'] else ''}, "
                     f"ordered {cooker['ordered']}, times in 0-135 s {cooker['in_range']}, "
                     f"{cooker['on_action_lines']}/{cooker['steps']} start on action lines, {cooker['seconds']} s")
        lines += [f"    {s['start']:7.2f} {s['end']:7.2f}  {s['text']}" for s in cooker["items"]]
    return "\n".join(lines)


def evaluate(llm: str, records: list[dict], with_cooker: bool = True, after_filter: bool = False,
             **config_args) -> tuple[list[dict], dict | None]:
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
        items, error, seconds = run_one(record, config)
        rows.append(score(record, items) | {"error": error, "seconds": seconds, "items": items})
        row = rows[-1]
        print(f"  {llm} {record['id']}: {row['steps']}/{row['true']} steps, R@.3 {fmt(row['recall@0.3'])}, "
              f"{seconds:.0f} s", file=sys.stderr, flush=True)  # progress: a run takes minutes
    return rows, pressure_cooker(config) if with_cooker else None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.showhowto.extract_quality",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", action="append", help="an embedded LLM alias or .gguf (repeatable); "
                        "default: qwen2.5-coder-1.5b and smollm2-135m")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--only", choices=("tune", "measure"), help="only the transcripts of this use")
    parser.add_argument("--id", action="append", help="only this transcript (repeatable)")
    parser.add_argument("--no-cooker", action="store_true", help="skip the pressure-cooker transcript")
    parser.add_argument("--verbose", action="store_true", help="print each extracted step")
    parser.add_argument("--json", action="store_true", help="also print every row as JSON")
    parser.add_argument("--segmentation", choices=("model", "labels", "filtered"), default="filtered",
                        help="vi extract-steps --segmentation (default: the stage's own, filtered)")
    parser.add_argument("--after-filter", action="store_true", help="each transcript goes through "
                        "vi filter-instructional first (same LLM), as in the pipelines: one it labels "
                        "not instructional gets no steps")
    args = parser.parse_args(argv)
    records = [r for r in load_transcripts(args.data) if args.only in (None, r["truth"]["use"])
               and (not args.id or r["id"] in args.id)]
    for llm in args.llm or [DEFAULT_LLM, SMALL_LLM]:
        rows, cooker = evaluate(llm, records, with_cooker=not args.no_cooker, after_filter=args.after_filter,
                                segmentation=args.segmentation)
        print(report(f"{llm}, --segmentation {args.segmentation}"
                     + (", after vi filter-instructional" if args.after_filter else ""), rows, cooker), flush=True)
        if args.verbose:
            for r in rows:
                print(f"  {r['id']}:")
                for s in r["items"]:
                    print(f"    {s['start']:7.2f} {s['end']:7.2f}  {s['text']}")
        if args.json:
            print(json.dumps({"llm": llm, "rows": rows, "pressure_cooker": cooker}))
        print()


if __name__ == "__main__":
    main()
