"""`vi encode-videos`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.app import app
from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.stepdiff import encode_videos as ev


@stage_command(
    app, "encode-videos",
    summary="Run a frozen video encoder once per clip and keep its visual tokens in a feature store "
            "(safetensors chunks), so that training and scoring never decode the videos again (StepDiff).",
    reads="clip records (vi clips): [cyan]video[/cyan] with [cyan]start[/cyan] and [cyan]end[/cyan] (neither: "
          "the whole video); or [cyan]image[/cyan] (a still clip: the image repeated --frames times).",
    writes="[cyan]features[/cyan] = {store, file, shape, encoder}: [cyan]file[/cyan] is the chunk of --store that "
           "holds the clip's tensor under the record's id, written before the record; [cyan]shape[/cyan] is (frames, "
           "tokens, dim), frames 1 for a video model. A clip without a readable video or image, or with times outside "
           "its video, is an error record.",
    example="vi clips -i steps.jsonl | vi encode-videos --store feats/ --encoder efficientnet-lite0 -o encoded.jsonl",
    models=True,
)
def encode_videos_command(
    opts: StreamOptions,
    store: Annotated[Path, typer.Option(
        help="Feature store folder (made where absent): encoder.json and chunk-*.safetensors. Several runs "
             "and Slurm array ranks may share one, if they use the same encoder and --frames.")],
    encoder: Annotated[str, typer.Option(
        help="open_clip:REF (a CLIP alias from `vi models`, a folder, a checkpoint with --clip-arch, "
             "hf-hub:org/name or NAME:TAG): a ViT's patch tokens per frame; efficientnet-lite0: its 7x7 "
             "feature map per frame (embedded, offline); hf:FOLDER_OR_HUB_ID: a transformers video model "
             "(VideoMAE, TimeSformer, ViViT), its last_hidden_state over the whole clip.")] = ev.ve.DEFAULT_ENCODER,
    clip_arch: Annotated[str | None, typer.Option(
        help="With --encoder open_clip:CHECKPOINT_FILE: its open_clip architecture name or model config "
             ".json.")] = None,
    frames: Annotated[int, typer.Option(help="Frames per clip, sampled uniformly inside it.")] = 8,
    chunk_size: Annotated[int, typer.Option(
        help="Clips per store chunk: each chunk is written (atomically) before its records go out.")] = 64,
    batch_size: Annotated[int, typer.Option(help="Frames per forward pass of the encoder.")] = 64,
    store_dtype: Annotated[str, typer.Option(
        help="Number format of the stored tokens: float16, bfloat16 or float32.")] = "float16",
    overwrite_features: Annotated[bool, typer.Option(
        "--overwrite-features", help="Encode clips the store already has again (the new chunk's copy is the one read).")] = False,
    device: str = "auto",
    dtype: str = "auto",
):
    config = ev.EncodeConfig(store=store, encoder=encoder, clip_arch=clip_arch, frames=frames,
                             chunk_size=chunk_size, batch_size=batch_size, store_dtype=store_dtype,
                             overwrite_features=overwrite_features, device=device, dtype=dtype)
    stage = Stage(ev.STAGE, writes=("features",), process_batch=ev.Encoder(config), batch_size=chunk_size)
    return run_stage(stage, read_records(opts.input, ev.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
