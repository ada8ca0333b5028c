"""`vi filter-instructional`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from vi.cli.app import app
from vi.cli.llm_options import ConcurrencyOption, LLMOption, ThreadsOption
from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.showhowto import filter_instructional as fi


@stage_command(
    app, "filter-instructional",
    summary="Label each video instructional or not with an LLM (ShowHowTo's filter).",
    reads="[cyan]transcript[/cyan] (from vi transcribe) and [cyan]title[/cyan] when present.",
    writes="[cyan]instructional[/cyan] = {label: true|false, reason, model}. With --drop, "
           "records labelled false go to --rejects FILE instead of the output.",
    example="vi transcribe -i videos.jsonl | vi filter-instructional --drop --rejects "
            "not_howto.jsonl | vi extract-steps",
    models="device",
)
def filter_instructional_command(
    opts: StreamOptions,
    model: LLMOption = fi.FilterConfig.model,
    prompt: Annotated[Optional[Path], typer.Option(
        help="Your own prompt file (see the packaged prompt_templates/filter_instructional.txt "
             "for the format); it must use ${title} and ${transcript}.")] = None,
    max_chars: Annotated[int, typer.Option(
        help="Transcript characters shown to the model (2,000 more for videos over 400 s).")
    ] = fi.FilterConfig.max_chars,
    n_ctx: Annotated[int, typer.Option(help="The model's context window, in tokens.")] = 4096,
    drop: Annotated[bool, typer.Option(
        help="Write records labelled not instructional to --rejects instead of the output.")
    ] = False,
    rejects: Annotated[Optional[Path], typer.Option(
        help="With --drop: the JSONL file for the records set aside (nothing is lost).")
    ] = None,
    device: str = "auto",
    threads: ThreadsOption = None,
    concurrency: ConcurrencyOption = 1,
):
    if drop and rejects is None:
        raise ValueError("--drop needs --rejects FILE for the records it sets aside "
                         "(--rejects /dev/null if you really want to discard them)")
    if rejects is not None and not drop:
        raise ValueError("--rejects FILE is only used with --drop")
    opts.rejects = rejects
    # llama.cpp's OpenMP threads spin between calls unless told otherwise, and starve each other on a busy
    # machine (see vi describe); set before llama.cpp loads, the user's own value wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    config = fi.FilterConfig(model=model, prompt=prompt, max_chars=max_chars, n_ctx=n_ctx,
                             device=device, seed=opts.seed, threads=threads, concurrency=concurrency)
    stage = Stage(fi.STAGE, writes=("instructional",), process=lambda r: fi.classify(r, config),
                  reject=fi.is_rejected if drop else None, concurrency=concurrency)
    return run_stage(stage, read_records(opts.input, fi.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
