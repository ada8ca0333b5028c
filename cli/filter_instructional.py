"""`vi filter-instructional`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.showhowto import filter_instructional as fi


@stage_command(
    reads="[cyan]transcript[/cyan] (from vi transcribe) and [cyan]title[/cyan] when present.",
    writes="[cyan]instructional[/cyan] = {label: true|false, reason, model, decision}: with --ask both "
           "(default) the paper's question and its opposite are asked; decision = {method, score, paper, "
           "negated: {answer, explanation, log_odds}, uncertain} says how the label was reached (llama.cpp: "
           "the log-odds of both questions combined, a word the model prefers cancelling; a server or "
           "transformers: both written answers, and where they give the same word to opposite questions, "
           "set aside as uncertain). The reason is an explanation that argues for the label. With --drop, "
           "records labelled false go to --rejects FILE instead of the output.",
    example="vi transcribe -i videos.jsonl | vi filter-instructional --drop --rejects "
            "not_howto.jsonl | vi extract-steps",
    config=fi.FilterConfig,
)
def filter_instructional_command(
    opts: StreamOptions,
    config: fi.FilterConfig,
    # Where the stream's records go, not how they are labelled: options of this command, not the config's.
    drop: Annotated[bool, typer.Option(
        help="Write records labelled not instructional to --rejects instead of the output.")
    ] = False,
    rejects: Annotated[Optional[Path], typer.Option(
        help="With --drop: the JSONL file for the records set aside (nothing is lost).")
    ] = None,
):
    if drop and rejects is None:
        raise ValueError("--drop needs --rejects FILE for the records it sets aside "
                         "(--rejects /dev/null if you really want to discard them)")
    if rejects is not None and not drop:
        raise ValueError("--rejects FILE is only used with --drop")
    opts.rejects = rejects
    stage = Stage(fi.STAGE, writes=("instructional",), process=lambda r: fi.classify(r, config),
                  reject=fi.is_rejected if drop else None, concurrency=config.concurrency)
    return run_stage(stage, read_records(opts.input, fi.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
