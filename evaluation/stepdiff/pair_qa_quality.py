"""What `vi pair-qa` gets from each embedded LLM, on hand-written pairs of clip descriptions.

    python -m vi.evaluation.stepdiff.pair_qa_quality [--models smollm2-135m,qwen2.5-coder-1.5b]
        [--types 1,2,3] [--threads N] [--show] [--json FILE] [--replies FILE]

Each pair below describes two clips of one keystep the way `vi describe` would (three that
share their main action, two that do not). For every model and prompt type it asks the
stage's own prompts through the stage's own call (`pair_qa.ask`, greedy) and reports, per
type:
- QA per call: how many question-answer pairs the parser found in a reply (the prompts ask
  for 3 of types 1 and 2; type 3 always offers one);
- well-formed: of those, the fraction with a question and an answer, not cut off by the
  token limit (type 3: an answer that normalises to YES or NO), i.e. before the filter;
- kept: the fraction of the parsed QA the stage's filter keeps, and what it drops, by reason;
- type 3 only: agreement with the YES/NO written for each pair (its `same_action`).
A table needs len(PAIRS) x types LLM calls per model; Qwen2.5-1.5B takes 10-30 s per call on
2 CPU cores (--threads 1 when other work shares them: llama.cpp's threads wait on each other).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from vi.core.models.catalog import DEFAULT_LLM, SMALL_LLM
from vi.pipelines.stepdiff import pair_qa as pq

# Two clips of one keystep each; same_action is the YES/NO a person gives to prompt type 3.
PAIRS = [
    {"id": "onion", "keystep": "chop onion", "same_action": "YES",
     "d1": "The person chops a red onion with a chef's knife on a wooden board, holding it with a claw grip.",
     "d2": "The person dices a white onion using a food processor, pulsing it a few times."},
    {"id": "tyre", "keystep": "remove tyre", "same_action": "YES",
     "d1": "The person levers the tyre off the rim with two plastic tyre levers, working around the wheel.",
     "d2": "The person pulls the tyre off the rim by hand, without any tools, squeezing the bead inwards."},
    {"id": "pancake", "keystep": "flip pancake", "same_action": "YES",
     "d1": "The person slides a spatula under the pancake in a non-stick pan and turns it over.",
     "d2": "The person tosses the pancake in the air to flip it and catches it in a cast-iron skillet."},
    {"id": "dough", "keystep": "prepare dough", "same_action": "NO",
     "d1": "The person kneads a ball of dough by hand on a floured counter, folding and pressing it.",
     "d2": "The person weighs flour on a kitchen scale and pours it into a glass mixing bowl."},
    {"id": "grill", "keystep": "clean grill", "same_action": "NO",  # a clip mislabelled by its narration
     "d1": "The person scrubs the hot grill grates with a wire brush, back and forth.",
     "d2": "The person stands at a counter and talks to the camera about charcoal brands, holding a bag."},
]
DEFAULT_MODELS = f"{SMALL_LLM},{DEFAULT_LLM}"


def run_model(model: str, types: tuple[int, ...], max_new_tokens: int, threads: int | None,
              console: Console) -> list[dict]:
    """One result per (pair, type): the model's reply, how it finished, and its time."""
    from vi.core.models.llm import load_chat_llm

    config = pq.PairQAConfig(llm=model, types=types, max_new_tokens=max_new_tokens)
    llm = load_chat_llm(model, n_ctx=config.n_ctx, device=config.device, seed=config.seed, threads=threads)
    results = []
    for pair in PAIRS:
        for qa_type in types:
            start = time.perf_counter()
            reply, _ = pq.ask(llm, config, qa_type, pair["d1"], pair["d2"], pair["id"])
            results.append({"model": model, "pair": pair["id"], "type": qa_type, "reply": reply.text,
                            "finish": reply.finish_reason, "seconds": time.perf_counter() - start,
                            "expected": pair["same_action"] if qa_type == 3 else None})
            console.print(f"  {model} {pair['id']} type {qa_type}: {results[-1]['seconds']:.1f} s", highlight=False)
    return results


def judge(results: list[dict], max_answer_words: int) -> None:
    """Give each result its parsed QA and their fate, as the stage would (in place).

    The filter sees all the QA of one pair at once (a question repeated across types is a
    duplicate), so the results are judged per model and pair.
    """
    questions = {t: pq.first_question(pq.load_prompt(name, needs=("d1", "d2")).turns[-1][1])
                 for t, name in pq.PROMPT_NAMES.items()}
    pairs = {p["id"]: p for p in PAIRS}
    for model, pair_id in dict.fromkeys((r["model"], r["pair"]) for r in results):
        rows = [r for r in results if r["model"] == model and r["pair"] == pair_id]
        offered = [(row, qa) for row in rows for qa in pq.candidates(
            row["type"], row["reply"], row["finish"] == "length", questions[row["type"]])]
        pair = pairs[pair_id]
        reasons = pq.drop_reasons([qa for _, qa in offered], pair["d1"], pair["d2"], max_answer_words)
        for row in rows:
            row["qa"] = []
        for (row, qa), reason in zip(offered, reasons):
            row["qa"].append({"q": qa.q, "a": qa.a, "dropped": reason})


