"""`vi pair-qa`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from vi.cli.app import app
from vi.cli.llm_options import ConcurrencyOption, LLMOption, ThreadsOption
from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.stepdiff import pair_qa as pq


def parse_types(text: str) -> tuple[int, ...]:
    """--types "1,2,3" as (1, 2, 3)."""
    try:
        return tuple(int(t) for t in text.replace(" ", "").split(",") if t)
    except ValueError:
        raise ValueError(f"--types must list prompt types among 1, 2, 3, like 1,2,3; got {text!r}") from None


def prompt_overrides(specs: list[str], types: tuple[int, ...]) -> tuple[tuple[int, Path], ...]:
    """--prompt values as (type, file): "2=FILE", or a bare FILE when --types names one type."""
    out: dict[int, Path] = {}
    for spec in specs:
        typed = re.fullmatch(r"([123])=(.+)", spec)
        if typed:
            out[int(typed.group(1))] = Path(typed.group(2))
        elif len(types) == 1:
            out[types[0]] = Path(spec)
        else:
            raise ValueError(f"--prompt {spec}: say which prompt type it replaces, like --prompt 2={spec}")
    return tuple(out.items())


@stage_command(
    app, "pair-qa",
    summary="Question-answer pairs comparing the two clips of a pair, by an LLM, filtered "
            "(StepDiff).",
    reads="[cyan]reference[/cyan] and [cyan]candidate[/cyan] clips (from vi pair): their "
          "[cyan]description.step[/cyan] (vi describe), else their keystep and "
          "[cyan]narration[/cyan]. The reference is Video 1, the candidate Video 2.",
    writes="[cyan]qa[/cyan] = [{type, q, a}], the QA the filter kept (type 1: differences, "
           "2: \"Which video ...?\", 3: same main action, YES/NO); [cyan]qa_stats[/cyan] = "
           "{model, sources: {reference, candidate}, generated: {type: n}, kept: {type: n}, "
           "dropped: {reason: n}, dropped_items: [{type, q, a, reason}]}. A pair whose QA are all dropped gets qa: []; one where "
           "neither clip has a description or narration is a missing_description error.",
    example="vi clips -i steps.jsonl | vi describe | vi pair | vi pair-qa --types 1,2,3 -o pair_qa.jsonl",
    models="device",
)
def pair_qa_command(
    opts: StreamOptions,
    types: Annotated[str, typer.Option(
        help="Prompt types to ask, comma-separated: 1 differences, 2 \"Which video ...?\", "
             "3 same main action (YES/NO). One LLM call per type and pair.")] = "1,2,3",
    model: LLMOption = pq.PairQAConfig.model,
    prompt: Annotated[Optional[list[str]], typer.Option(
        metavar="[TYPE=]FILE",
        help="Your own prompt for a type, as TYPE=FILE (repeat for several types; a bare FILE "
             "when --types names one type). See the packaged prompt_templates/pair_qa_*.txt "
             "for the format; it must use ${d1} and ${d2}.")] = None,
    n_ctx: Annotated[int, typer.Option(help="The model's context window, in tokens.")] = 4096,
    max_new_tokens: Annotated[int, typer.Option(
        help=f"Longest reply, in tokens (type 3 at most {pq.YES_NO_MAX_TOKENS}). The last QA of "
             "a reply cut off here is dropped as truncated.")] = pq.PairQAConfig.max_new_tokens,
    temperature: Annotated[float, typer.Option(
        help="0 decodes greedily; above 0 samples, seeded per record from --seed and its id.")
    ] = 0.0,
    max_answer_words: Annotated[int, typer.Option(
        help="Type 1 answers longer than this are dropped as too_long (the prompt asks for "
             "short answers).")] = pq.PairQAConfig.max_answer_words,
    device: str = "auto",
    threads: ThreadsOption = None,
    concurrency: ConcurrencyOption = 1,
):
    selected = parse_types(types)
    config = pq.PairQAConfig(model=model, types=selected, prompts=prompt_overrides(prompt or [], selected),
                             n_ctx=n_ctx, max_new_tokens=max_new_tokens, temperature=temperature,
                             max_answer_words=max_answer_words, device=device, seed=opts.seed,
                             threads=threads, concurrency=concurrency)
    stage = Stage(pq.STAGE, writes=("qa", "qa_stats"), process=lambda r: pq.pair_qa(r, config),
                  concurrency=concurrency)
    return run_stage(stage, read_records(opts.input, pq.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
