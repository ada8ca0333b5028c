"""Print the steps and chosen frames of a `vi align-frames` output file (`make demo`).

    python -m vi.evaluation.demo.show_steps STEPS.jsonl [EXPORT_DIR]

For each record: its id and whether the filter kept it, then a table of its steps (time
span, text, the chosen frame's time and score), or why there are none; with EXPORT_DIR
(from `vi export showhowto`), the path of the record's image strip.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vi.core.records import Record, read_records
from vi.evaluation.demo.show_transcript import format_time
from vi.pipelines.showhowto.export import safe_key

STAGE = "show-steps"


def step_table(items: list[dict]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for name, justify in (("#", "right"), ("from", "right"), ("to", "right"), ("step", "left"),
                          ("frame at", "right"), ("score", "right")):
        table.add_column(name, justify=justify, no_wrap=name != "step",
                         style="cyan" if name in ("from", "to", "frame at") else None)
    for i, item in enumerate(items, 1):
        frame = item.get("frame") or {}
        score = frame.get("score")
        table.add_row(str(i), format_time(item.get("start")), format_time(item.get("end")),
                      escape(str(item.get("text", ""))),
                      format_time(frame.get("time")) if frame else "[yellow]none[/yellow]",
                      f"{score:.3f}" if isinstance(score, (int, float)) else "-")
    return table


def strip_of(record: Record, export_dir: Path | None) -> Path | None:
    if export_dir is None:
        return None
    found = sorted(export_dir.glob(f"imgseqs*/{safe_key(str(record['id']))}.jpg"))
    return found[0] if found else None


def show(path: Path, export_dir: Path | None, console: Console) -> int:
    count = 0
    for record in read_records(path, STAGE):
        count += 1
        label = (record.get("instructional") or {}).get("label")
        kept = {True: " (instructional)", False: " (not instructional)"}.get(label, "")
        title = (record.get("steps") or {}).get("title", "")
        console.print(f"[bold]{escape(str(record.get('id')))}[/bold]{kept}  {escape(str(title))}")
        if record.get("errors"):
            for e in record["errors"]:
                console.print(f"  [red]failed in {escape(str(e.get('stage')))} "
                              f"({escape(str(e.get('kind')))}): {escape(str(e.get('message')))}[/red]")
        elif not (record.get("steps") or {}).get("items"):
            console.print("  [yellow]no steps[/yellow]")
        else:
            console.print(step_table(record["steps"]["items"]))
            strip = strip_of(record, export_dir)
            if strip is not None:
                console.print(f"  image strip: {escape(str(strip.resolve()))}", soft_wrap=True)
        console.print()
    if count == 0:
        console.print("[yellow]no records in the file[/yellow]")
    console.print(f"records: {escape(str(path.resolve()))}", soft_wrap=True)
    if export_dir is not None:
        console.print(f"training layout: {escape(str((export_dir / 'prompts.json').resolve()))}",
                      soft_wrap=True)
    return count


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.demo.show_steps",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="JSONL written by vi align-frames")
    parser.add_argument("export_dir", type=Path, nargs="?", help="folder of vi export showhowto")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        Console(stderr=True).print(f"[red]{escape(str(args.file))}: no such file[/red]; "
                                   "run `make demo` first")
        sys.exit(2)
    show(args.file, args.export_dir, Console())


if __name__ == "__main__":
    main()
