"""`vi describe`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from vi.cli.app import app
from vi.cli.llm_options import ConcurrencyOption, LLMOnlyOption, ThreadsOption
from vi.cli.stage import stage_command
from vi.core.models.vlm import KNOWN_DETECTORS, KNOWN_VLMS
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.stepdiff import describe as ds


@stage_command(
    app, "describe",
    summary="A one-sentence description of each clip from its narration, an action caption and the objects "
            "on its centre frame, consolidated by an LLM (StepDiff).",
    reads="clip records (vi clips): [cyan]video[/cyan], [cyan]start[/cyan], [cyan]end[/cyan], and "
          "[cyan]narration[/cyan] and [cyan]video_duration[/cyan] when present.",
    writes="[cyan]description[/cyan] = {action, objects: [{name, attributes, score}], narration, step, "
           "sources: {action, objects, step}}: [cyan]step[/cyan] is the sentence (what vi pair-qa reads); "
           "[cyan]sources[/cyan] names the model behind each part (action null without a VLM; objects "
           f"\"{ds.IMAGENET_OBJECTS}\" offline, else \"VLM+DETECTOR\"). A clip without a readable video, or "
           "with times outside it, is an error record.",
    example="vi clips -i steps.jsonl | vi describe | vi pair | vi pair-qa -o qa.jsonl",
    models=True,
)
def describe_command(
    opts: StreamOptions,
    vlm: Annotated[str, typer.Option(
        help="Vision-language model for the action caption (8 frames) and the object list (centre frame): "
             "a local folder or a hub id in the local cache that transformers' AutoModelForImageTextToText "
             f"loads (LLaVA-OneVision, Qwen2-VL, ...); auto: the first cached of {', '.join(KNOWN_VLMS)}; "
             "none: no action caption, objects from EfficientNet-Lite0's ImageNet labels (offline).")] = ds.AUTO,
    detector: Annotated[str, typer.Option(
        help="Zero-shot detector that checks the objects the VLM lists (OWL-ViT, OWLv2, Grounding DINO): a "
             f"folder or a cached hub id; auto: the first cached of {', '.join(KNOWN_DETECTORS)}, else none; "
             "none: keep the listed objects unchecked.")] = ds.AUTO,
    llm: LLMOnlyOption = ds.DescribeConfig.llm_model,
    prompt: Annotated[Path | None, typer.Option(
        help="Your own consolidation prompt (see the packaged prompt_templates/describe_consolidate.txt); it "
             "must use ${narration}, ${action_caption} and ${object_caption}.")] = None,
    num_frames: Annotated[int, typer.Option(
        help="Frames the VLM sees for the action caption, sampled uniformly inside the clip.")] = 8,
    max_new_tokens: Annotated[int, typer.Option(help="Longest VLM reply, in tokens.")] = 128,
    min_score: Annotated[float, typer.Option(
        help="A listed object is kept when its detector score is above this. The score is the probability "
             "of the object's best box, or 0 where no box reaches --box-threshold; offline, it is the "
             "ImageNet class probability.")] = 0.0,
    box_threshold: Annotated[float | None, typer.Option(
        help="Box probability from which the detector counts a box (default: the detector's own "
             "post-processing default, 0.1 for OWL-ViT/OWLv2, 0.25 for Grounding DINO).")] = None,
    top_k: Annotated[int, typer.Option(help="ImageNet classes listed as objects, offline.")] = ds.TOP_K,
    step_max_tokens: Annotated[int, typer.Option(help="Longest description, in tokens.")] = 96,
    n_ctx: Annotated[int, typer.Option(help="The LLM's context window, in tokens.")] = 2048,
    device: str = "auto",
    dtype: str = "auto",
    threads: ThreadsOption = None,
    concurrency: ConcurrencyOption = 1,
):
    # torch (EfficientNet, the VLM, the detector) and llama.cpp share this process: OpenMP threads that
    # spin after torch's work starve llama.cpp's (on 2 busy cores, 8 tokens of SmolLM2 took 26 s, not 0.3 s).
    # Set before either library loads its OpenMP runtime; a value the user set wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    config = ds.DescribeConfig(vlm=vlm, detector=detector, llm_model=llm, prompt=prompt, num_frames=num_frames,
                               max_new_tokens=max_new_tokens, step_max_tokens=step_max_tokens, n_ctx=n_ctx,
                               min_score=min_score, box_threshold=box_threshold, top_k=top_k, device=device,
                               dtype=dtype, seed=opts.seed, threads=threads, concurrency=concurrency)
    stage = Stage(ds.STAGE, writes=("description",), process=lambda r: ds.describe(r, config),
                  concurrency=concurrency)
    return run_stage(stage, read_records(opts.input, ds.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