def show_pair(model: str, pair_id: str, rows: list[dict], console: Console) -> None:
    pair = next(p for p in PAIRS if p["id"] == pair_id)
    console.print(f"[bold]{model} {pair_id}[/bold]  Video 1: {pair['d1']}\n  Video 2: {pair['d2']}",
                  highlight=False)
    for row in rows:
        console.print(f"  type {row['type']} reply ({row['finish']}): {row['reply']!r}", highlight=False)
        for qa in row["qa"]:
            fate = f"[red]dropped: {qa['dropped']}[/red]" if qa["dropped"] else "[green]kept[/green]"
            console.print(f"    {fate}  Q: {qa['q']}  A: {qa['a']}", highlight=False)


def summarise(results: list[dict]) -> list[dict]:
    """Per model and type: calls, QA per call, well-formed, kept, drops by reason, type 3 accuracy."""
    out = []
    for model, qa_type in dict.fromkeys((r["model"], r["type"]) for r in results):
        rows = [r for r in results if r["model"] == model and r["type"] == qa_type]
        qa = [q for r in rows for q in r["qa"]]
        dropped = Counter(q["dropped"] for q in qa if q["dropped"])
        well_formed = sum(q["dropped"] not in ("malformed", "truncated") for q in qa)
        summary = {"model": model, "type": qa_type, "calls": len(rows), "qa": len(qa),
                   "qa_per_call": len(qa) / len(rows), "well_formed": well_formed / len(qa) if qa else 0.0,
                   "kept": sum(not q["dropped"] for q in qa) / len(qa) if qa else 0.0,
                   "dropped": dict(dropped.most_common()),
                   "seconds_per_call": sum(r["seconds"] for r in rows) / len(rows)}
        if qa_type == 3:
            summary["agreement"] = sum(r["qa"][0]["a"] == r["expected"] for r in rows) / len(rows)
        out.append(summary)
    return out


def table(summaries: list[dict]) -> Table:
    grid = Table(title="vi pair-qa: QA before and after the filter, per model and prompt type")
    for name in ("model", "type", "calls", "QA/call", "well-formed", "kept", "dropped (reason: n)",
                 "type 3 = truth", "s/call"):
        grid.add_column(name, justify="left" if name in ("model", "dropped (reason: n)") else "right")
    for s in summaries:
        grid.add_row(s["model"], str(s["type"]), str(s["calls"]), f"{s['qa_per_call']:.2f}",
                     f"{s['well_formed']:.0%}", f"{s['kept']:.0%}",
                     ", ".join(f"{k}: {v}" for k, v in s["dropped"].items()) or "-",
                     f"{s['agreement']:.0%}" if "agreement" in s else "", f"{s['seconds_per_call']:.1f}")
    return grid


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated GGUF models (aliases or paths)")
    parser.add_argument("--types", default="1,2,3", help="prompt types, comma-separated")
    parser.add_argument("--max-new-tokens", type=int, default=pq.PairQAConfig.max_new_tokens)
    parser.add_argument("--threads", type=int, default=None,
                        help="llama.cpp threads (default: its own choice; 1 is faster on a busy machine)")
    parser.add_argument("--show", action="store_true", help="print every reply and the fate of each QA")
    parser.add_argument("--max-answer-words", type=int, default=pq.PairQAConfig.max_answer_words)
    parser.add_argument("--json", type=Path, help="also write the replies, QA and summaries to FILE")
    parser.add_argument("--replies", type=Path, help="judge the replies a --json FILE holds again (after a "
                        "change to the parser or the filter) instead of asking the models")
    args = parser.parse_args(argv)
    types = tuple(int(t) for t in args.types.split(","))
    console = Console(stderr=True)
    if args.replies:
        results = [{k: v for k, v in r.items() if k != "qa"} for r in json.loads(args.replies.read_text())["results"]]
    else:
        results = [r for model in args.models.split(",")
                   for r in run_model(model, types, args.max_new_tokens, args.threads, console)]
    judge(results, args.max_answer_words)
    if args.show:
        for model, pair in dict.fromkeys((r["model"], r["pair"]) for r in results):
            show_pair(model, pair, [r for r in results if r["model"] == model and r["pair"] == pair], console)
    summaries = summarise(results)
    Console().print(table(summaries))
    if args.json:
        args.json.write_text(json.dumps({"results": results, "summaries": summaries}, indent=1) + "\n")


if __name__ == "__main__":
    main()
