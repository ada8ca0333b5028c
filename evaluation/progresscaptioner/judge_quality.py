"""`vi judge progression`'s judges on ProgressCaptioner-7B's own captions of the FrameCapEval sequences.

    python -m vi.evaluation.progresscaptioner.judge_quality [--llm smollm2-135m] [--llm qwen2.5-coder-1.5b]
        [--prompt pseudo] [--prompt eval] [--debias none,calibrated] [--limit N] [--seed 0] [--threads N]
        [--answers FILE] [--kept-only] [--json]

The 141 sequences shipped with the release (../shared/data/progcaptioner/output/{coin,htc}_valhs_seq.json:
84 COIN, 57 HowToChange, 3 to 6 frames) carry the model's reply `response0`; each is parsed with
`frame_replies.parse_frame_replies`, and every adjacent pair whose two captions are present is judged
by each LLM with each prompt through `judge_progression.judge_pair` (the stage's own function: the
constrained {"answer": A|B|C} reply, the eval prompt with the sequence's `action_label`).

Printed: the parse (sequences, clean replies, repairs, frames missing), the pairs, the answer
distribution per LLM and prompt (with the seconds per pair), and per prompt the agreement between each
two LLMs on the same pairs: raw agreement of the letters and Cohen's kappa (scikit-learn), which
discounts the agreement two judges with those answer distributions would reach by chance. There are no
ground-truth labels in the release, so this measures consistency, not accuracy. --limit N judges a
seeded sample of N sequences (random.Random(seed).sample, sources mixed) instead of all 141.

--debias (default none, the paper's single ask) judges as `vi judge progression --debias` does: the letter
is the stage's decision (the channel's two hypotheses, both orders, calibrated, the embedder), kept in
--answers with its verdict, and the tables name it "PROMPT --debias DEBIAS". --debias channel+probe reads a
pair's kept --debias channel verdict again with the change probe, asking nothing (the channel's scores are the
same under both).

--answers FILE keeps every letter as it is given, one JSON line per pair and judge, and a rerun with the
same file judges only what it lacks: a run over all 524 pairs with a 1.5 B judge takes hours on a CPU,
so it may be stopped and taken up again (--kept-only reports what a stopped run covered, judging
nothing). The seconds per pair count the pairs judged in this run.
The letters behind the figures of evaluation/progresscaptioner/RESULTS.md are kept in the repository,
measured/judge_answers.jsonl (ids as `vi frames --framecap` gives them; every letter of both embedded
judges with both prompts on all 524 pairs): `--answers` that file prints the figures again at once.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Iterable
from itertools import combinations
from pathlib import Path

from vi.core.models.catalog import DEFAULT_LLM, SMALL_LLM
from vi.pipelines.progresscaptioner.frame_replies import parse_frame_replies
from vi.pipelines.progresscaptioner.frame_sources import framecap_ids

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "progcaptioner" / "output"
SOURCES = {"coin": "COIN", "htc": "HTC"}


def load_sequences(folder: Path = DATA) -> list[dict]:
    """[{id, source, action, texts: [caption | None], repairs, missing}] from both release files."""
    out = []
    for stem, source in SOURCES.items():
        entries = json.loads((folder / f"{stem}_valhs_seq.json").read_text(encoding="utf-8"))
        for entry, record_id in zip(entries, framecap_ids(entries, source)):  # as vi frames --framecap names them
            parsed = parse_frame_replies(entry["response0"], int(entry["n_frames"]))
            out.append({"id": record_id, "source": source, "action": entry["action_label"],
                        "texts": parsed.texts, "repairs": parsed.repairs, "missing": parsed.missing})
    return out


def adjacent_pairs(sequences: list[dict]) -> list[dict]:
    return [{"id": s["id"], "source": s["source"], "action": s["action"], "frames": [i, i + 1],
             "desc1": s["texts"][i], "desc2": s["texts"][i + 1]}
            for s in sequences for i in range(len(s["texts"]) - 1)
            if s["texts"][i] is not None and s["texts"][i + 1] is not None]


def load_answers(path: Path | None) -> dict[tuple[str, str], dict[tuple[str, int], str]]:
    """{(llm, prompt): {(pair id, first frame): letter}} from an --answers file; empty when there is none.
    A letter decided with --debias other than none is under (llm, "PROMPT --debias DEBIAS")."""
    known: dict[tuple[str, str], dict[tuple[str, int], str]] = {}
    if path is None or not path.exists():
        return known
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            known.setdefault((row["llm"], prompt_key(row["prompt"], row.get("debias", "none"))), {})[
                row["id"], row["frames"][0]] = redecided(row) if "verdict" in row else row["answer"]
        except (ValueError, KeyError, TypeError, IndexError):
            continue  # a line cut by a kill: that pair is judged again
    return known


def kept_channel(path: Path | None) -> dict[tuple[str, str], dict[tuple[str, int], dict]]:
    """{(llm, prompt): {(pair id, first frame): verdict}} of the --debias channel rows of an --answers file: the
    channel's scores, which --debias channel+probe reads again with the change probe instead of asking anew."""
    kept: dict[tuple[str, str], dict[tuple[str, int], dict]] = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path is not None and path.exists() else []:
        try:
            row = json.loads(line)
            if row.get("debias") == "channel" and "channel" in row["verdict"]:
                kept.setdefault((row["llm"], row["prompt"]), {})[row["id"], row["frames"][0]] = row["verdict"]
        except (ValueError, KeyError, TypeError, IndexError):
            continue
    return kept


