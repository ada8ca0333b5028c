"""`vi frames`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.stage import stage_command
from vi.core.records import count_file, count_in_shard, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.progresscaptioner import frames as fr


@stage_command(
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
    config=fr.FramesConfig,
)
def frames_command(
    opts: StreamOptions,
    config: fr.FramesConfig,
    # not a config field: where the records come from, like --input
    framecap: Annotated[Path | None, typer.Option(
        metavar="FILE.json", exists=True, dir_okay=False,
        help="Read the release's FrameCapEval sequences (coin_valhs_seq.json, htc_valhs_seq.json) "
             "instead of --input.")] = None,
):
    if framecap is not None and opts.input is not None:
        raise ValueError("give --framecap FILE.json or --input, not both")
    if framecap is not None:
        listed = fr.framecap_records(framecap, config.source)
        records, total = iter(listed), lambda: count_in_shard(listed, opts.shard)
    else:
        records, total = read_records(opts.input, fr.STAGE), lambda: count_file(opts.input, opts.shard)
    pending: dict = {}  # window id -> its window, filled as expand_windows fans records out
    if config.select == "window":
        records, total = fr.expand_windows(records, config, pending), None
    stage = Stage(fr.STAGE, writes=("frames", "action", "source", "frame_select", "parent"),
                  process=fr.make_process(config, pending))
    return run_stage(stage, records, opts, total=total)
