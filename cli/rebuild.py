"""`vi rebuild showhowto`: a released dataset cut again from the original videos (files out, and
one record per video on stdout or --output: its sequence, or why it has none)."""

from __future__ import annotations

from vi.cli.stage import stage_command
from vi.core.progress import log
from vi.core.records import read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.showhowto import export, rebuild


@stage_command(
    reads="the release's --keyframes and --prompts (every video they list), or, with --input, records "
          "whose [cyan]youtube_id[/cyan] or [cyan]id[/cyan] names a video (vi download's output: its "
          "[cyan]video[/cyan] path is used).",
    writes="OUT/imgseqs[-I-of-N]/ID.jpg (the keyframes at native size, side by side) with a sidecar "
           "ID.json, and OUT/prompts.json = {ID: prompts}, as the release lays them out; or, with "
           "[cyan]--format webdataset[/cyan], OUT/showhowto[-I-of-N]-K.tar. One record per video: "
           "[cyan]video[/cyan] and [cyan]sequence[/cyan] = {path, frames, prompts}, or an error "
           "(missing_media, unreadable_frame, missing_prompts, ...) and no files.",
    example="vi rebuild showhowto --keyframes keyframes/ --prompts prompts.json --video-root videos/ "
            "--out ShowHowToTrain -o rebuilt.jsonl --shard 0/8 --resume",
    config=rebuild.RebuildConfig,
)
def rebuild_showhowto_command(opts: StreamOptions, config: rebuild.RebuildConfig):
    if opts.resume and opts.output is None:
        raise ValueError("--resume needs --output FILE: the records there say which videos are done")
    writer, _ = export.open_export(config.out, config.layout, opts.shard, maxcount=config.maxcount,
                                   resume=opts.resume, overwrite=opts.overwrite)
    if opts.resume:
        lost = rebuild.forget_lost(opts.output, writer)
        if lost:
            log.warning("resume: %d videos in %s are not in %s (a kill cut their tar short): rebuilt again",
                        lost, opts.output, config.out)
    given = read_records(opts.input, rebuild.STAGE) if opts.input is not None else None
    stage = Stage(rebuild.STAGE, writes=("video", "sequence"),
                  process=lambda record: rebuild.rebuild_record(record, config, writer))
    try:
        report = run_stage(stage, rebuild.records_to_rebuild(config, given), opts)
    finally:
        writer.close()
    if config.layout == "showhowto":
        count = export.rebuild_prompts_index(config.out)
        log.info("%s: %d sequences from every shard so far", config.out / "prompts.json", count)
    return report
