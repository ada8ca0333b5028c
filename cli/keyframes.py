"""`vi keyframes`."""

from __future__ import annotations

from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.progresscaptioner import keyframes as kf


@stage_command(
    reads="[cyan]frames[/cyan] (vi frames) and, for --method progress, [cyan]captions[/cyan] (vi caption-frames; "
          "--window 2 --keep-both gives the paper's per-window captions, items with [cyan]from[/cyan]) and "
          "[cyan]action[/cyan]. A record without frames is read from its captions alone (progress, uniform).",
    writes="[cyan]keyframes[/cyan] = [{index, time, caption}] (index into frames; --into FIELD for another "
           "field) and [cyan]keyframes_method[/cyan] = {method, count, ...}: for progress the judge, prompt, "
           "which captions were compared (pairwise: the window (t-1, t)'s own; sequence: a full-sequence "
           "captioning's) and the judge's letter per adjacent pair; for uniform where its count came from; for "
           "kmeans the image model, K and silhouette scores.",
    example="vi frames -i clips.jsonl | vi caption-frames --window 2 --keep-both | vi keyframes --llm smollm2-135m",
    config=kf.KeyframesConfig,
)
def keyframes_command(opts: StreamOptions, config: kf.KeyframesConfig):
    stage = Stage(kf.STAGE, writes=(config.into, f"{config.into}_method"), process=lambda r: kf.keyframes(r, config),
                  concurrency=config.concurrency)
    return run_stage(stage, read_records(opts.input, kf.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