def kept_pairs(pairs: list[dict], known: dict, judges: list[tuple[str, str]]) -> list[dict]:
    """The pairs every (llm, prompt key) in `judges` has a kept letter for, in their order."""
    return [p for p in pairs if all((p["id"], p["frames"][0]) in known.get(judge, {}) for judge in judges)]


def redecided(row: dict) -> str:
    """A debiased row's letter, decided again from its verdict's evidence by today's `decide` (so a kept
    file follows a changed --same-state default without judging again)."""
    from vi.pipelines.progresscaptioner.judge_progression import SAME_STATE, decide

    verdict = row["verdict"]
    evidence = {**verdict, "method": verdict["method"].removesuffix("+embedder")}
    return decide(evidence, row["prompt"], SAME_STATE if "similarity" in verdict else None)["letter"]


def prompt_key(prompt: str, debias: str) -> str:
    """How a prompt's letters are named in the tables: "eval", or "eval --debias calibrated"."""
    return prompt if debias == "none" else f"{prompt} --debias {debias}"


def judge_all(pairs: list[dict], llms: list[str], prompts: list[str], threads: int | None, seed: int,
              answers: Path | None = None, debias: str = "none"
              ) -> tuple[dict[tuple[str, str], list[str]], dict[tuple[str, str], float]]:
    """Letters per (llm, prompt), in pair order, and the seconds per newly judged pair. With `answers`,
    letters already there are reused and each new one is appended as soon as it is given. With `debias`
    other than none the letter is the stage's decision (`PairJudge.verdict`, the default embedder and
    threshold), kept with its verdict and named `prompt_key(prompt, debias)`."""
    from vi.core.models.chat import LLMSettings, load_llm
    from vi.core.seeding import record_seed
    from vi.pipelines.progresscaptioner.judge_progression import (DEFAULT_TEXT_EMBEDDING, SAME_STATE, PairJudge,
                                                                  cached_pair_judge, judge_pair, load_embedder)

    known = load_answers(answers)
    channels = kept_channel(answers) if debias == "channel+probe" else {}
    readers: dict[str, PairJudge] = {}  # per prompt: channel+probe read from kept channel scores, no LLM
    sink = answers.open("a", encoding="utf-8") if answers else None
    letters, seconds, judges = {}, {}, {}
    try:
        for ref in llms:
            llm = None
            for prompt in prompts:
                name = prompt_key(prompt, debias)
                done = known.get((ref, name), {})
                start, got, new = time.perf_counter(), [], 0
                for pair in pairs:
                    key = (pair["id"], pair["frames"][0])
                    if key in done:
                        got.append(done[key])
                        continue
                    row = {"id": pair["id"], "frames": pair["frames"], "llm": ref, "prompt": prompt}
                    channel = channels.get((ref, prompt), {}).get(key)
                    if channel is not None:  # the channel's scores are kept: only the probe is read
                        if prompt not in readers:
                            readers[prompt] = PairJudge(None, prompt=prompt, debias=debias,
                                                        embedder=load_embedder(DEFAULT_TEXT_EMBEDDING, "cpu"))
                        reader = readers[prompt]
                        evidence = {field: channel[field] for field in ("method", "letters", "log_probs", "channel")}
                        verdict = reader.verdict_from(reader.with_probe(evidence, pair["desc1"], pair["desc2"]))
                        keep({**row, "debias": debias, "verdict": verdict}, verdict["letter"], got, sink)
                        continue
                    # loaded only when something is left to judge, so a finished run reports at once
                    llm = llm or load_llm(LLMSettings(ref, n_ctx=2048, device="auto", seed=seed, threads=threads))
                    pair_seed = record_seed(seed, pair["id"]) % 2**32
                    if debias == "none":
                        letter = judge_pair(llm, pair["desc1"], pair["desc2"], prompt=prompt, action=pair["action"],
                                            seed=pair_seed)
                    else:
                        judge = cached_pair_judge(judges.setdefault(prompt, {}), llm, debias, prompt=prompt,
                                                  templates=None, same_state=SAME_STATE,
                                                  embedder=lambda: load_embedder(DEFAULT_TEXT_EMBEDDING, "cpu"))
                        asked_once = known.get((ref, prompt), {}).get(key)
                        # the paper's order was asked as the stage asks it (same prompt, seed and context): only
                        # the swapped order is asked, or the second caption scored, now
                        rest = {"orders": judge.orders_evidence,
                                "channel": judge.channel_evidence if judge.scores_captions else None}.get(debias)
                        if rest and asked_once:
                            verdict = judge.verdict_from(rest(pair["desc1"], pair["desc2"], action=pair["action"],
                                                              seed=pair_seed, paper=asked_once))
                        else:
                            verdict = judge.verdict(pair["desc1"], pair["desc2"], action=pair["action"],
                                                    seed=pair_seed)
                        letter = verdict["letter"]
                        row.update(debias=debias, verdict=verdict)
                    keep(row, letter, got, sink)
                    new += 1
                    if new % 10 == 0:
                        print(f"  {ref} {name}: {len(got)}/{len(pairs)} pairs, "
                              f"{(time.perf_counter() - start) / new:.2f} s/pair", file=sys.stderr)
                letters[ref, name] = got
                seconds[ref, name] = (time.perf_counter() - start) / new if new else None
    finally:
        if sink:
            sink.close()
    return letters, seconds


