"""`vi ask`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from vi.cli.stage import stage_command
from vi.core.progress import stderr
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.stepdiff import ask as pa

INTERACTIVE_ID = "ask"


@stage_command(
    reads="[cyan]reference[/cyan], [cyan]candidate[/cyan] (each a clip id of a --features store, a video path, "
          "or a clip record {id, video or image, start, end} encoded here with the checkpoint's encoder), "
          "[cyan]question[/cyan], and optionally [cyan]seed[/cyan] (text the answer starts with). Or, with the "
          "three arguments REFERENCE CANDIDATE QUESTION, that one question (no stdin).",
    writes="[cyan]answer[/cyan]: the seed text and the model's continuation up to its end of turn. A missing "
           "question, an unknown clip id or an unreadable video is an error record naming the field.",
    example="vi ask before.mp4 after.mp4 \"What did I do differently?\" --checkpoint runs/stepdiff",
    config=pa.AskConfig,
)
def ask_command(
    opts: StreamOptions,
    config: pa.AskConfig,
    reference: Annotated[str | None, typer.Argument(
        metavar="[REFERENCE]", show_default=False,
        help="The first clip (Video 1): a video path, or a clip id of --features.")] = None,
    candidate: Annotated[str | None, typer.Argument(
        metavar="[CANDIDATE]", show_default=False, help="The second clip (Video 2).")] = None,
    question: Annotated[str | None, typer.Argument(
        metavar="[QUESTION]", show_default=False,
        help="The question; the one record goes to stdout, its answer also to stderr (unless -q).")] = None,
):
    given = [a for a in (reference, candidate, question) if a is not None]
    if given and len(given) < 3:
        raise ValueError("give all three arguments, REFERENCE CANDIDATE QUESTION, or none (records on stdin)")
    if given and opts.input is not None:
        raise ValueError("the arguments ask one question and --input gives records: give one of them")
    asker = pa.Asker(config)
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
