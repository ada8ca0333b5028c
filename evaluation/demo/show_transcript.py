"""Print the transcripts of a `vi transcribe` output file as readable tables (`make demo`).

    python -m vi.evaluation.demo.show_transcript FILE.jsonl

For each record: a heading (id and media path), then a table of its segments (start, end,
text), or one line saying why there is none (the record's errors, or the transcript's note).
The path of the file comes last, so a user knows where the full records (word times) are.
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

STAGE = "show-transcript"  # names this reader in the error record of an unreadable line


def format_time(seconds: float | None) -> str:
    """m:ss.ss, the way a video player shows a position."""
    if seconds is None:
        return "-"
    minutes, rest = divmod(max(0.0, float(seconds)), 60.0)
    return f"{int(minutes)}:{rest:05.2f}"


def heading(record: Record) -> str:
    media = record.get("video") or record.get("audio") or ""
    transcript = record.get("transcript") or {}
    details = [transcript[k] for k in ("language", "model") if transcript.get(k)]
    tail = f" ({', '.join(map(str, details))})" if details else ""
    return f"[bold]{escape(str(record.get('id', '?')))}[/bold]  {escape(str(media))}{escape(tail)}"


def problem(record: Record) -> str | None:
    """Why a record has no segments to show, or None when it has some."""
    errors = record.get("errors") or []
    if errors:
        return "; ".join(f"failed in {e.get('stage', '?')} ({e.get('kind', '?')}): "
                         f"{e.get('message', '')}" for e in errors)
    transcript = record.get("transcript")
    if not isinstance(transcript, dict):
        return "no transcript: run vi transcribe on this record"
    if not transcript.get("segments"):
        return f"empty transcript: {transcript.get('note') or 'no segments'}"
    return None


def segment_table(segments: list[dict]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("start", justify="right", style="cyan", no_wrap=True)
    table.add_column("end", justify="right", style="cyan", no_wrap=True)
    table.add_column("text")
    for segment in segments:
        table.add_row(format_time(segment.get("start")), format_time(segment.get("end")),
                      escape(str(segment.get("text", "")).strip()))
    return table


def show(path: Path, console: Console) -> int:
    """Print every record of `path`; return how many records there were."""
    count = 0
    for record in read_records(path, STAGE):
        count += 1
        console.print(heading(record))
        why = problem(record)
        if why is None:
            console.print(segment_table(record["transcript"]["segments"]))
        else:
            style = "red" if record.get("errors") else "yellow"
            console.print(f"  [{style}]{escape(why)}[/{style}]")
        console.print()
    if count == 0:
        console.print("[yellow]no records in the file[/yellow]")
    console.print(f"transcripts (with word times): {escape(str(path.resolve()))}", soft_wrap=True)
    return count


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.demo.show_transcript",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="JSONL written by vi transcribe")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        Console(stderr=True).print(f"[red]{escape(str(args.file))}: no such file[/red]; "
                                   "run `make demo` (or vi transcribe -o FILE) first")
        sys.exit(2)
    show(args.file, Console())


if __name__ == "__main__":
    main()