def keep(row: dict, letter: str, got: list[str], sink) -> None:
    """A pair's letter, in pair order and (with --answers) appended to the file at once, so a kill loses none."""
    got.append(letter)
    if sink:
        sink.write(json.dumps({**row, "answer": letter}) + "\n")
        sink.flush()


def agreement(a: list[str], b: list[str]) -> dict:
    from sklearn.metrics import cohen_kappa_score

    raw = sum(x == y for x, y in zip(a, b)) / len(a) if a else None
    # kappa is undefined (nan) when both judges give one same letter throughout: report null then
    kappa = float(cohen_kappa_score(a, b, labels=["A", "B", "C"])) if a else None
    return {"raw": round(raw, 4) if raw is not None else None,
            "kappa": round(kappa, 4) if kappa is not None and kappa == kappa else None}


def letter_counts(letters: Iterable[str]) -> dict[str, int]:
    counts = Counter(letters)
    return {x: counts[x] for x in "ABC"}


def report(sequences: list[dict], pairs: list[dict], letters: dict, seconds: dict, llms: list[str],
           prompts: list[str]) -> dict:
    parse = {"sequences": len(sequences), "clean": sum(not s["repairs"] and not s["missing"] for s in sequences),
             "with_repairs": sum(bool(s["repairs"]) for s in sequences),
             "frames_missing": sum(len(s["missing"]) for s in sequences),
             "frames": sum(len(s["texts"]) for s in sequences)}
    sources = sorted({q["source"] for q in pairs})
    distribution = {f"{ref} {prompt}": {"counts": letter_counts(got),
                                        "by_source": {source: letter_counts(a for a, q in zip(got, pairs)
                                                                            if q["source"] == source)
                                                      for source in sources},
                                        "seconds_per_pair": (round(seconds[ref, prompt], 3)
                                                             if seconds[ref, prompt] is not None else None)}
                    for (ref, prompt), got in letters.items()}
    agree = {prompt: {f"{a} vs {b}": agreement(letters[a, prompt], letters[b, prompt])
                      for a, b in combinations(llms, 2)} for prompt in prompts}
    by_source = Counter(p["source"] for p in pairs)
    return {"parse": parse, "pairs": len(pairs), "pairs_by_source": dict(by_source),
            "distribution": distribution, "agreement": agree,
            "prompts_agree": {ref: prompts_agree(letters[ref, "pseudo"], letters[ref, "eval"])
                              for ref in llms if (ref, "pseudo") in letters and (ref, "eval") in letters}}


