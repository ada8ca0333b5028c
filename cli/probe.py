"""`vi probe`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from vi.cli.stage import stage_command
from vi.core.progress import log
from vi.core.records import count_in_shard
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.common import probe


@stage_command(
    reads="video paths as arguments, directories (searched recursively), a text list "
          "(--list), or stdin lines that are paths or JSON records with a [cyan]video[/cyan] field.",
    writes="[cyan]id[/cyan] (file stem unless given; collisions get a path hash), "
           "[cyan]video[/cyan] (absolute path), [cyan]duration[/cyan], [cyan]fps[/cyan], "
           "[cyan]width[/cyan], [cyan]height[/cyan], [cyan]has_video[/cyan], [cyan]has_audio[/cyan].",
    example="vi probe videos/ | vi transcribe > transcripts.jsonl",
    config=probe.ProbeConfig,
)
def probe_command(
    opts: StreamOptions,
    config: probe.ProbeConfig,
    paths: Annotated[Optional[list[str]], typer.Argument(
        help="Video files or directories.", show_default=False)] = None,
    list_file: Annotated[Optional[Path], typer.Option(
        "--list", help="A text file of paths (or JSONL records), one per line.")] = None,
):
    lines: list[str | bytes] = []  # decoded line by line: one bad byte costs one line
    if list_file is not None:
        if list_file.is_dir():  # else open() says only "Is a directory"
            raise ValueError(f"--list takes a text file of paths, one per line; {list_file} is a folder: give "
                             f"it as an argument (vi probe {list_file}) and its videos are found in it")
        lines += probe.read_lines(list_file)
    if opts.input is not None:
        lines += probe.read_lines(opts.input)
    if not paths and list_file is None and opts.input is None:
        if sys.stdin.isatty():
            raise ValueError("no videos given: pass paths, a directory, --list FILE, "
                             "or pipe paths/records on stdin")
        lines += probe.read_lines(None)
    records, collisions = probe.assign_ids(probe.gather(paths or [], lines))
    for stem, clashing in collisions.items():
        log.warning("id collision on %r: %d files, ids made unique with a path hash: %s",
                    stem, len(clashing), ", ".join(clashing))
    stage = Stage(probe.STAGE, writes=("duration", "fps", "width", "height", "has_video",
                                       "has_audio"), process=probe.probe_record, concurrency=config.workers)
    return run_stage(stage, records, opts, total=lambda: count_in_shard(records, opts.shard))
