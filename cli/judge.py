"""`vi judge`: ProgressCaptioner's two judges of frame captions, `vi judge progression` and `vi judge match`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from vi.cli.app import app
from vi.cli.llm_options import DEFAULT_LLM, LLM_HELP, LLM_PANEL, ConcurrencyOption, ThreadsOption
from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.progresscaptioner import judge_match as jm
from vi.pipelines.progresscaptioner import judge_progression as jp

judge_app = typer.Typer(rich_markup_mode="rich", no_args_is_help=True,
                        context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(judge_app, name="judge",
              help="ProgressCaptioner's judges of frame captions: progression detection by LLMs (progression) "
                   "and caption matching by a VLM (match).")

LLMsOption = Annotated[Optional[list[str]], typer.Option(
    "--llm", help=LLM_HELP + f" Repeat --llm for several judges (they vote); default {DEFAULT_LLM}.",
    rich_help_panel=LLM_PANEL, show_default=False)]
CaptionsOption = Annotated[Optional[str], typer.Option(
    "--captions", metavar="FIELD[,FIELD]",
    help="The caption fields to judge (vi caption-frames --into), comma-separated; default: every field "
         "named captions or captions_* that holds {items: [{frame, text}]}.")]


def caption_list(text: str | None) -> tuple[str, ...]:
    return tuple(name.strip() for name in (text or "").split(",") if name.strip())


@stage_command(
    judge_app, "progression",
    summary="Progression detection: LLM judges say, per adjacent pair of frame captions, whether they show a "
            "change (ProgressCaptioner).",
    reads="[cyan]captions[/cyan] (and any [cyan]captions_*[/cyan]) = {items: [{frame, text}]} from vi "
          "caption-frames, [cyan]frames[/cyan]; with --prompt eval, [cyan]action[/cyan] (or action_label).",
    writes="[cyan]progression[/cyan] = {prompt, judges, captioners, pairs: [{frames: \\[i, i+1], answers: "
           "{captioner: {judge: A|B|C}}, consensus, change, passed: {captioner: bool}}], distinct: \\[frame indices]}. "
           "consensus: the majority letter over every judge and captioner (a tie: null); change: pseudo B / "
           "eval A true, pseudo A / eval B false, C or null null; passed: the captioner's own majority is the "
           "consensus and the consensus is not C/null; distinct: frame 0 and every frame whose pair with the "
           "one before has change true. A record without a caption field is a missing_field error.",
    example="vi frames -i seqs.json --image-root data | vi caption-frames | vi judge progression --llm "
            "smollm2-135m --llm qwen2.5-coder-1.5b | vi judge match -o judged.jsonl",
    models="device",
)
def progression_command(
    opts: StreamOptions,
    llm: LLMsOption = None,
    prompt: Annotated[str, typer.Option(
        help="pseudo: the paper's pseudo-labelling prompt (A similar, B changed, C cannot tell); eval: "
             "FrameCapEval's (A action progressed, B not, C uncertain; it names the record's action).")] = "pseudo",
    prompt_file: Annotated[Optional[Path], typer.Option(
        help="Your own prompt instead of the packaged progression_pseudo.txt / progression_eval.txt; it must "
             "use ${desc1} and ${desc2} (and ${action} with --prompt eval) and ask for A, B or C.")] = None,
    captions: CaptionsOption = None,
    n_ctx: Annotated[int, typer.Option(help="The judges' context window, in tokens.")] = 2048,
    device: str = "auto",
    threads: ThreadsOption = None,
    concurrency: ConcurrencyOption = 1,
):
    # llama.cpp's OpenMP threads spin between calls unless told otherwise; on a busy machine that made each
    # SmolLM2 call take 7 s of waiting instead of 0.3 s (see describe). Set before llama.cpp loads; the
    # user's own value wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    config = jp.ProgressionConfig(llms=tuple(llm or [DEFAULT_LLM]), prompt=prompt, prompt_file=prompt_file,
                                  captions=caption_list(captions), n_ctx=n_ctx, device=device, seed=opts.seed,
                                  threads=threads, concurrency=concurrency)
    stage = Stage(jp.STAGE, writes=("progression",), process=lambda r: jp.judge_record(r, config),
                  concurrency=concurrency)
    return run_stage(stage, read_records(opts.input, jp.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))


@stage_command(
    judge_app, "match",
    summary="Caption matching: for each distinct frame a judge picks its caption among the sequence's, or none "
            "(ProgressCaptioner).",
    reads="[cyan]frames[/cyan] = [{path}], [cyan]captions[/cyan] (and any [cyan]captions_*[/cyan]), and "
          "[cyan]progression.distinct[/cyan] when vi judge progression ran (else every frame is matched).",
    writes="[cyan]matching[/cyan] = {captioner: {scorer, seed, frames: [{frame, options: \\[frame or null for "
           "none], answer, chosen, correct}], verdict}}: options are the captions in a seeded shuffle per "
           "frame with \"none of the above\" last; verdict good (every frame chose its own caption), rejected "
           "(more than half did not), neither. Offline, each frame also has the captions' scores.",
    example="vi judge progression -i captioned.jsonl | vi judge match --vlm offline -o judged.jsonl",
    models=True,
)
def match_command(
    opts: StreamOptions,
    vlm: Annotated[str, typer.Option(
        help="The judge: a vision-language model folder or cached hub id (AutoModelForImageTextToText: "
             "LLaVA-OneVision, Qwen2-VL, ...); openai:MODEL@URL, a multimodal server (frames sent as data "
             "URLs, the letter constrained); offline, the image-text scorer of vi align-frames (see --scorer, "
             "--none-margin); auto: the first cached VLM, else offline.")] = "auto",
    scorer: Annotated[str, typer.Option(
        help="The offline scorer, as vi align-frames --model: imagenet-labels (EfficientNet-Lite0's labels "
             "embedded with MiniLM), a cached CLIP model, or random (the chance baseline).")] = "imagenet-labels",
    none_margin: Annotated[float, typer.Option(
        help="Offline: the best caption is chosen only when its score beats the runner-up's by at least this "
             "(the scorer's similarity units); otherwise the answer is \"none of the above\".")
    ] = jm.DEFAULT_NONE_MARGIN,
    prompt_file: Annotated[Optional[Path], typer.Option(
        help="Your own prompt instead of the packaged caption_match.txt; it must use ${options} (the lettered "
             "captions, one per line).")] = None,
    captions: CaptionsOption = None,
    max_new_tokens: Annotated[int, typer.Option(help="Longest VLM reply, in tokens.")] = 8,
    device: str = "auto",
    dtype: str = "auto",
    concurrency: ConcurrencyOption = 1,
):
    config = jm.MatchConfig(vlm=vlm, scorer=scorer, none_margin=none_margin, prompt_file=prompt_file,
                            captions=caption_list(captions), max_new_tokens=max_new_tokens, device=device,
                            dtype=dtype, seed=opts.seed, concurrency=concurrency)
    stage = Stage(jm.STAGE, writes=("matching",), process=lambda r: jm.match_record(r, config),
                  concurrency=concurrency if vlm.startswith("openai:") else 1)
    return run_stage(stage, read_records(opts.input, jm.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
