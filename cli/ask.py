"""`vi ask`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from vi.cli.app import app
from vi.cli.stage import stage_command
from vi.core.progress import stderr
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.stepdiff import ask as pa

INTERACTIVE_ID = "ask"
GENERATION = "Generation"


@stage_command(
    app, "ask",
    summary="A trained StepDiff model answers a question about a pair of clips (vi train stepdiff's checkpoint).",
    reads="[cyan]reference[/cyan], [cyan]candidate[/cyan] (each a clip id of a --features store, a video path, "
          "or a clip record {id, video or image, start, end} encoded here with the checkpoint's encoder), "
          "[cyan]question[/cyan], and optionally [cyan]seed[/cyan] (text the answer starts with). Or, with the "
          "three arguments REFERENCE CANDIDATE QUESTION, that one question (no stdin).",
    writes="[cyan]answer[/cyan]: the seed text and the model's continuation up to its end of turn. A missing "
           "question, an unknown clip id or an unreadable video is an error record naming the field.",
    example="vi ask before.mp4 after.mp4 \"What did I do differently?\" --checkpoint runs/stepdiff",
    models=True,
)
def ask_command(
    opts: StreamOptions,
    checkpoint: Annotated[Path, typer.Option(
        exists=True, file_okay=False, show_default=False,
        help="A run folder of vi train stepdiff (its newest checkpoint is used) or one checkpoints/step-N folder.")],
    reference: Annotated[str | None, typer.Argument(
        metavar="[REFERENCE]", show_default=False,
        help="The first clip (Video 1): a video path, or a clip id of --features.")] = None,
    candidate: Annotated[str | None, typer.Argument(
        metavar="[CANDIDATE]", show_default=False, help="The second clip (Video 2).")] = None,
    question: Annotated[str | None, typer.Argument(
        metavar="[QUESTION]", show_default=False,
        help="The question; the one record goes to stdout, its answer also to stderr (unless -q).")] = None,
    features: Annotated[list[Path] | None, typer.Option(
        "--features", metavar="DIR", exists=True, file_okay=False,
        help="A feature store (vi encode-videos --store) to look clip ids up in; repeatable. Its encoder must be "
             "the one the checkpoint was trained on.")] = None,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Longest answer, in tokens.",
                                                rich_help_panel=GENERATION)] = 64,
    sample: Annotated[bool, typer.Option("--sample/--greedy", help="Sample the answer (seeded per record from "
                                         "--seed and its id), or take the likeliest token each time.",
                                         rich_help_panel=GENERATION)] = False,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (with --sample).",
                                               rich_help_panel=GENERATION)] = 1.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling: keep the likeliest tokens up to this probability "
                                         "(with --sample).", rich_help_panel=GENERATION)] = 1.0,
    seed_text: Annotated[str, typer.Option(help="Text every answer starts with, for the model to continue (a "
                                           "record's own seed field wins), e.g. \"In Video 2,\".",
                                           rich_help_panel=GENERATION)] = "",
    device: str = "auto",
    dtype: str = "auto",
):
    given = [a for a in (reference, candidate, question) if a is not None]
    if given and len(given) < 3:
        raise ValueError("give all three arguments, REFERENCE CANDIDATE QUESTION, or none (records on stdin)")
    if given and opts.input is not None:
        raise ValueError("the arguments ask one question and --input gives records: give one of them")
    asker = pa.Asker(pa.AskConfig(
        checkpoint=checkpoint, features=tuple(features or ()), max_new_tokens=max_new_tokens, sample=sample,
        temperature=temperature, top_p=top_p, seed_text=seed_text, device=device, dtype=dtype, seed=opts.seed))
    stage = Stage(pa.STAGE, writes=("answer",), process=asker.ask)
    if not given:
        return run_stage(stage, read_records(opts.input, pa.STAGE), opts,
                         total=lambda: count_file(opts.input, opts.shard))
    answers: list[str] = []

    def ask_one(record: dict) -> dict:
        added = asker.ask(record)
        answers.append(added["answer"])
        return added

    opts.shard = None  # one question: no Slurm array task drops it
    record = {"id": INTERACTIVE_ID, "reference": reference, "candidate": candidate, "question": question}
    report = run_stage(Stage(pa.STAGE, writes=("answer",), process=ask_one), [record], opts)
    if answers and not opts.quiet:
        stderr.print(f"[bold]Answer:[/bold] {escape(answers[0])}", highlight=False)
    return report
