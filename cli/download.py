"""`vi download`."""

from __future__ import annotations

from vi.cli.stage import stage_command
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.common import download


@stage_command(
    reads="JSONL records with [cyan]url[/cyan], [cyan]youtube_id[/cyan] or a YouTube [cyan]id[/cyan], or "
          "a plain list of YouTube ids or URLs, one per line.",
    writes="[cyan]video[/cyan] (absolute path: OUT/<2 hex of the id's hash>/<id>.<ext>) and "
           "[cyan]download[/cyan] = {url, fetched, bytes, format, height, extractor}; a failure is an "
           "error of kind unavailable, private, age_restricted, geo_blocked, rate_limited, network or "
           "download_failed.",
    example="vi download -i ids.txt --out videos/ -o downloaded.jsonl --resume && vi probe -i downloaded.jsonl",
    config=download.DownloadConfig,
)
def download_command(opts: StreamOptions, config: download.DownloadConfig):
    stage = Stage(download.STAGE, writes=("video", "download"),
                  process=lambda record: download.download_record(record, config),
                  concurrency=config.concurrency)
    return run_stage(stage, download.read_targets(opts.input), opts)
