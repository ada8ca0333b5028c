"""`vi predict TASK`: official-format predictions on a StepDiff benchmark, from a baseline or a trained model.

The methods live in `vi.evaluation.stepdiff` (vlembed, socratic, model_predict), the options (PredictConfig),
rows, videos and prompts in `vi.evaluation.stepdiff.predict`. This module writes the lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.stage import command, run_command
from vi.core.progress import make_progress, stderr
from vi.core.records import dumps
from vi.core.sharding import Shard
from vi.core.sink import open_sink
from vi.evaluation.stepdiff.predict import Method, PredictConfig

HELP = (
    "Predictions on a StepDiff benchmark file (DiffCap, DiffMCQ or DiffRank) in the official format, one line "
    "per benchmark line, for [cyan]vi eval TASK[/cyan] (or the official evaluation/run.py) to score.\n\n"
    "[bold]vlembed[/bold] (DiffMCQ, DiffRank): open_clip embeddings, a clip's being the mean of 8 frames'; "
    "DiffMCQ scores an option by the cosine between its pair's embedding (--pair) and the caption's; DiffRank "
    "a target by its cosine to the reference.\n\n"
    "[bold]socratic[/bold] (all three): a sentence per clip (vi describe's, from --descriptions or made here "
    "from --video-root), then a text LLM in StepDiff's prompt: DiffCap generates from \"The main difference "
    "in {category} is that in Video 2,\" (rewritten to \"... instead of ...\"); DiffMCQ scores log "
    "P(\"In Video 2, {caption}\"); DiffRank P(YES) to \"Do these two videos show the same {category}?\".\n\n"
    "[bold]stepdiff[/bold] (all three): a model trained by [cyan]vi train stepdiff[/cyan] (--checkpoint), asked as "
    "socratic asks its LLM, with the clips' projected encoder tokens in place of their sentences; the tokens come "
    "from --features stores (made by the encoder the checkpoint was trained on), else are encoded from "
    "--video-root with that encoder.\n\n"
    "[bold]Clips:[/bold] <video-root>/<clip id>.mp4 when the clip has its own file, else "
    "<video-root>/<youtube_id>.mp4 cut at the id's times. Every clip is checked before any model loads.\n\n"
    "[bold]Writes:[/bold] {generated_text} (DiffCap) or {scores: [4]} (DiffMCQ, DiffRank) per line. "
    "--shard I/N predicts the I-th of N contiguous blocks of lines: concatenate the shards' files in order. "
    "Exit 2 for an unusable file or option (the message names the line), 5 for a missing model.")



@command(help=HELP, config=PredictConfig,
         epilog="Example: [cyan]vi predict diffmcq --gt diffmcq_dataset.jsonl --method vlembed --video-root "
                "videos/ -o vlembed_diffmcq.jsonl && vi eval diffmcq --gt diffmcq_dataset.jsonl --pred "
                "vlembed_diffmcq.jsonl[/cyan]")
def predict_command(
    config: PredictConfig,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="With --output: keep the complete lines of FILE, predict the rest.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="With --output: replace FILE.")] = False,
    shard: Annotated[str | None, typer.Option(metavar="I/N", help="Predict the I-th of N blocks of lines "
                                                 "(default: the Slurm array task, when set).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    run_command(lambda: _predict(config, output, resume, overwrite, shard, quiet))


def _method(config: PredictConfig, rows: list, advance_clips):
    """The method's predictor, built only when there are rows to predict (its models load here)."""
    if config.method is Method.vlembed:
        from vi.evaluation.stepdiff import vlembed

        return vlembed.build(config, rows, advance_clips)
    if config.method is Method.socratic:
        from vi.evaluation.stepdiff import socratic

        return socratic.build(config, rows, advance_clips)
    from vi.evaluation.stepdiff import model_predict

    return model_predict.build(config, rows)


def _predict(config: PredictConfig, output: Path | None, resume: bool, overwrite: bool, shard_text: str | None,
             quiet: bool) -> None:
    from vi.core.seeding import seed_everything
    from vi.evaluation.stepdiff import predict as sp

    task, method = config.task.value, config.method
    config.check()
    if resume and overwrite:
        raise ValueError("--resume keeps what FILE has and --overwrite replaces it: give one")
    seed_everything(config.seed)
    shard = Shard.parse(shard_text) if shard_text else Shard.from_slurm()
    rows = sp.read_benchmark(task, config.gt, config.allow_unknown_categories)
    if shard is not None:
        rows = sp.shard_rows(rows, shard.index, shard.count)
    sink = open_sink(output, resume, overwrite)
    done = _complete_lines(output) if resume else 0
    if done > len(rows):
        raise ValueError(f"--resume: {output} has {done} lines, more than the {len(rows)} rows to predict; "
                         "is it the output of another benchmark or shard?")
    rows = rows[done:]
    with make_progress(quiet) as progress:
        def advance_clips(total: int):
            bar = progress.add_task("clips", total=total)
            return lambda n: progress.advance(bar, n)

        model = _method(config, rows, advance_clips) if rows else None
        bar = progress.add_task(f"{method.value} {task}", total=len(rows))
        try:
            for prediction in sp.predict_rows(task, rows, model, str(config.gt)):
                sink.write(dumps(prediction))
                progress.advance(bar)
        finally:
            sink.close()
    if done:
        stderr.print(f"vi predict: resumed after {done} complete lines", highlight=False)


def _complete_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())
