"""`vi judge`: ProgressCaptioner's two judges of frame captions, `vi judge progression` and `vi judge match`."""

from __future__ import annotations

from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.progresscaptioner import judge_match as jm


@stage_command(
    reads="[cyan]frames[/cyan] = [{path}], [cyan]captions[/cyan] (and any [cyan]captions_*[/cyan]), and "
          "[cyan]progression.distinct[/cyan] when vi judge progression ran (else every frame is matched).",
    writes="[cyan]matching[/cyan] = {captioner: {scorer, seed, frames: [{frame, options: \\[frame or null for "
           "none], answer, chosen, correct}], verdict}}: options are the captions in a seeded shuffle per "
           "frame with \"none of the above\" last; verdict good (every frame chose its own caption), rejected "
           "(more than half did not), neither. Offline, each frame also has the captions' scores.",
    example="vi judge progression -i captioned.jsonl | vi judge match --vlm offline -o judged.jsonl",
    config=jm.MatchConfig,
)
def match_command(opts: StreamOptions, config: jm.MatchConfig):
    stage = Stage(jm.STAGE, writes=("matching",), process=lambda r: jm.match_record(r, config),
                  concurrency=config.concurrency if config.vlm.startswith("openai:") else 1)
    return run_stage(stage, read_records(opts.input, jm.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
