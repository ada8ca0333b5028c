"""`vi keyframes`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.app import app
from vi.cli.llm_options import ConcurrencyOption, LLMOption, ThreadsOption
from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.progresscaptioner import keyframes as kf


@stage_command(
    app, "keyframes",
    summary="Keyframes of a frame sequence (ProgressCaptioner): frames where the action progresses, or "
            "uniform / K-means frames to compare.",
    reads="[cyan]frames[/cyan] (vi frames) and, for --method progress, [cyan]captions[/cyan] (vi caption-frames; "
          "--window 2 --keep-both gives the paper's per-window captions, items with [cyan]from[/cyan]) and "
          "[cyan]action[/cyan]. A record without frames is read from its captions alone (progress, uniform).",
    writes="[cyan]keyframes[/cyan] = [{index, time, caption}] (index into frames; --into FIELD for another "
           "field) and [cyan]keyframes_method[/cyan] = {method, count, ...}: for progress the judge, prompt, "
           "which captions were compared (pairwise: the window (t-1, t)'s own; sequence: a full-sequence "
           "captioning's) and the judge's letter per adjacent pair; for uniform where its count came from; for "
           "kmeans the image model, K and silhouette scores.",
    example="vi frames -i clips.jsonl | vi caption-frames --window 2 --keep-both | vi keyframes --llm smollm2-135m",
    models="device",
)
def keyframes_command(
    opts: StreamOptions,
    method: Annotated[str, typer.Option(
        help="progress: frame 0, then every frame t whose caption shows progression over frame t-1's (the "
             "judge LLM, the paper's method; the count follows the content). uniform: --count frames evenly "
             "spaced. kmeans: FrameCapEval's K-means over image features (K by silhouette, 3..6), one frame per "
             "cluster.")] = "progress",
    count: Annotated[int | None, typer.Option(
        min=1, help="uniform: how many frames (default: the count of a progress run already in the record's "
                    f"keyframes, else {kf.DEFAULT_COUNT}).")] = None,
    captions: Annotated[str, typer.Option(
        help="The caption field to read (vi caption-frames --into).")] = "captions",
    into: Annotated[str, typer.Option(
        help="Write the keyframes to this field (and FIELD_method), so methods can sit side by side.")
    ] = "keyframes",
    prompt: Annotated[str, typer.Option(
        help="progress: the judge's prompt, eval (the paper's FrameCapEval prompt: has the action advanced? A "
             "viewpoint or hand change is no progression) or pseudo (are there noticeable changes?).")] = "eval",
    prompt_file: Annotated[Path | None, typer.Option(
        "--prompt-file", exists=True, dir_okay=False,
        help="Your own judge prompt (see the packaged prompt_templates/progression_*.txt; eval needs ${action}, "
             "${desc1}, ${desc2}).")] = None,
    image_model: Annotated[str, typer.Option(
        help="kmeans: image features from a CLIP model (alias or checkpoint) or efficientnet-lite0; auto takes "
             "CLIP when installed.")] = "auto",
    captioner: Annotated[str | None, typer.Option(
        help="progress: make the captions of each window (v_{t-1}, v_t) here, with vi caption-frames' "
             "captioner (--window 2 --keep-both): a transformers VLM folder or hub id, openai:MODEL@URL, "
             "offline (the embedded-model captioner) or auto. Used for records whose caption field has no "
             "per-window captions; without it those records' captions are compared as they are.")] = None,
    llm: LLMOption = kf.KeyframesConfig.model,
    n_ctx: Annotated[int, typer.Option(help="The judge's context window, in tokens.")] = 2048,
    device: str = "auto",
    threads: ThreadsOption = None,
    concurrency: ConcurrencyOption = 1,
):
    made = kf.pair_captioner(captioner, device=device, seed=opts.seed) if captioner and method == "progress" \
        else None
    config = kf.KeyframesConfig(captioner=made, method=method, model=llm, prompt=prompt, prompt_file=prompt_file,
                                captions=captions, into=into, count=count, image_model=image_model,
                                n_ctx=n_ctx, device=device, seed=opts.seed, threads=threads,
                                concurrency=concurrency)
    stage = Stage(kf.STAGE, writes=(into, f"{into}_method"), process=lambda r: kf.keyframes(r, config),
                  concurrency=concurrency)
    return run_stage(stage, read_records(opts.input, kf.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
