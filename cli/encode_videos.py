"""`vi encode-videos`."""

from __future__ import annotations

from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.stepdiff import encode_videos as ev


@stage_command(
    reads="clip records (vi clips): [cyan]video[/cyan] with [cyan]start[/cyan] and [cyan]end[/cyan] (neither: "
          "the whole video); or [cyan]image[/cyan] (a still clip: the image repeated --frames times).",
    writes="[cyan]features[/cyan] = {store, file, shape, encoder}: [cyan]file[/cyan] is the chunk of --store that "
           "holds the clip's tensor under the record's id, written before the record; [cyan]shape[/cyan] is (frames, "
           "tokens, dim), frames 1 for a video model. A clip without a readable video or image, or with times outside "
           "its video, is an error record.",
    example="vi clips -i steps.jsonl | vi encode-videos --store feats/ --encoder efficientnet-lite0 -o encoded.jsonl",
    config=ev.EncodeConfig,
)
def encode_videos_command(opts: StreamOptions, config: ev.EncodeConfig):
    stage = Stage(ev.STAGE, writes=("features",), process_batch=ev.Encoder(config), batch_size=config.chunk_size)
    return run_stage(stage, read_records(opts.input, ev.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
