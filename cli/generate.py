"""`vi generate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.app import app
from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.showhowto import generate as gen
from vi.pipelines.showhowto.generator_data import parse_prompt_file_line


@stage_command(
    app, "generate",
    summary="ShowHowTo's generator: a scene image and step prompts in, one generated image per step out.",
    reads="[cyan]image[/cyan] (the scene's path) and [cyan]prompts[/cyan] = [description of the scene, step 1, "
          "..., step n] (n >= 1, at most the model's max frames - 1); or --prompt-file (the release's "
          "image|prompt|prompt|... lines), or --dataset (a vi export showhowto folder: each sequence's first "
          "frame is the scene, as in ShowHowTo's test protocol; its records keep key, title, video and "
          "source_strip, the sequence's own strip).",
    writes="[cyan]generated[/cyan] = {frames: [OUT/KEY/stepNN.jpg], strip: OUT/KEY/strip.jpg (the scene, then the "
           "steps), seed, steps, guidance: {text, image}, model}; each record's folder is written whole or not "
           "at all. The seed of a record is (--seed, id).",
    example="vi generate --prompt-file prompts.txt --model runs/showhowto --out generated -o generated.jsonl",
    models=True,
)
def generate_command(
    opts: StreamOptions,
    model: Annotated[Path, typer.Option(help="A generator folder (showhowto.json + unet/ vae/ ...) or a vi train "
                                             "showhowto run (its newest checkpoint).", show_default=False)],
    out: Annotated[Path, typer.Option(file_okay=False, help="Folder for the images.", show_default=False)],
    prompt_file: Annotated[Path | None, typer.Option(
        "--prompt-file", exists=True, dir_okay=False,
        help="Read the release's prompt file instead of records.")] = None,
    image_root: Annotated[Path | None, typer.Option(
        file_okay=False, exists=True, help="--prompt-file: where its relative image paths start (default: the "
                                           "file's folder).")] = None,
    dataset: Annotated[Path | None, typer.Option(
        file_okay=False, exists=True, help="Generate every sequence of this vi export showhowto folder from its "
                                           "first frame (saved under OUT/inputs/).")] = None,
    steps: Annotated[int, typer.Option(min=1, help="DDIM steps.")] = 50,
    text_guidance: Annotated[float, typer.Option(help="Guidance scale of the prompts.")] = 7.5,
    image_guidance: Annotated[float, typer.Option(help="Guidance scale of the scene image (1: as is).")] = 1.0,
    eta: Annotated[float, typer.Option(min=0.0, help="DDIM's eta (0: deterministic given the initial noise).")
                   ] = 0.0,
    batch_size: Annotated[int, typer.Option(min=1, help="Records per model call (records of one length are "
                                                        "batched together).")] = 4,
    device: str = "auto",
    dtype: str = "auto",
):
    sources = [s for s in (opts.input, prompt_file, dataset) if s is not None]
    if len(sources) > 1:
        raise ValueError("give one input: -i records, --prompt-file or --dataset")
    checkpoint = gen.check_model(model)
    config = gen.GenerateConfig(model=checkpoint, out=out, steps=steps, text_guidance=text_guidance,
                                image_guidance=image_guidance, eta=eta, device=device, dtype=dtype, seed=opts.seed)
    if prompt_file is not None:
        lines = prompt_file.read_text().splitlines()
        records = [{**r, "id": f"{r['id']}:{n}"} for n, line in enumerate(lines, 1)
                   if (r := parse_prompt_file_line(line, image_root or prompt_file.parent))]
        total = lambda: len(records)  # noqa: E731
    elif dataset is not None:
        records = gen.dataset_records(dataset, out / "inputs")
        total = lambda: len(records)  # noqa: E731
    else:
        records = read_records(opts.input, gen.STAGE)
        total = lambda: count_file(opts.input, opts.shard)  # noqa: E731
    stage = Stage(gen.STAGE, writes=("generated",), process_batch=lambda batch: gen.generate_batch(batch, config),
                  batch_size=batch_size)
    return run_stage(stage, records, opts, total=total)
