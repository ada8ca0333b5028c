"""`vi frames`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.app import app
from vi.cli.stage import stage_command
from vi.core.records import count_file, count_in_shard, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.progresscaptioner import frames as fr


@stage_command(
    app, "frames",
    summary="Frame sequences for progress-aware captioning (ProgressCaptioner): frames at --fps of a video "
            "or clip, or a FrameCapEval sequence; all of them, sliding windows, or FrameCapEval's K-means "
            "selection.",
    reads="video records (vi probe: [cyan]video[/cyan], [cyan]duration[/cyan], [cyan]width[/cyan], "
          "[cyan]height[/cyan]) or clip records (vi clips: [cyan]video[/cyan], [cyan]start[/cyan], "
          "[cyan]end[/cyan]); records with [cyan]image_files[/cyan] (under --image-root) or [cyan]frames[/cyan] "
          "(image paths); or, with [cyan]--framecap FILE.json[/cyan], the release's FrameCapEval list "
          "{idx, action_label, n_frames, image_files}, id <source>/<idx>.",
    writes="[cyan]frames[/cyan] = [{time, path}] (time in seconds in the video, null for images; a "
           "video's frames saved once as DIR/<id>/<time>.jpg), [cyan]action[/cyan] (kept, else action_label, "
           "else keystep, else null), [cyan]source[/cyan] (COIN, HTC, --source, or null), "
           "[cyan]frame_select[/cyan] = {method, fps, ...}. --select window writes one record per window, "
           "id <id>/w<first>-<last>, with [cyan]parent[/cyan] = <id>. Nothing is refused for its length: a "
           "1-frame record is kept (vi caption-frames refuses it) and one over 6 frames too (vi "
           "caption-frames windows it). A missing video or image file is an error record naming it.",
    example="vi probe videos/ | vi frames --frames-dir frames/ --select kmeans -o sequences.jsonl",
    models=True,
)
def frames_command(
    opts: StreamOptions,
    select: Annotated[str, typer.Option(
        help="all: every frame; window: --window frames every --stride frames, one record each (a last "
             "window ends on the last frame; a shorter sequence is one window); kmeans: FrameCapEval's "
             "construction: K-means over image features, K by silhouette score from 3, one frame per "
             "cluster in temporal order, plus the frame nearest in feature distance to a randomly chosen "
             "one (seeded by --seed and the id). Under 4 frames, kmeans keeps them all.")] = "all",
    fps: Annotated[float, typer.Option(help="Frames per second taken from a video, from the clip's start.")] = 1.0,
    frames_dir: Annotated[Path | None, typer.Option(
        help="Folder for a video's frames, saved once as DIR/<id>/<time>.jpg (an existing file is reused). "
             "Needed for video and clip records.")] = None,
    window: Annotated[int | None, typer.Option(
        help="With --select window: frames per window, 2 to 6; default 2.")] = None,
    stride: Annotated[int | None, typer.Option(
        help="With --select window: frames from one window's start to the next; default 1.")] = None,
    framecap: Annotated[Path | None, typer.Option(
        metavar="FILE.json", exists=True, dir_okay=False,
        help="Read the release's FrameCapEval sequences (coin_valhs_seq.json, htc_valhs_seq.json) "
             "instead of --input.")] = None,
    image_root: Annotated[Path | None, typer.Option(
        help="The folder FrameCapEval's image_files paths start from.")] = None,
    source: Annotated[str | None, typer.Option(
        help="The source dataset written to 'source' (default: from a --framecap file name, coin_*: "
             "COIN, htc_*: HTC).")] = None,
    model: Annotated[str | None, typer.Option(
        help="With --select kmeans, the image features: auto (dfn5b-clip-vit-h-14 when in the local hub "
             "cache, else efficientnet-lite0), efficientnet-lite0 (offline: its pooled last feature map), or "
             "a CLIP model as vi align-frames takes it: an alias, hf-hub:org/name, an open_clip NAME:TAG, a "
             "folder with open_clip_config.json, or a checkpoint file with --clip-arch; default auto.")] = None,
    clip_arch: Annotated[str | None, typer.Option(
        help="The architecture of a --model checkpoint file: an open_clip model name or a config .json.")] = None,
    max_frames: Annotated[int, typer.Option(
        help="With --select kmeans: most frames kept, near-duplicate included, so K <= max-frames - 1. "
             "The release's sequences have at most 6; 7 allows the paper's full K range 3..6.")] = 6,
    batch_size: Annotated[int, typer.Option(help="Frames per image-encoder call (kmeans).")] = 32,
    device: str = "auto",
    dtype: str = "auto",
):
    if select != "window" and (window is not None or stride is not None):
        raise ValueError("--window and --stride go with --select window")
    if select != "kmeans" and (model is not None or clip_arch is not None):
        raise ValueError("--model and --clip-arch choose the image features of --select kmeans")
    if framecap is not None and opts.input is not None:
        raise ValueError("give --framecap FILE.json or --input, not both")
    config = fr.FramesConfig(
        select=select, fps=fps, window=2 if window is None else window, stride=1 if stride is None else stride,
        frames_dir=frames_dir, image_root=image_root, source=source, model=model or "auto", clip_arch=clip_arch,
        max_frames=max_frames, batch_size=batch_size, device=device, dtype=dtype, seed=opts.seed)
    if framecap is not None:
        listed = fr.framecap_records(framecap, source)
        records, total = iter(listed), lambda: count_in_shard(listed, opts.shard)
    else:
        records, total = read_records(opts.input, fr.STAGE), lambda: count_file(opts.input, opts.shard)
    pending: dict = {}  # window id -> its window, filled as expand_windows fans records out
    if select == "window":
        records, total = fr.expand_windows(records, config, pending), None
    stage = Stage(fr.STAGE, writes=("frames", "action", "source", "frame_select", "parent"),
                  process=fr.make_process(config, pending))
    return run_stage(stage, records, opts, total=total)
