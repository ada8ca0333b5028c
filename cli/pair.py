"""`vi pair`."""

from __future__ import annotations

from vi.cli.stage import stage_command
from vi.core.progress import stderr
from vi.core.records import count_in_shard, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.stepdiff import pairing


@stage_command(
    reads="every clip record of the input at once (it groups them): [cyan]keystep[/cyan], "
          "[cyan]source_id[/cyan] and [cyan]video[/cyan] (to tell videos apart), and "
          "[cyan]description[/cyan] or [cyan]narration[/cyan] for --dedupe-threshold.",
    writes="one record per pair: [cyan]id[/cyan] = <reference id>__<candidate id>, [cyan]reference[/cyan] "
           "and [cyan]candidate[/cyan] (the clip records), [cyan]keystep[/cyan] (the group's), "
           "[cyan]similarity[/cyan] (keystep cosine, with --match embedding) and "
           "[cyan]description_similarity[/cyan] (with --dedupe-threshold). Clips with errors pass "
           "through unchanged; a clip without a keystep passes through as an error record.",
    example="vi clips -i steps.jsonl | vi pair --match embedding --max-pairs-per-keystep 50 > pairs.jsonl",
    config=pairing.PairConfig,
)
def pair_command(opts: StreamOptions, config: pairing.PairConfig):
    clips, passing = pairing.split_clips(read_records(opts.input, pairing.STAGE))
    pairs, counts = pairing.plan_pairs(clips, config)
    counts.passed_through = len(passing)
    stderr.print(f"vi pair: {counts.clips} clips, {counts.keysteps} distinct keysteps in {counts.groups} "
                 f"groups: {counts.pairs} pairs; {counts.alone} clips had no partner from another video, "
                 f"{counts.near_duplicates} near-duplicate pairs skipped, {counts.passed_through} records "
                 "passed through unpaired (errors, or no keystep)", highlight=False)
    records = passing + pairs
    # A pair is complete once planned (planning needs every clip); the driver adds sharding,
    # resume and the output contract, and passes the error clips through.
    stage = Stage(pairing.STAGE, writes=(), process=lambda record: {})
    return run_stage(stage, records, opts, total=lambda: count_in_shard(records, opts.shard))