def prompts_agree(pseudo: list[str], evaluation: list[str]) -> dict:
    """How often one judge's two prompts say the same thing of a pair, read as change / no change
    (pseudo B and eval A are "change"; a C under either prompt says neither)."""
    from vi.pipelines.progresscaptioner.judge_progression import letter_to_change

    read = [(letter_to_change(a, "pseudo"), letter_to_change(b, "eval")) for a, b in zip(pseudo, evaluation)]
    both = [(a, b) for a, b in read if a is not None and b is not None]
    return {"pairs": len(read), "both_decided": len(both), "same": sum(a == b for a, b in both)}


def print_tables(result: dict) -> None:
    p = result["parse"]
    print(f"parsed {p['sequences']} replies: {p['clean']} clean, {p['with_repairs']} repaired, "
          f"{p['frames_missing']} of {p['frames']} frames missing; {result['pairs']} adjacent pairs "
          f"{result['pairs_by_source']}", file=sys.stderr)
    print(f"{'judge, prompt':<48} {'A':>5} {'B':>5} {'C':>5} {'s/pair':>7}  per source A/B/C", file=sys.stderr)
    for name, row in result["distribution"].items():
        c = row["counts"]
        pace = "-" if row["seconds_per_pair"] is None else f"{row['seconds_per_pair']:.2f}"
        sources = "  ".join(f"{s} {n['A']}/{n['B']}/{n['C']}" for s, n in row["by_source"].items())
        print(f"{name:<48} {c['A']:>5} {c['B']:>5} {c['C']:>5} {pace:>7}  {sources}", file=sys.stderr)
    for prompt, rows in result["agreement"].items():
        for name, row in rows.items():
            print(f"{prompt}: {name}: raw agreement {row['raw']}, Cohen's kappa {row['kappa']}", file=sys.stderr)
    for ref, row in result["prompts_agree"].items():
        print(f"{ref}: pseudo vs eval, read as change / no change: the same on {row['same']} of the "
              f"{row['both_decided']} pairs that both prompts decided (of {row['pairs']})", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", action="append", help=f"a judge (repeat); default {SMALL_LLM} and {DEFAULT_LLM}")
    parser.add_argument("--prompt", action="append", choices=("pseudo", "eval"), help="default both")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=None, help="judge a seeded sample of N sequences")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp CPU threads")
    parser.add_argument("--answers", type=Path, help="keep every letter here (JSONL, appended as given); "
                        "a rerun with the same file judges only the pairs it lacks")
    parser.add_argument("--debias", default="none", help="vi judge progression's --debias, comma-separated "
                        "(none: the paper's single ask; none,calibrated: both, the second as the stage decides)")
    parser.add_argument("--kept-only", action="store_true", help="judge nothing: report the pairs that every "
                        "judge, prompt and --debias asked for already has a letter for in --answers (a long run "
                        "stopped part way, read as the sample it covered)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    args = parser.parse_args(argv)
    if args.kept_only and args.answers is None:
        parser.error("--kept-only reads the letters kept in --answers FILE: name the file")
    if not args.data.is_dir():
        print(f"{args.data} is absent: the release's FrameCapEval outputs live in ../shared", file=sys.stderr)
        return 2
    llms, prompts = args.llm or [SMALL_LLM, DEFAULT_LLM], args.prompt or ["pseudo", "eval"]
    sequences = load_sequences(args.data)
    chosen = sequences if args.limit is None else random.Random(args.seed).sample(sequences, args.limit)
    pairs = adjacent_pairs(chosen)
    debiases = args.debias.split(",")
    if args.kept_only:
        judges = [(ref, prompt_key(prompt, debias)) for ref in llms for prompt in prompts for debias in debiases]
        pairs = kept_pairs(pairs, load_answers(args.answers), judges)
    letters, seconds, names = {}, {}, []
    for debias in debiases:
        got, pace = judge_all(pairs, llms, prompts, args.threads, args.seed, args.answers, debias)
        letters.update(got)
        seconds.update(pace)
        names += [prompt_key(prompt, debias) for prompt in prompts]
    result = report(sequences if args.limit is None else chosen, pairs, letters, seconds, llms, names)
    result["debias"] = args.debias
    result["limit"] = args.limit
    print_tables(result)
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
