"""`vi extract-steps --drop-remarks` on written step lists whose lines are known actions or remarks.

    python -m vi.evaluation.showhowto.remark_quality --data evaluation/showhowto/heldout/remark_texts_33.jsonl
                                                     [--llm qwen2.5-coder-1.5b] [--no-read-requests]
                                                     [--requests-name-the-page] [--save F]

Each line of the data is one video: {"id", "title", "texts": [{"text", "kind": "action" | "remark", "form"}]},
one line of a written step list each. Every video's texts are read as the stage reads the steps it wrote
(step_remarks.step_readings, the video's title in the requests), and a text is dropped as the stage would drop it
(more than REMARK_MARGIN nats likelier as a remark, or with --read-requests as a request to the viewers, than as
an action; the stage's default; with --requests-name-the-page only a text naming the page is read as a request).
Printed: how many of each kind and form are dropped; an action dropped is a true step lost, a remark kept is a
stray step written.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from vi.core.models.catalog import DEFAULT_LLM
from vi.evaluation.showhowto.extract_quality import add_stage_options

CLOSING = ("cta", "invitation", "signoff")  # the remark forms a video's closing words take
STAGE_FLAGS = ("read_requests", "requests_name_the_page")  # the stage's options that change how texts are read


def read_texts(path: Path) -> list[dict]:
    videos = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for video in videos:
        bad = [t for t in video["texts"] if t.get("kind") not in ("action", "remark")]
        if bad:
            raise SystemExit(f"{path}: video {video['id']}: text {bad[0].get('text')!r} has kind "
                             f"{bad[0].get('kind')!r}; each text's kind must be action or remark")
    return videos


def read_videos(llm, videos: list[dict], requests: bool, page_words: bool = False) -> list[dict]:
    """Each text with its reading (score in nats, the request it was read against) and whether it is dropped."""
    from vi.pipelines.showhowto.step_remarks import REMARK_MARGIN, step_readings

    rows = []
    for video in videos:
        texts = [t["text"] for t in video["texts"]]
        readings = step_readings(llm, video["title"], texts, requests, page_words)
        if readings is None:
            raise SystemExit("this LLM's backend scores no text (a server): --drop-remarks keeps every step there")
        rows += [{"video": video["id"], **t, "score": r.score, "against": r.against,
                  "unnamed_request": r.unnamed_request, "dropped": r.score < -REMARK_MARGIN}
                 for t, r in zip(video["texts"], readings, strict=True)]
    return rows


def report(rows: list[dict]) -> str:
    dropped, total = Counter(), Counter()
    for row in rows:
        for key in (row["kind"], f"{row['kind']}: {row['form']}",
                    *(["remark: closing (" + ", ".join(CLOSING) + ")"] if row["form"] in CLOSING else [])):
            total[key] += 1
            dropped[key] += row["dropped"]
    return "\n".join(["| texts | dropped |", "|---|---|"] + [f"| {key} | {dropped[key]}/{total[key]} |"
                                                             for key in sorted(total)])


def main(argv: Sequence[str] | None = None) -> None:
    from vi.pipelines.showhowto.extract_steps import ExtractConfig

    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.showhowto.remark_quality",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a texts file (heldout/remark_texts_N.jsonl)")
    parser.add_argument("--llm", default=DEFAULT_LLM, help=f"an embedded LLM alias or .gguf (default: {DEFAULT_LLM})")
    add_stage_options(parser, STAGE_FLAGS)  # the stage's own flags, help and defaults
    parser.add_argument("--save", type=Path, help="write every text's reading to this JSONL file")
    args = parser.parse_args(argv)
    videos = read_texts(args.data)
    named = {name: getattr(args, name) for name in STAGE_FLAGS if getattr(args, name) is not None}  # else default
    config = ExtractConfig(llm=args.llm, **named)
    rows = read_videos(config.load_llm(), videos, config.read_requests, config.requests_name_the_page)
    if args.save:
        args.save.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    flags = " ".join(f"--{'' if getattr(config, name) else 'no-'}{name.replace('_', '-')}" for name in STAGE_FLAGS)
    print(f"{args.llm}, {args.data.name}, --drop-remarks {flags}")
    print(report(rows))


if __name__ == "__main__":
    main()
