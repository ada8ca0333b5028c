"""`vi align-frames`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.app import app
from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.showhowto import align_frames


@stage_command(
    app, "align-frames",
    summary="One representative frame per step, in the steps' order (ShowHowTo's frame alignment).",
    reads="[cyan]video[/cyan], [cyan]steps[/cyan] = {title, items: [{text, start, end}]} (from vi "
          "extract-steps), and [cyan]duration[/cyan], [cyan]width[/cyan], [cyan]height[/cyan] when "
          "vi probe set them.",
    writes="[cyan]steps[/cyan] with [cyan]frame[/cyan] = {time, score[, path]} or null added to each "
           "item (every other key kept), and [cyan]alignment[/cyan] = {model, fps, eps, candidates, "
           "unaligned}.",
    example="vi align-frames -i steps.jsonl --frames-dir frames/ -o aligned.jsonl",
    models=True,
)
def align_frames_command(
    opts: StreamOptions,
    model: Annotated[str, typer.Option(
        help="auto (dfn5b-clip-vit-h-14 when it is in the local hub cache, else imagenet-labels), "
             "imagenet-labels (EfficientNet-Lite0's top-5 ImageNet labels vs the step, offline), "
             "random (the baseline), or a CLIP model: an alias, hf-hub:org/name, an open_clip "
             "NAME:TAG (ViT-B-32:openai) in the local cache, a folder with open_clip_config.json, or "
             "a checkpoint file with --clip-arch.")] = "auto",
    clip_arch: Annotated[str | None, typer.Option(
        help="The architecture of a --model checkpoint file: an open_clip model name (ViT-B-32) "
             "or a model config .json.")] = None,
    fps: Annotated[float, typer.Option(help="Candidate frames per second of video.")] = 1.0,
    eps: Annotated[float, typer.Option(
        help="Seconds each step's interval is widened by on both sides (ShowHowTo: 15).")] = 15.0,
    frames_dir: Annotated[Path | None, typer.Option(
        help="Also save each chosen frame, full size, as DIR/<id>/<step:02d>.jpg.")] = None,
    batch_size: Annotated[int, typer.Option(help="Frames (or texts) per encoder call.")] = 32,
    device: str = "auto",
    dtype: str = "auto",
):
    # Checked before the stream starts: a bad option is exit 2 and a missing model exit 5,
    # with nothing written. The models themselves load on the first record that needs them.
    config = align_frames.AlignConfig(
        model=model, clip_arch=clip_arch, fps=fps, eps=eps, frames_dir=frames_dir,
        batch_size=batch_size, device=device, dtype=dtype, seed=opts.seed)
    stage = Stage(align_frames.STAGE, writes=("steps", "alignment"),
                  process=lambda record: align_frames.align_record(record, config))
    return run_stage(stage, read_records(opts.input, align_frames.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
