"""`vi view`: any stage's records as a static HTML report folder. Terminal: writes files, not JSONL."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from vi.cli.stage import command
from rich.markup import escape

from vi.core.errors import EXIT_OK, EXIT_USAGE
from vi.core.progress import make_progress, stderr

EPILOG = """\
Reads any stage's JSONL: files, or stdin ([cyan]-[/cyan], or nothing and a pipe). Recognises by
their fields: ShowHowTo [cyan]steps[/cyan] with their frames and transcript, StepDiff clips and
pairs ([cyan]reference[/cyan]/[cyan]candidate[/cyan], [cyan]qa[/cyan] kept and dropped),
ProgressCaptioner [cyan]captions[/cyan] with [cyan]progression[/cyan], [cyan]matching[/cyan] and
[cyan]keyframes[/cyan], the generator's [cyan]generated[/cyan]; error records listed with their
stage, kind and message; any other record by its fields.

Writes OUT/index.html (open it from disk: no server, no network), OUT/data/ (the records, paged)
and OUT/thumbs/ (thumbnails, reused by the next run). Image and video paths are looked up as
written, then beside the JSONL file, then under each --media-root.

Example: [cyan]vi view out/demo/steps.jsonl -o out/demo/report[/cyan], or
[cyan]vi caption-frames ... | vi view -o report/ --title "captions"[/cyan]
"""


@command(epilog=EPILOG)
def view_command(
    inputs: Annotated[Optional[list[Path]], typer.Argument(
        metavar="[JSONL]...", help="Record files; - or none for stdin.", show_default=False)] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="The report folder (made if missing).",
                                      show_default=False)] = ...,
    title: Annotated[Optional[str], typer.Option(help="The page's title (default: the input names).")] = None,
    media_root: Annotated[Optional[list[Path]], typer.Option(
        "--media-root", help="A folder to look for relative image and video paths in (repeatable).")] = None,
    workers: Annotated[int, typer.Option(min=1, help="Threads making thumbnails.")] = 2,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    from vi.evaluation.view.report import Source, write_report

    names = [str(p) for p in inputs or []] or ["-"]
    if names.count("-") > 1:
        stderr.print("vi view: stdin (-) can be read once", highlight=False)
        raise typer.Exit(EXIT_USAGE)
    if names == ["-"] and sys.stdin.isatty():
        stderr.print("vi view: no records: give JSONL files or pipe records on stdin", highlight=False)
        raise typer.Exit(EXIT_USAGE)
    sources = []
    for name in names:
        if name != "-" and not Path(name).is_file():
            stderr.print(f"vi view: {escape(name)}: no such file", highlight=False)
            raise typer.Exit(EXIT_USAGE)
        sources.append(Source(name="stdin" if name == "-" else name, path=None if name == "-" else Path(name)))
    if out.exists() and not out.is_dir():
        stderr.print(f"vi view: --out {escape(str(out))} is a file; give a folder", highlight=False)
        raise typer.Exit(EXIT_USAGE)
    progress = make_progress(quiet)
    with progress:
        task = progress.add_task("view", total=None)
        summary = write_report(sources, out, title=title or ", ".join(s.name for s in sources),
                               media_roots=list(media_root or []), workers=workers,
                               on_record=lambda: progress.advance(task))
    kinds = ", ".join(f"{n} {k}" for k, n in summary.kinds.most_common())
    stderr.print(f"vi view: {summary.records} records ({summary.errors} with errors; {kinds or 'none'}); "
                 f"thumbnails: {summary.thumbs_made} made, {summary.thumbs_reused} reused, "
                 f"{len(summary.thumbs_failed)} failed; {summary.seconds:.1f}s", highlight=False)
    for line in summary.thumbs_failed[:5]:
        stderr.print(f"[yellow]thumbnail failed[/yellow] {escape(line)}", highlight=False)
    # The page's path on stdout: `xdg-open $(vi view ...)`, and make's targets print it.
    typer.echo(str(summary.page))
    raise typer.Exit(EXIT_OK)
