"""`vi judge progression`'s decision on hand-written caption pairs whose answer is known, old and new.

    python -m vi.evaluation.progresscaptioner.judge_heldout [--split measure|tune] [--llm qwen2.5-coder-1.5b]
        [--prompt eval] [--embedder minilm-l6] [--same-state S] [--no-orders] [--threads N] [--evidence FILE]
        [--json]

The pairs are in heldout/judge_pairs_{tune,measure}.json: adjacent captions of everyday how-to actions,
half with a clear change of an object's state (`change` true), half the same state reworded, seen from
elsewhere or with a hand moved (false). The tune split was looked at while the judge was designed (the
embedder's --same-state threshold was read off it); the measure split was written before any measurement
and is only measured.

Each pair is judged the way the stage judges it (`judge_progression.PairJudge`, the stage's own code):
- none: the paper's prompt asked once, greedy and grammar-constrained (`--debias none`, the old behaviour);
- orders: the same, asked in both orders (the paper's prompt and the twin with A and B swapped): what a
  backend without likelihoods (openai:, transformers:) gets from `--debias calibrated`, and `--debias orders`;
- calibrated: the letters scored by likelihood in both orders, calibrated against content-free captions;
- channel: the second caption scored after the first under "the same moment" and "a later moment"
  (`--debias channel`); the paper's letter is evidence only. The default, channel+probe, is not a row: its
  change probe was trained on these pairs, so they cannot measure it (keyframes_quality's blind sets do);
- +embedder: any of these, with the pairs the orders leave undecided decided by the embedder's similarity;
- embedder alone: similarity < --same-state says change.
The rows are decisions made by `judge_progression.decide` from the evidence the judge gave, so the evidence
is gathered once per pair (greedy letters of both orders, likelihoods of both orders, the similarity) and
kept in --evidence FILE (JSONL, appended as gathered; a rerun judges only what the file lacks; the file
behind RESULTS.md is measured/judge_heldout_evidence.jsonl).

Printed per row: the decisions (change / same / uncertain), balanced accuracy (the mean of the recall of the
change pairs and of the same-state pairs; an uncertain decision counts as wrong, since it keeps no keyframe
and labels nothing) and the letter distribution of the paper's prompt.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from vi.core.models.catalog import DEFAULT_LLM, DEFAULT_TEXT_EMBEDDING

HERE = Path(__file__).resolve().parent
SPLITS = {"tune": HERE / "heldout" / "judge_pairs_tune.json", "measure": HERE / "heldout" / "judge_pairs_measure.json"}
EVIDENCE = HERE / "measured" / "judge_heldout_evidence.jsonl"


def load_pairs(split: str) -> list[dict]:
    data = json.loads(SPLITS[split].read_text(encoding="utf-8"))
    if data.get("split") != split:
        raise SystemExit(f"{SPLITS[split]} says it is the {data.get('split')!r} split, not {split!r}")
    return data["pairs"]


def evidence_key(row: dict) -> tuple:
    return row["llm"], row["prompt"], row["kind"], row["desc1"], row["desc2"], row.get("action")


def load_evidence(path: Path | None) -> dict[tuple, dict]:
    known: dict[tuple, dict] = {}
    if path is None or not path.exists():
        return known
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            known[evidence_key(row)] = row["evidence"]
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a kill: judged again
    return known


def gather(pairs: list[dict], llm_ref: str, prompt: str, embedder_ref: str | None, threads: int | None,
           path: Path | None, orders: bool = True) -> dict[str, list[dict]]:
    """Per kind (greedy: the letters of both orders, asked, or with `orders` false, "once": the paper's
    order alone; scored: likelihoods of both orders; similarity), the evidence of every pair, from the file
    where it is there, else judged now and appended."""
    from vi.core.devices import resolve_placement
    from vi.core.models.chat import LLMSettings, load_llm
    from vi.core.models.text_embedding import load_text_embedder
    from vi.core.seeding import record_seed
    from vi.pipelines.progresscaptioner.judge_progression import PairJudge

    known = load_evidence(path)
    sink = path.open("a", encoding="utf-8") if path else None
    loaded: dict[str, object] = {}

    def llm():
        if "llm" not in loaded:
            loaded["llm"] = load_llm(LLMSettings(llm_ref, n_ctx=2048, device="auto", seed=0, threads=threads))
        return loaded["llm"]

    def embedder():
        if "embedder" not in loaded:
            loaded["embedder"] = load_text_embedder(embedder_ref, resolve_placement("cpu", "auto"))
        return loaded["embedder"]

    kinds = {"greedy": lambda: PairJudge(llm(), prompt=prompt, debias="orders")} if orders else {
        "once": lambda: PairJudge(llm(), prompt=prompt, debias="none")}
    kinds["scored"] = lambda: PairJudge(llm(), prompt=prompt, debias="calibrated")
    kinds["channel"] = lambda: PairJudge(llm(), prompt=prompt, debias="channel")
    if embedder_ref:
        kinds[f"similarity {embedder_ref}"] = None
    out: dict[str, list[dict]] = {}
    judges: dict[str, PairJudge] = {}
    try:
        for kind, make in kinds.items():
            got, start, new = [], time.perf_counter(), 0
            for pair in pairs:
                row = {"llm": llm_ref if make else embedder_ref, "prompt": prompt if make else None, "kind": kind,
                       "desc1": pair["desc1"], "desc2": pair["desc2"], "action": pair["action"] if make else None}
                key = evidence_key(row)
                if key not in known:
                    if make is None:
                        first, second = embedder().encode([pair["desc1"], pair["desc2"]])
                        found = {"similarity": round(float(first @ second), 4)}
                    else:
                        if kind not in judges:  # made once, not for every pair
                            judges[kind] = make()
                        judge = judges[kind]
                        seed = record_seed(0, pair["id"]) % 2**32
                        once = known.get(evidence_key({**row, "kind": "once"}))
                        asked = known.get(evidence_key({**row, "kind": "greedy"})) or once
                        if kind == "greedy" and once:  # the paper's order was asked alike: ask the other
                            found = judge.orders_evidence(pair["desc1"], pair["desc2"], action=pair["action"],
                                                          seed=seed, paper=once["letters"]["paper"])
                        elif kind == "channel" and asked:  # the paper's letter was asked alike: score only
                            found = judge.channel_evidence(pair["desc1"], pair["desc2"], action=pair["action"],
                                                           seed=seed, paper=asked["letters"]["paper"])
                        else:
                            found = judge.evidence(pair["desc1"], pair["desc2"], action=pair["action"], seed=seed,
                                                   where=f"pair {pair['id']}: ")
                    known[key] = found
                    new += 1
                    if sink:
                        sink.write(json.dumps({**row, "id": pair["id"], "evidence": found}) + "\n")
                        sink.flush()
                got.append(known[key])
            if new:
                print(f"  {kind}: {new} pairs judged, {(time.perf_counter() - start) / new:.1f} s/pair",
                      file=sys.stderr)
            out[kind] = got
    finally:
        if sink:
            sink.close()
    return out


# the channel's row: the default's LLM half (the default adds the change probe, trained on these pairs)
CHANNEL_ROW = "channel: same vs later moment, scored"


def rows(pairs: list[dict], evidence: dict[str, list[dict]], prompt: str, embedder_ref: str | None,
         same_state: float) -> dict[str, list[dict]]:
    """Decision rows: name -> per pair the `decide` output."""
    from vi.pipelines.progresscaptioner.judge_progression import decide

    similarity = evidence.get(f"similarity {embedder_ref}") if embedder_ref else None
    out = {}
    greedy, scored = evidence.get("greedy"), evidence["scored"]
    out["none (old: paper's prompt once)"] = [
        decide({"method": "none", "letters": {"paper": g["letters"]["paper"]}}, prompt, None)
        for g in greedy or evidence["once"]]
    if greedy:
        out["orders (both orders asked)"] = [decide(g, prompt, None) for g in greedy]
    out["calibrated (scored, both orders)"] = [decide(s, prompt, None) for s in scored]
    out[CHANNEL_ROW] = [decide(c, prompt, None) for c in evidence["channel"]]
    if similarity:
        if greedy:
            out[f"orders + {embedder_ref}"] = [decide({**g, **m}, prompt, same_state)
                                               for g, m in zip(greedy, similarity)]
        out[f"calibrated + {embedder_ref}"] = [decide({**s, **m}, prompt, same_state)
                                                         for s, m in zip(scored, similarity)]
        out[f"{embedder_ref} alone (similarity < {same_state})"] = [
            {"change": m["similarity"] < same_state, "letter": None} for m in similarity]
    return out


def balanced_accuracy(pairs: list[dict], decisions: list[dict]) -> dict:
    """Recall of the change pairs and of the same-state pairs, and their mean; uncertain counts as wrong."""
    right = Counter()
    total = Counter(p["change"] for p in pairs)
    for pair, decided in zip(pairs, decisions):
        right[pair["change"]] += decided["change"] is pair["change"]
    recall = {key: right[key] / total[key] for key in (True, False) if total[key]}
    return {"change_recall": recall.get(True), "same_recall": recall.get(False),
            "balanced_accuracy": sum(recall.values()) / len(recall) if recall else None}


def report(pairs: list[dict], decided: dict[str, list[dict]], evidence: dict[str, list[dict]]) -> dict:
    result = {}
    for name, decisions in decided.items():
        counts = Counter("change" if d["change"] else "uncertain" if d["change"] is None else "same"
                         for d in decisions)
        result[name] = {**balanced_accuracy(pairs, decisions), "decisions": dict(counts),
                        "letters": dict(Counter(d["letter"] for d in decisions if d.get("letter")))}
    asked = evidence.get("greedy") or evidence["once"]
    result["paper's prompt, greedy letters"] = {"letters": dict(Counter(g["letters"]["paper"] for g in asked))}
    if evidence.get("greedy"):
        result["swapped prompt, greedy letters"] = {"letters": dict(Counter(g["letters"]["swapped"]
                                                                            for g in evidence["greedy"]))}
    for order in ("paper", "swapped"):
        result[f"{order} prompt, most likely letters"] = {
            "letters": dict(Counter(s["letters"][order] for s in evidence["scored"]))}
    return result


def print_table(split: str, pairs: list[dict], result: dict) -> None:
    changed = sum(p["change"] for p in pairs)
    print(f"{split} split: {len(pairs)} pairs, {changed} with a change of state, {len(pairs) - changed} without")
    print(f"{'decision':<52} {'bal.acc':>7} {'change R':>8} {'same R':>7}  decisions / letters")
    for name, row in result.items():
        if "balanced_accuracy" not in row:
            print(f"{name:<52} {'':>7} {'':>8} {'':>7}  letters {row['letters']}")
            continue
        print(f"{name:<52} {row['balanced_accuracy']:>7.3f} {row['change_recall']:>8.3f} {row['same_recall']:>7.3f}"
              f"  {row['decisions']}" + (f" letters {row['letters']}" if row["letters"] else ""))


def main(argv: list[str] | None = None) -> int:
    from vi.pipelines.progresscaptioner.judge_progression import SAME_STATE

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=tuple(SPLITS), default="measure")
    parser.add_argument("--llm", default=DEFAULT_LLM)
    parser.add_argument("--prompt", choices=("eval", "pseudo"), default="eval")
    parser.add_argument("--embedder", default=DEFAULT_TEXT_EMBEDDING, help="'none' for none")
    parser.add_argument("--same-state", type=float, default=SAME_STATE)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--evidence", type=Path, default=EVIDENCE, help="gathered evidence (JSONL); 'none' keeps none")
    parser.add_argument("--no-orders", action="store_true", help="skip the greedy letters of the swapped order "
                        "(the orders rows: what backends without likelihoods get); halves the greedy asks")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    embedder = None if args.embedder == "none" else args.embedder
    pairs = load_pairs(args.split)
    evidence = gather(pairs, args.llm, args.prompt, embedder, args.threads,
                      None if str(args.evidence) == "none" else args.evidence, orders=not args.no_orders)
    result = report(pairs, rows(pairs, evidence, args.prompt, embedder, args.same_state), evidence)
    print(f"judge {args.llm}, --prompt {args.prompt}")
    print_table(args.split, pairs, result)
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
