"""`vi captioner-data`: judged captions out as ProgressCaptioner's SFT/DPO dataset (files, not JSONL)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from vi.cli.stage import CONTRACT_PANEL, command, os_message, stage_help
from vi.core.errors import EXIT_OK, EXIT_RECORDS_FAILED, EXIT_USAGE
from vi.core.progress import make_progress, setup_logging, stderr
from vi.core.records import count_file, read_records
from vi.core.sink import claim_stdout
from vi.pipelines.progresscaptioner import captioner_data as cd

DETAILS, EPILOG = stage_help(
    reads="records through vi caption-frames (one or more [cyan]captions[/cyan] / [cyan]captions_NAME[/cyan] "
          "fields), vi judge progression ([cyan]progression[/cyan]) and vi judge match ([cyan]matching[/cyan]); "
          "[cyan]frames[/cyan], [cyan]action[/cyan], [cyan]source[/cyan] and [cyan]video[/cyan] or "
          "[cyan]parent[/cyan]. 2 frames: a pair (Stage I), accepted when it passes progression detection and "
          "every matched frame gets its own caption, else rejected. 3-6 frames: a sequence (Stage II), accepted "
          "when caption matching's verdict is good, rejected when it is rejected. Other frame counts and records "
          "with [cyan]errors[/cyan] are skipped and counted.",
    writes="OUT/sft.jsonl and OUT/dpo.jsonl in TRL's conversational vision format ({id, video, source, kind, "
           "split, images, prompt, completion | chosen + rejected}), OUT/images/SHA1.jpg (each frame once); "
           "a table of counts per source on stderr and a one-line JSON summary on stdout.",
    example="vi judge progression -i captioned.jsonl | vi judge match | vi captioner-data -o data/pc",
)


def counts_table(summary: cd.Summary) -> Table:
    """Table 3 of the paper, by source, with the split beside it."""
    table = Table(title="vi captioner-data: samples per source", title_justify="left")
    table.add_column("source")
    for column in cd.COLUMNS:
        table.add_column(column, justify="right")
    total = {c: 0 for c in cd.COLUMNS}
    for source, counts in sorted(summary.by_source.items()):
        table.add_row(escape(source), *(str(counts[c]) for c in cd.COLUMNS))
        total = {c: total[c] + counts[c] for c in cd.COLUMNS}
    table.add_row("[bold]total[/bold]", *(f"[bold]{total[c]}[/bold]" for c in cd.COLUMNS))
    return table


@command(details=DETAILS, epilog=EPILOG, config=cd.CaptionerDataConfig)
def captioner_data_command(
    config: cd.CaptionerDataConfig,
    out: Annotated[Path, typer.Option("--out", "-o", help="The dataset folder; created if needed. sft.jsonl and "
                                      "dpo.jsonl are rewritten, images/ is reused.", rich_help_panel=cd.DATASET_PANEL,
                                      show_default=False)],
    input: Annotated[Optional[Path], typer.Option(
        "--input", "-i", help="Read JSONL from FILE instead of stdin.", rich_help_panel=CONTRACT_PANEL)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.",
                                        rich_help_panel=CONTRACT_PANEL)] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logs on stderr.",
                                          rich_help_panel=CONTRACT_PANEL)] = False,
) -> None:
    stdout = claim_stdout()  # stdout carries the JSON summary only
    setup_logging(verbose)
    name = f"vi {cd.STAGE}"
    try:
        if input is None or str(input) == "-":
            if sys.stdin.isatty():
                raise ValueError("no records: pass --input FILE or pipe judged JSONL records on stdin")
        elif not input.is_file():
            raise ValueError(f"--input {input}: no such file")
        start = time.perf_counter()
        with make_progress(quiet) as progress:
            task = progress.add_task(cd.STAGE, total=None if quiet else count_file(input, None))
            summary = cd.build_dataset(read_records(input, cd.STAGE), out, config,
                                       on_record=lambda: progress.advance(task))
    except (ValueError, OSError) as exc:  # bad options, an --out or --input we cannot use
        stderr.print(f"[red]{name}:[/red] {escape(os_message(exc))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    for line in summary.failures:
        stderr.print(f"[red]failed[/red] {escape(line)}", highlight=False)
    if summary.failed > len(summary.failures):
        stderr.print(f"... and {summary.failed - len(summary.failures)} more failed", highlight=False)
    stderr.print(counts_table(summary))
    skipped = ", ".join(f"{n} {why}" for why, n in summary.skipped.items()) or "none"
    stderr.print(f"{name}: {summary.sft} SFT and {summary.dpo} DPO samples from {summary.used} of "
                 f"{summary.records} records in {time.perf_counter() - start:.1f}s; {summary.failed} failed; "
                 f"skipped: {skipped}", highlight=False)
    stdout.write((json.dumps(summary.as_json(out)) + "\n").encode("utf-8"))
    stdout.flush()
    raise typer.Exit(EXIT_RECORDS_FAILED if summary.failed else EXIT_OK)
