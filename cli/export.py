"""`vi export`: records out as training datasets. Terminal stages: they write files, not JSONL."""

from __future__ import annotations

import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from vi.cli.app import app
from vi.cli.stage import CONTRACT_PANEL, stage_help
from vi.core.errors import EXIT_OK, EXIT_SETUP, EXIT_USAGE, SetupError
from vi.core.progress import make_progress, setup_logging, stderr
from vi.core.records import count_file, read_records
from vi.core.sharding import Shard
from vi.core.sink import claim_stdout
from vi.pipelines.showhowto import export as showhowto

export_app = typer.Typer(rich_markup_mode="rich", no_args_is_help=True,
                         context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(export_app, name="export",
              help="Write records out as a training dataset in a model's own layout (files, not JSONL).")

OUTPUT_PANEL = "Dataset"


class Layout(str, Enum):
    showhowto = "showhowto"
    webdataset = "webdataset"


SUMMARY = "Step sequences as ShowHowTo training data: one strip of frames per video, one prompt per frame."
HELP, EPILOG = stage_help(
    SUMMARY,
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


def _export(out: Path, layout: Layout, shard: Shard | None, input: Path | None, quiet: bool, *,
            height: int, quality: int, maxcount: int, min_steps: int, resume: bool, overwrite: bool
            ) -> showhowto.ExportReport:
    writer, skipped = showhowto.open_export(out, layout.value, shard, maxcount=maxcount, resume=resume,
                                            overwrite=overwrite)
    start = time.perf_counter()
    progress = make_progress(quiet)
    with progress:
        task = progress.add_task(f"export {layout.value}",
                                 total=None if quiet else count_file(input, shard))
        report = showhowto.export_records(
            read_records(input, showhowto.STAGE), writer, skipped, height=height, quality=quality,
            min_steps=min_steps, shard=shard, on_record=lambda: progress.advance(task))
    if layout is Layout.showhowto:
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


@export_app.command("showhowto", help=HELP, epilog=EPILOG, short_help=SUMMARY)
def showhowto_command(
    out: Annotated[Path, typer.Option("--out", help="The dataset folder; created if needed.",
                                      rich_help_panel=OUTPUT_PANEL, show_default=False)],
    layout: Annotated[Layout, typer.Option(
        "--format", help="showhowto: the layout of ShowHowTo's own loader; webdataset: tar shards.",
        rich_help_panel=OUTPUT_PANEL)] = Layout.showhowto,
    height: Annotated[int, typer.Option(
        min=16, help="Tile height in pixels; tiles keep their aspect ratio and are never narrower than "
                     "tall (a portrait frame is centre-cropped to a square).", rich_help_panel=OUTPUT_PANEL)
    ] = 256,
    quality: Annotated[int, typer.Option(min=1, max=100, help="JPEG quality of the strips.",
                                         rich_help_panel=OUTPUT_PANEL)] = 95,
    maxcount: Annotated[int, typer.Option(min=1, help="webdataset: sequences per tar shard.",
                                          rich_help_panel=OUTPUT_PANEL)] = 1000,
    min_steps: Annotated[int, typer.Option(min=1, help="Skip a video with fewer steps that have a frame.",
                                           rich_help_panel=OUTPUT_PANEL)] = 2,
    index_only: Annotated[bool, typer.Option(
        "--index-only", help="Only rebuild OUT/prompts.json from the sidecars of every shard (a merge step "
                             "after an array job; each run already does it when it ends).",
        rich_help_panel=OUTPUT_PANEL)] = False,
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
            if layout is not Layout.showhowto:
                raise ValueError("--index-only rebuilds prompts.json, which only --format showhowto has")
            count = showhowto.rebuild_prompts_index(out)
            stderr.print(f"{name}: {out / 'prompts.json'} lists {count} sequences", highlight=False)
            raise typer.Exit(EXIT_OK)
        _check_input(input)
        report = _export(out, layout, Shard.parse(shard) if shard else Shard.from_slurm(), input, quiet,
                         height=height, quality=quality, maxcount=maxcount, min_steps=min_steps,
                         resume=resume, overwrite=overwrite)
    except SetupError as exc:
        stderr.print(f"[red]{name}: cannot start:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_SETUP) from None
    except (ValueError, OSError) as exc:  # bad options, or an --out/--input we cannot use
        stderr.print(f"[red]{name}:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(report.exit_code)
