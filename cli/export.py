"""`vi export`: records out as training datasets. Terminal stages: they write files, not JSONL."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from vi.cli.stage import CONTRACT_PANEL, command, stage_help
from vi.core.errors import EXIT_OK, EXIT_SETUP, EXIT_USAGE, SetupError
from vi.core.progress import make_progress, setup_logging, stderr
from vi.core.records import count_file, read_records
from vi.core.sharding import Shard
from vi.core.sink import claim_stdout
from vi.pipelines.showhowto import export as showhowto


DETAILS, EPILOG = stage_help(
    reads="[cyan]id[/cyan], [cyan]steps[/cyan] = {title, items: [{text, frame: {time, path?} or null}]}, "
          "and [cyan]video[/cyan] for frames without a saved [cyan]path[/cyan]. Records with "
          "[cyan]errors[/cyan] are skipped; so are those with fewer than --min-steps framed steps.",
    writes="nothing on stdout. [cyan]--format showhowto[/cyan]: OUT/imgseqs[-I-of-N]/ID.jpg (the frames "
           "side by side, each --height tall and at least as wide) with a sidecar ID.json = {id, prompts, "
           "times, video, title}, and OUT/prompts.json = {ID: prompts}, rebuilt from every shard's "
           "sidecars at the end of each run. [cyan]--format webdataset[/cyan]: "
           "OUT/showhowto[-I-of-N]-K.tar with KEY.jpg and KEY.json per sequence. Always "
           "OUT/skipped[-I-of-N].jsonl = {id, reason, detail} per record not exported.",
    example="vi export showhowto -i aligned.jsonl --out data/showhowto --shard 0/8 --resume",
)


def _check_input(input: Path | None) -> None:
    if input is None or str(input) == "-":
        if sys.stdin.isatty():
            raise ValueError("no records: pass --input FILE or pipe JSONL records on stdin")
    elif not input.is_file():
        raise ValueError(f"--input {input}: no such file")


def _export(config: showhowto.ExportConfig, shard: Shard | None, input: Path | None, quiet: bool, *,
            resume: bool, overwrite: bool) -> showhowto.ExportReport:
    out = config.out
    writer, skipped = showhowto.open_export(out, config.layout, shard, maxcount=config.maxcount, resume=resume,
                                            overwrite=overwrite)
    start = time.perf_counter()
    progress = make_progress(quiet)
    with progress:
        task = progress.add_task(f"export {config.layout}",
                                 total=None if quiet else count_file(input, shard))
        report = showhowto.export_records(
            read_records(input, showhowto.STAGE), writer, skipped, height=config.height, quality=config.quality,
            min_steps=config.min_steps, shard=shard, on_record=lambda: progress.advance(task))
    if config.layout == "showhowto":
        count = showhowto.rebuild_prompts_index(out)
        stderr.print(f"{out / 'prompts.json'}: {count} sequences from every shard so far", highlight=False)
    report.seconds = time.perf_counter() - start
    for line in report.failures:
        stderr.print(f"[red]failed[/red] {escape(line)}", highlight=False)
    if report.malformed + report.failed > len(report.failures):
        stderr.print(f"... and {report.malformed + report.failed - len(report.failures)} more "
                     f"(see {skipped.path})", highlight=False)
    stderr.print(report.summary(), highlight=False)
    return report


@command(details=DETAILS, epilog=EPILOG, config=showhowto.ExportConfig)
def showhowto_command(
    config: showhowto.ExportConfig,
    index_only: Annotated[bool, typer.Option(
        "--index-only", help="Only rebuild OUT/prompts.json from the sidecars of every shard (a merge step "
                             "after an array job; each run already does it when it ends).",
        rich_help_panel=showhowto.DATASET_PANEL)] = False,
    # The record-stream options, as export means them (it writes files, not records): the command's.
    input: Annotated[Optional[Path], typer.Option(
        "--input", "-i", help="Read JSONL from FILE instead of stdin.", rich_help_panel=CONTRACT_PANEL)] = None,
    shard: Annotated[Optional[str], typer.Option(
        "--shard", metavar="I/N", help="Keep only shard I of N (stable hash of id); its files get an "
        "-I-of-N suffix. Defaults to the Slurm array task when SLURM_ARRAY_TASK_ID/COUNT are set.",
        rich_help_panel=CONTRACT_PANEL)] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Skip ids already exported or listed as skipped, delete what a kill left "
                         "half-written, and continue.", rich_help_panel=CONTRACT_PANEL)] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Delete what an earlier export of this format and shard wrote, then export.",
        rich_help_panel=CONTRACT_PANEL)] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.",
                                        rich_help_panel=CONTRACT_PANEL)] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logs on stderr.",
                                          rich_help_panel=CONTRACT_PANEL)] = False,
) -> None:
    claim_stdout()  # stdout stays empty: nothing a library prints may land there
    setup_logging(verbose)
    name = f"vi {showhowto.STAGE}"
    try:
        if index_only:
            if config.layout != "showhowto":
                raise ValueError("--index-only rebuilds prompts.json, which only --format showhowto has")
            count = showhowto.rebuild_prompts_index(config.out)
            stderr.print(f"{name}: {config.out / 'prompts.json'} lists {count} sequences", highlight=False)
            raise typer.Exit(EXIT_OK)
        _check_input(input)
        report = _export(config, Shard.parse(shard) if shard else Shard.from_slurm(), input, quiet,
                         resume=resume, overwrite=overwrite)
    except SetupError as exc:
        stderr.print(f"[red]{name}: cannot start:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_SETUP) from None
    except (ValueError, OSError) as exc:  # bad options, or an --out/--input we cannot use
        stderr.print(f"[red]{name}:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(report.exit_code)
