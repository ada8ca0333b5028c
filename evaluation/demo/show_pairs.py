"""Print the pairs and comparison QA of a `vi pair-qa` output file (`make stepdiff-demo`).

    python -m vi.evaluation.demo.show_pairs PAIR_QA.jsonl

For each pair: its keystep, its two clips (Video 1 is the reference, Video 2 the candidate:
the video, the time span, what is said and the description vi describe wrote), then the QA
the filter kept and how many it dropped, by reason. A record that failed shows its errors.
Last, the totals over the file.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from vi.core.records import Record, read_records
from vi.evaluation.demo.show_transcript import format_time

STAGE = "show-pairs"
QA_TYPE_NAMES = {1: "difference", 2: "which video", 3: "same action"}


def clip_lines(name: str, clip: dict) -> list[str]:
    """Two lines for one clip of a pair: where it is and what is said, then its description."""
    description = clip.get("description")
    step = description.get("step") if isinstance(description, dict) else description
    source = clip.get("source_id") or Path(str(clip.get("video", "?"))).stem
    said = f'  says "{escape(clip["narration"])}"' if clip.get("narration") else ""
    span = f"{format_time(clip.get('start'))}-{format_time(clip.get('end'))}"
    described = escape(str(step)) if step else "[yellow](no description)[/yellow]"
    return [f"  [bold]{name}[/bold]  {escape(str(source))} [cyan]{span}[/cyan]{said}",
            f"           described: {described}"]


def qa_table(items: list[dict]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("type", no_wrap=True, style="cyan")
    table.add_column("question")
    table.add_column("answer")
    for qa in items:
        kind = f"{qa.get('type')} {QA_TYPE_NAMES.get(qa.get('type'), '')}".strip()
        table.add_row(kind, escape(str(qa.get("q", ""))), escape(str(qa.get("a", ""))))
    return table


def dropped_line(stats: dict) -> str:
    """'kept 5 of 8; dropped: unsupported 2, duplicate_question 1'."""
    generated = sum(stats.get("generated", {}).values())
    kept = sum(stats.get("kept", {}).values())
    dropped = ", ".join(f"{reason} {n}" for reason, n in stats.get("dropped", {}).items())
    return f"  kept {kept} of {generated} QA" + (f"; dropped: {dropped}" if dropped else "")


def show_pair(record: Record, console: Console) -> None:
    console.print(f"[bold]{escape(str(record.get('keystep')))}[/bold]  ({escape(str(record.get('id')))})",
                  soft_wrap=True)
    for name, role in (("Video 1", "reference"), ("Video 2", "candidate")):
        if isinstance(record.get(role), dict):
            for line in clip_lines(name, record[role]):
                console.print(line, soft_wrap=True)
    for error in record.get("errors") or []:
        console.print(f"  [red]failed in {escape(str(error.get('stage')))} ({escape(str(error.get('kind')))}): "
                      f"{escape(str(error.get('message')))}[/red]", soft_wrap=True)
    if "qa" in record:
        if record["qa"]:
            console.print(qa_table(record["qa"]))
        else:
            console.print("  [yellow]the filter kept no QA[/yellow]")
        console.print(dropped_line(record.get("qa_stats") or {}))
    console.print()


def show(path: Path, console: Console) -> int:
    """Print every record of `path`, then the totals; returns the number of records."""
    count, failed, kept, generated, dropped = 0, 0, 0, 0, Counter()
    for record in read_records(path, STAGE):
        count += 1
        failed += bool(record.get("errors"))
        show_pair(record, console)
        stats = record.get("qa_stats") or {}
        kept += sum(stats.get("kept", {}).values())
        generated += sum(stats.get("generated", {}).values())
        dropped.update(stats.get("dropped", {}))
    if count == 0:
        console.print("[yellow]no records in the file[/yellow]")
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(dropped.items()))
    console.print(f"{count - failed} pairs, {failed} failed records; QA kept {kept} of {generated}"
                  + (f" (dropped: {reasons})" if reasons else ""))
    console.print(f"records: {escape(str(path.resolve()))}", soft_wrap=True)
    return count


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.demo.show_pairs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="JSONL written by vi pair-qa")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        Console(stderr=True).print(f"[red]{escape(str(args.file))}: no such file[/red]; "
                                   "run `make stepdiff-demo` first")
        sys.exit(2)
    show(args.file, Console())


if __name__ == "__main__":
    main()
