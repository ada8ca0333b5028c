"""`vi extract-steps`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from vi.cli.app import app
from vi.cli.llm_options import ConcurrencyOption, LLMOption, ThreadsOption
from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.showhowto import extract_steps as es


@stage_command(
    app, "extract-steps",
    summary="WikiHow-style steps with start/end times from the transcript, by an LLM "
            "(ShowHowTo).",
    reads="[cyan]transcript[/cyan], and [cyan]title[/cyan] and [cyan]duration[/cyan] when "
          "present.",
    writes="[cyan]steps[/cyan] = {title, items: [{text, start, end, lines}], model, chunks, "
           "repairs}: the model cites the first and last transcript line of each step and the "
           "times are those lines' ([cyan]lines[/cyan]: their indices in transcript.segments); "
           "in temporal order; [cyan]repairs[/cyan] lists what was fixed in the model's reply.",
    example="vi filter-instructional --drop --rejects no.jsonl -i t.jsonl | vi extract-steps | "
            "vi align-frames",
    models="device",
)
def extract_steps_command(
    opts: StreamOptions,
    model: LLMOption = es.ExtractConfig.model,
    prompt: Annotated[Optional[Path], typer.Option(
        help="Your own prompt file (see the packaged prompt_templates/extract_steps.txt for "
             "the format); it must use ${title} and ${transcript}.")] = None,
    n_ctx: Annotated[int, typer.Option(
        help="The model's context window in tokens; longer transcripts are chunked.")] = 4096,
    max_new_tokens: Annotated[int, typer.Option(help="Longest reply, in tokens.")] = 1024,
    overlap: Annotated[float, typer.Option(
        help="Seconds of transcript shown on each side of a chunk, as context.")] = 30.0,
    tolerance: Annotated[float, typer.Option(
        help="Step times up to this many seconds outside the video are clamped; further out, "
             "the step is dropped.")] = 2.0,
    device: str = "auto",
    threads: ThreadsOption = None,
    concurrency: ConcurrencyOption = 1,
):
    config = es.ExtractConfig(model=model, prompt=prompt, n_ctx=n_ctx,
                              max_new_tokens=max_new_tokens, overlap_s=overlap,
                              tolerance_s=tolerance, device=device, seed=opts.seed,
                              threads=threads, concurrency=concurrency)
    stage = Stage(es.STAGE, writes=("steps",), process=lambda r: es.extract(r, config),
                  concurrency=concurrency)
    return run_stage(stage, read_records(opts.input, es.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
