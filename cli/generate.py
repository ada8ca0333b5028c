"""`vi generate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.showhowto import generate as gen
from vi.pipelines.showhowto.generator_data import parse_prompt_file_line


@stage_command(
    reads="[cyan]image[/cyan] (the scene's path) and [cyan]prompts[/cyan] = \\[description of the scene, step 1, "
          "..., step n] (n >= 1, at most the model's max frames - 1); or --prompt-file (the release's "
          "image|prompt|prompt|... lines), or --dataset (a vi export showhowto folder: each sequence's first "
          "frame is the scene, as in ShowHowTo's test protocol; its records keep key, title, video and "
          "source_strip, the sequence's own strip).",
    writes="[cyan]generated[/cyan] = {frames: [OUT/KEY/stepNN.jpg], strip: OUT/KEY/strip.jpg (the scene, then the "
           "steps), seed, steps, guidance, eta, model}; each record's folder is written whole or not at all. The "
           "seed of a record is (--seed, id). The defaults are the release's predict.py (50 DDIM steps, eta 1, "
           "guidance 7.5).",
    example="vi generate --prompt-file prompts.txt --model showhowto_2to8steps.pt --out generated -o generated.jsonl",
    config=gen.GenerateConfig,
)
def generate_command(
    opts: StreamOptions,
    config: gen.GenerateConfig,
    # Where the records come from (instead of -i): options of this command, not of the generation.
    prompt_file: Annotated[Path | None, typer.Option(
        "--prompt-file", exists=True, dir_okay=False,
        help="Read the release's prompt file instead of records.")] = None,
    delimiter: Annotated[str, typer.Option(
        help="--prompt-file: the separator of its fields (predict.py's --delimiter).")] = "|",
    image_root: Annotated[Path | None, typer.Option(
        file_okay=False, exists=True, help="--prompt-file: where its relative image paths start (default: the "
                                           "file's folder).")] = None,
    dataset: Annotated[Path | None, typer.Option(
        file_okay=False, exists=True, help="Generate every sequence of this vi export showhowto folder from its "
                                           "first frame (saved under OUT/inputs/).")] = None,
):
    sources = [s for s in (opts.input, prompt_file, dataset) if s is not None]
    if len(sources) > 1:
        raise ValueError("give one input: -i records, --prompt-file or --dataset")
    if prompt_file is not None:
        lines = prompt_file.read_text().splitlines()
        parsed = [(n, r) for n, line in enumerate(lines, 1)
                  if (r := parse_prompt_file_line(line, image_root or prompt_file.parent, delimiter))]
        # prompt_index: the line's place among the prompt lines, predict.py's output name
        records = [{**r, "id": f"{r['id']}:{n}", "prompt_index": index} for index, (n, r) in enumerate(parsed)]
        total = lambda: len(records)  # noqa: E731
    elif dataset is not None:
        records = gen.dataset_records(dataset, config.out / "inputs")
        total = lambda: len(records)  # noqa: E731
    else:
        records = read_records(opts.input, gen.STAGE)
        total = lambda: count_file(opts.input, opts.shard)  # noqa: E731
    stage = Stage(gen.STAGE, writes=("generated",), process_batch=lambda batch: gen.generate_batch(batch, config),
                  batch_size=config.batch_size)
    return run_stage(stage, records, opts, total=total)
