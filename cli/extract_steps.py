"""`vi extract-steps`."""

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
from vi.pipelines.showhowto import extract_steps as es


@stage_command(
    app, "extract-steps",
    summary="WikiHow-style steps with start/end times from the transcript, by an LLM "
            "(ShowHowTo).",
    reads="[cyan]transcript[/cyan], and [cyan]title[/cyan], [cyan]duration[/cyan] and "
          "[cyan]instructional[/cyan] when present (a record vi filter-instructional labelled "
          "false is a not_instructional error record, at no model cost).",
    writes="[cyan]steps[/cyan] = {title, items: [{text, start, end, lines}], model, segmentation, "
           "chunks, repairs, line_labels}: each step cites the first and last transcript line that "
           "state it and its times are those lines' ([cyan]lines[/cyan]: their indices in "
           "transcript.segments); in temporal order; [cyan]line_labels[/cyan] gives each segment's "
           "STEP/MORE/TALK label (null: not speech); [cyan]repairs[/cyan] lists what was fixed in "
           "the model's reply.",
    example="vi filter-instructional --drop --rejects no.jsonl -i t.jsonl | vi extract-steps | "
            "vi align-frames",
    models="device",
)
def extract_steps_command(
    opts: StreamOptions,
    model: LLMOption = es.ExtractConfig.model,
    segmentation: Annotated[str, typer.Option(
        help="Which lines make a step. filtered (default): the model cites each step's lines "
             "itself, and a first pass that labels each line STEP, MORE or TALK (greeting, aside, "
             "opinion, outro) drops the steps whose lines are all talk; where the model only copied "
             "the narration lines as steps, the labelled runs make the steps. model: the citations alone. "
             "labels: the labels make the steps and the model writes one instruction per step: no "
             "talk becomes a step, but some steps merge (README, vi extract-steps).")] = "filtered",
    prompt: Annotated[Optional[Path], typer.Option(
        help="Your own prompt file (see the packaged prompt_templates/ for the format): with "
             "--segmentation labels it replaces extract_steps_write.txt and must use ${title} "
             "and ${steps}; with model or filtered, extract_steps.txt, using ${title} and ${transcript}.")] = None,
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
    # llama.cpp's OpenMP threads spin between calls unless told otherwise, and starve each other on a busy
    # machine (see vi describe); set before llama.cpp loads, the user's own value wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    config = es.ExtractConfig(model=model, prompt=prompt, n_ctx=n_ctx,
                              max_new_tokens=max_new_tokens, overlap_s=overlap,
                              tolerance_s=tolerance, device=device, seed=opts.seed,
                              threads=threads, concurrency=concurrency, segmentation=segmentation)
    stage = Stage(es.STAGE, writes=("steps",), process=lambda r: es.extract(r, config),
                  concurrency=concurrency)
    return run_stage(stage, read_records(opts.input, es.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
