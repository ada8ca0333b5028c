"""`vi caption-frames`."""

from __future__ import annotations

from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.progresscaptioner import caption_frames as cf
from vi.pipelines.progresscaptioner import offline_captioner as oc


@stage_command(
    reads="[cyan]frames[/cyan] = [{time, path}] (vi frames), [cyan]query0[/cyan] (the release's own prompt of the "
          "sequence, which vi frames --framecap passes on: sent unchanged with --prompt-style release) and "
          "[cyan]action[/cyan] when present. --vlm also takes the released ProgressCaptioner checkpoint (LLaVA-NeXT's "
          "format), converted once and asked the release's way.",
    writes="[cyan]captions[/cyan] (or --into FIELD) = {model, kind, window, prompt, items: [{frame, text}], "
           "repairs}: [cyan]frame[/cyan] indexes [cyan]frames[/cyan]; [cyan]kind[/cyan] is vlm, openai or "
           f"{oc.KIND} (the offline captioner: ImageNet labels and scene changes, no actions); windowed runs "
           "add [cyan]from[/cyan] (the window's frames) to each item, and a frame's first item is its caption. "
           "[cyan]repairs[/cyan] lists what the reply parser fixed. A sequence --window full cannot take (1 "
           "frame, or more than --max-frames), missing frame files, or a reply lacking a frame's caption after "
           "one retry are error records.",
    example="vi frames -i clips.jsonl --select kmeans | vi caption-frames --window full -o captions.jsonl",
    config=cf.CaptionConfig,
)
def caption_frames_command(opts: StreamOptions, config: cf.CaptionConfig):
    records = (config.batch_size if config.backend == "vlm" else 4 * config.concurrency if config.backend == "openai"
               else 8)
    stage = Stage(cf.STAGE, writes=(config.into,), process_batch=lambda batch: cf.caption_batch(batch, config),
                  batch_size=records)
    return run_stage(stage, read_records(opts.input, cf.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
