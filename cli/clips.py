"""`vi clips`."""

from __future__ import annotations

from pathlib import Path

from vi.cli.stage import stage_command
from vi.core.progress import log
from vi.core.records import count_in_shard, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.stepdiff import clips


@stage_command(
    reads="with [cyan]--from-benchmark FILE[/cyan]: the clip ids <youtube_id>_<start>_<end> of a "
          "DiffCap, DiffMCQ or DiffRank JSONL; with [cyan]--from-segments FILE[/cyan]: CSV/TSV/JSON/"
          "JSONL rows with one column of each: "
          + "; ".join("|".join(names) for names in clips.SEGMENT_COLUMNS.values()) + "; "
          "otherwise (stdin or --input) records with [cyan]steps[/cyan], [cyan]video[/cyan], and "
          "[cyan]duration[/cyan] and [cyan]transcript[/cyan] when present.",
    writes="one record per clip: [cyan]id[/cyan], [cyan]video[/cyan], [cyan]start[/cyan], [cyan]end[/cyan], "
           "[cyan]keystep[/cyan] (null for benchmark clips without --keysteps), [cyan]source_id[/cyan] (the "
           "youtube id or source record), [cyan]step_index[/cyan] and [cyan]narration[/cyan] (steps "
           "records), [cyan]video_duration[/cyan]. A clip that is not inside its video is an error record.",
    example="vi clips --from-benchmark diffcap_dataset.jsonl --video-root videos/ > clips.jsonl",
    config=clips.ClipsConfig,
)
def clips_command(opts: StreamOptions, config: clips.ClipsConfig):
    if config.annotated:
        if opts.input is not None:
            raise ValueError("--input reads vi extract-steps records; with --from-benchmark or "
                             "--from-segments the clips come from that file")
        records = _annotated(config.from_benchmark, config.from_segments, config.video_root, config.keysteps)
        if config.transcripts is not None:
            found = clips.transcript_index(config.transcripts)
            heard = {r.get("source_id") for r in records} & set(found)
            log.info("--transcripts %s: narration for the clips of %d of %d videos", config.transcripts, len(heard),
                     len({r.get("source_id") for r in records if r.get("source_id")}))
            records = list(clips.with_narration(records, found))
        total = lambda: count_in_shard(records, opts.shard)
    else:
        records = clips.step_clips(read_records(opts.input, clips.STAGE))
        total = None
    lengths = clips.VideoLengths()
    stage = Stage(clips.STAGE, writes=("video_duration",),
                  process=lambda record: clips.check_clip(record, lengths, config.tolerance))
    return run_stage(stage, records, opts, total=total)


def _annotated(benchmarks: tuple[Path, ...], segments: Path | None, video_root: Path,
               keysteps: Path | None) -> list[dict]:
    if segments is not None:
        return clips.segment_clips(segments, video_root)
    known: dict = {}
    if keysteps is not None:
        known, unusable = clips.keystep_lookup(keysteps)
        if unusable:
            log.warning("--keysteps %s: %d rows unusable, first: %s", keysteps, len(unusable),
                        unusable[0]["errors"][-1]["message"])
    records, seen = [], set()
    for path in benchmarks:  # a clip named by several files is one clip
        for record in clips.benchmark_clips(path, video_root, known):
            if record["id"] not in seen:
                seen.add(record["id"])
                records.append(record)
    return records
