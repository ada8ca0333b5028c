"""`vi filter-instructional` on held-out transcripts written for measuring only (heldout/
filter_transcripts.jsonl: how-tos with asides and "I'm going to", vlogs that say what they will do,
reviews, an unboxing, a lecture, a podcast, news), kept apart from the prompt's worked examples and
never tuned on: accuracy per kind, and whether each label agrees with the model's own explanation.

    python -m vi.evaluation.showhowto.filter_quality [--llm qwen2.5-coder-1.5b]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

HELDOUT = Path(__file__).parent / "heldout" / "filter_transcripts.jsonl"
# a reason that calls the video one of these (and does not negate it) argues for "No"
NOT_HOWTO = re.compile(r"\b(vlog|review|unboxing|talk|lecture|interview|podcast|news|opinion|diary|day in)", re.I)


def reason_says_no(reason: str) -> bool:
    lowered = reason.lower()
    return bool(NOT_HOWTO.search(lowered)) or "not instructional" in lowered or "not a demonstration" in lowered


def run(llm: str) -> dict:
    from vi.core.models.catalog import DEFAULT_LLM
    from vi.pipelines.showhowto import filter_instructional as fi

    config = fi.FilterConfig(llm=llm or DEFAULT_LLM)
    rows = []
    for line in HELDOUT.read_text().splitlines():
        item = json.loads(line)
        record = {"id": item["id"], "title": item["title"],
                  "transcript": {"segments": [{"start": 0.0, "end": 60.0, "text": item["text"]}]}}
        got = fi.classify(record, config)["instructional"]
        agrees = got["label"] != reason_says_no(got["reason"]) if got["label"] else True
        rows.append({"id": item["id"], "kind": item["kind"], "truth": item["truth"], "label": got["label"],
                     "reason": got["reason"], "agrees_with_reason": agrees})
    kinds = sorted({r["kind"] for r in rows})
    return {"llm": config.llm, "transcripts": len(rows),
            "accuracy": round(sum(r["label"] == r["truth"] for r in rows) / len(rows), 3),
            "per_kind": {k: f"{sum(r['label'] == r['truth'] for r in rows if r['kind'] == k)}/"
                            f"{sum(r['kind'] == k for r in rows)}" for k in kinds},
            "label_against_its_reason": sum(not r["agrees_with_reason"] for r in rows), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", default="")
    args = parser.parse_args()
    print(json.dumps(run(args.llm), indent=1))


if __name__ == "__main__":
    main()
