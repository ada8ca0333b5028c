"""`vi predict TASK`: official-format predictions on a StepDiff benchmark, from a baseline or a trained model.

The methods live in `vi.evaluation` (vlembed, socratic, stepdiff_model_predict); the rows, videos and prompts in
`vi.evaluation.stepdiff.predict`. This module parses options, builds the method, writes lines.
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from vi.cli.app import app
from vi.cli.stage import run_command
from vi.core.progress import log, make_progress, stderr
from vi.core.records import dumps
from vi.core.sharding import Shard
from vi.core.sink import open_sink


class Task(str, Enum):
    diffcap = "diffcap"
    diffmcq = "diffmcq"
    diffrank = "diffrank"


class Method(str, Enum):
    vlembed = "vlembed"
    socratic = "socratic"
    stepdiff = "stepdiff"


class Pair(str, Enum):
    both = "both"
    reference = "reference"
    candidate = "candidate"


METHOD_PANEL, VLEMBED_PANEL, SOCRATIC_PANEL, STEPDIFF_PANEL = "Method", "VLEmbed", "Socratic", "StepDiff model"
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


# Options that only some methods read ({name: (default, the methods)}): given where nothing
# reads them, they are refused rather than silently ignored.
_V, _S, _M = {Method.vlembed}, {Method.socratic}, {Method.stepdiff}
METHOD_OPTIONS = {
    "clip_model": ("dfn5b-clip-vit-h-14", _V), "clip_arch": (None, _V), "pair": (Pair.both, _V), "frames": (8, _V),
    "batch_size": (64, _V), "clip_features": (None, _V), "save_clip_features": (None, _V),
    "descriptions": (None, _S), "save_descriptions": (None, _S), "vlm": ("auto", _S),
    "llm": ("qwen2.5-coder-1.5b", _S), "n_ctx": (2048, _S), "max_new_tokens": (64, _S | _M),
    "checkpoint": (None, _M), "features": (None, _M),
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(args: dict, name: str) -> bool:
    return args[name] not in (METHOD_OPTIONS[name][0], [], ())


def _check_options(args: dict) -> None:
    """What the method needs is given, and nothing it would ignore."""
    method, task = args["method"], args["task"]
    if method is Method.stepdiff and args["checkpoint"] is None:
        raise ValueError("stepdiff needs the trained model: give --checkpoint (a vi train stepdiff run folder or "
                         "one of its checkpoints)")
    if method is Method.stepdiff and args["video_root"] is None and not args["features"]:
        raise ValueError("stepdiff needs the clips' encoder tokens: give --features (vi encode-videos stores) or "
                         "--video-root to encode the clips here")
    if method is Method.vlembed and task is Task.diffcap:
        raise ValueError("vlembed scores pairs against text; it writes no captions: use --method socratic "
                         "for diffcap")
    if method is Method.vlembed and args["video_root"] is None and args["clip_features"] is None:
        raise ValueError("vlembed needs the clips: give --video-root (or --clip-features from an earlier run)")
    if method is Method.socratic and args["video_root"] is None and args["descriptions"] is None:
        raise ValueError("socratic needs a sentence per clip: give --descriptions (vi describe's output) or "
                         "--video-root to describe the clips here")
    given = [_flag(n) for n, (_, methods) in METHOD_OPTIONS.items() if method not in methods and _given(args, n)]
    if given:
        raise ValueError(f"{', '.join(given)}: not read by --method {method.value}")
    if args["pair"] is not Pair.both and task is not Task.diffmcq:
        raise ValueError("--pair chooses VLEmbed's DiffMCQ pair embedding; it does not apply to " + task.value)
    if method is Method.socratic and args["descriptions"] is not None:
        if args["video_root"] is not None:
            raise ValueError("--descriptions and --video-root are two sources of the clips' sentences: give one")
        for name in ("save_descriptions", "vlm"):
            if _given(args, name):
                raise ValueError(f"{_flag(name)} is about describing clips from --video-root; with --descriptions "
                                 "no clip is described here")
    if args["resume"] and args["overwrite"]:
        raise ValueError("--resume keeps what FILE has and --overwrite replaces it: give one")


def _vlembed(task, rows, gt, args, advance_clips):
    from vi.core.devices import resolve_placement
    from vi.evaluation.stepdiff import predict as sp
    from vi.evaluation.stepdiff import vlembed
    from vi.pipelines.common.frame_scorers import ClipScorer, resolve_scorer

    needed = {clip for item in rows for clip in sp.row_clips(task, item.row)}
    features = vlembed.load_clip_features(args["clip_features"]) if args["clip_features"] else {}
    todo = sorted(needed - set(features))
    if todo and args["video_root"] is None:
        raise ValueError(f"--clip-features {args['clip_features']} has no embedding of {len(todo)} clips, e.g. "
                         f"{todo[0]}; give --video-root to encode them")
    videos = sp.clip_videos(task, [r for r in rows if set(sp.row_clips(task, r.row)) & set(todo)],
                            args["video_root"], str(gt)) if todo else {}
    choice = resolve_scorer(args["clip_model"], args["clip_arch"])
    if choice.kind != "clip":
        raise ValueError(f"--clip-model {args['clip_model']}: VLEmbed needs an open_clip model, not {choice.kind}")
    scorer = ClipScorer(choice, resolve_placement(args["device"], args["dtype"], engine="torch"), args["batch_size"])
    if todo:
        features.update(vlembed.encode_clips(scorer, {c: videos[c] for c in todo}, args["frames"],
                                             advance=advance_clips(len(todo))))
    if args["save_clip_features"]:
        vlembed.save_clip_features(args["save_clip_features"], features)
    dims = {len(v) for v in features.values()} | {scorer.encode_texts(["a photo"]).shape[1]}
    if len(dims) > 1:
        raise ValueError(f"clip embeddings and {args['clip_model']}'s text embeddings differ in size ({sorted(dims)}): "
                         f"--clip-features {args['clip_features']} comes from another model")
    return vlembed.VLEmbed(features, scorer.encode_texts, args["pair"].value)


def _socratic(task, rows, gt, args, advance_clips):
    from vi.core.models.llm import load_chat_llm
    from vi.evaluation.stepdiff import socratic
    from vi.evaluation.stepdiff import predict as sp

    needed = {clip for item in rows for clip in sp.row_clips(task, item.row)}
    if args["descriptions"]:
        descriptions, empty = socratic.read_descriptions(args["descriptions"], needed)
        if empty:
            log.warning("predict: %d clips have no description in %s (error records?), e.g. %s; they are "
                        "shown to the LLM as %r", len(empty), args["descriptions"], empty[0], socratic.NOT_AVAILABLE)
    else:
        descriptions = _describe_here(task, rows, gt, args, needed, advance_clips)
    llm = load_chat_llm(args["llm"], n_ctx=args["n_ctx"], device=args["device"], seed=args["seed"])
    return socratic.Socratic(llm, descriptions, args["max_new_tokens"], args["seed"])


def _stepdiff(task, rows, gt, args, advance_clips):
    from vi.evaluation.stepdiff import model_predict as stepdiff_model_predict

    return stepdiff_model_predict.build(task, rows, gt, args)


def _describe_here(task, rows, gt, args, needed, advance_clips) -> dict[str, str]:
    from vi.evaluation.stepdiff import socratic
    from vi.evaluation.stepdiff import predict as sp
    from vi.pipelines.stepdiff import describe as ds

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch and llama.cpp share the cores (vi describe)
    config = ds.DescribeConfig(vlm=args["vlm"], llm_model=args["llm"], n_ctx=args["n_ctx"], device=args["device"],
                               dtype=args["dtype"], seed=args["seed"])
    videos = sp.clip_videos(task, rows, args["video_root"], str(gt))
    sentences, records = socratic.describe_clips({c: videos[c] for c in needed}, lambda r: ds.describe(r, config),
                                                 advance_clips(len(needed)))
    if args["save_descriptions"]:
        args["save_descriptions"].write_text("".join(dumps(r).decode() for r in records))
    return sentences


@app.command("predict", help=HELP, short_help="Predictions on a StepDiff benchmark from a baseline (VLEmbed, "
             "Socratic) or a trained StepDiff model, in the official format.",
             epilog="Example: [cyan]vi predict diffmcq --gt diffmcq_dataset.jsonl --method vlembed --video-root "
                    "videos/ -o vlembed_diffmcq.jsonl && vi eval diffmcq --gt diffmcq_dataset.jsonl --pred "
                    "vlembed_diffmcq.jsonl[/cyan]")
def predict_command(
    task: Annotated[Task, typer.Argument(help="Which benchmark: diffcap, diffmcq or diffrank.")],
    gt: Annotated[Path, typer.Option("--gt", exists=True, dir_okay=False, show_default=False,
                                     help="The benchmark file (JSONL, official format).")],
    method: Annotated[Method, typer.Option(help="The baseline, or stepdiff: a trained model.",
                                           rich_help_panel=METHOD_PANEL)] = Method.socratic,
    video_root: Annotated[Path | None, typer.Option(
        file_okay=False, exists=True, help="Folder of the clips' videos (see Clips above).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="With --output: keep the complete lines of FILE, predict the rest.")
                      ] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="With --output: replace FILE.")] = False,
    shard: Annotated[str | None, typer.Option(metavar="I/N", help="Predict the I-th of N blocks of lines "
                                                 "(default: the Slurm array task, when set).")] = None,
    allow_unknown_categories: Annotated[bool, typer.Option("--allow-unknown-categories", help="Accept categories that are not StepDiff's.")
                                        ] = False,
    clip_model: Annotated[str, typer.Option(help="open_clip model: an alias from `vi models`, a folder, hf-hub:ID, "
                                            "NAME:TAG, or a checkpoint with --clip-arch.", rich_help_panel=VLEMBED_PANEL)
                          ] = "dfn5b-clip-vit-h-14",
    clip_arch: Annotated[str | None, typer.Option(help="The architecture of a --clip-model checkpoint file.",
                                                     rich_help_panel=VLEMBED_PANEL)] = None,
    pair: Annotated[Pair, typer.Option(help="DiffMCQ pair embedding: both (mean of the two clips), reference (Vr "
                                      "only) or candidate (Vc only).", rich_help_panel=VLEMBED_PANEL)] = Pair.both,
    frames: Annotated[int, typer.Option(min=1, help="Frames per clip, sampled uniformly.",
                                        rich_help_panel=VLEMBED_PANEL)] = 8,
    batch_size: Annotated[int, typer.Option(min=1, help="Frames per model call.", rich_help_panel=VLEMBED_PANEL)
                          ] = 64,
    clip_features: Annotated[Path | None, typer.Option(
        exists=True, dir_okay=False, help="Clip embeddings saved earlier (NPZ id+embedding, or JSONL); clips "
        "missing from it are encoded from --video-root.", rich_help_panel=VLEMBED_PANEL)] = None,
    save_clip_features: Annotated[Path | None, typer.Option(
        help="Save the clip embeddings (NPZ), for a later run or vi eval mcq-negatives --clip-features.",
        rich_help_panel=VLEMBED_PANEL)] = None,
    descriptions: Annotated[Path | None, typer.Option(
        exists=True, dir_okay=False, help="vi describe records of the clips (id = clip id).",
        rich_help_panel=SOCRATIC_PANEL)] = None,
    save_descriptions: Annotated[Path | None, typer.Option(
        help="Save the descriptions made here (JSONL {id, description}).", rich_help_panel=SOCRATIC_PANEL)] = None,
    vlm: Annotated[str, typer.Option(help="Vision-language model that describes clips from --video-root (as vi "
                                     "describe --vlm).", rich_help_panel=SOCRATIC_PANEL)] = "auto",
    llm: Annotated[str, typer.Option(help="GGUF chat model that answers (an alias from `vi models`, a .gguf).",
                                     rich_help_panel=SOCRATIC_PANEL)] = "qwen2.5-coder-1.5b",
    n_ctx: Annotated[int, typer.Option(help="The LLM's context, in tokens.", rich_help_panel=SOCRATIC_PANEL)] = 2048,
    max_new_tokens: Annotated[int, typer.Option(min=8, help="Longest DiffCap continuation, in tokens (socratic, "
                                                "stepdiff).", rich_help_panel=METHOD_PANEL)] = 64,
    checkpoint: Annotated[Path | None, typer.Option(
        exists=True, file_okay=False, help="The trained model: a run folder of vi train stepdiff (its newest "
        "checkpoint) or one checkpoints/step-N folder.", rich_help_panel=STEPDIFF_PANEL)] = None,
    features: Annotated[list[Path] | None, typer.Option(
        "--features", metavar="DIR", exists=True, file_okay=False, help="A feature store of the clips (vi "
        "encode-videos --store, ids = clip ids), repeatable; clips it lacks are encoded from --video-root.",
        rich_help_panel=STEPDIFF_PANEL)] = None,
    seed: Annotated[int, typer.Option(help="Seed of every random choice.")] = 0,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps.")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto, float32, float16 or bfloat16 (torch models).")] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    args = dict(locals())
    run_command("predict", lambda: _predict(args))


def _predict(args: dict) -> None:
    from vi.core.seeding import seed_everything
    from vi.evaluation.stepdiff import predict as sp

    task, method = args["task"].value, args["method"]
    _check_options(args)
    seed_everything(args["seed"])
    shard = Shard.parse(args["shard"]) if args["shard"] else Shard.from_slurm()
    rows = sp.read_benchmark(task, args["gt"], args["allow_unknown_categories"])
    if shard is not None:
        rows = sp.shard_rows(rows, shard.index, shard.count)
    sink = open_sink(args["output"], args["resume"], args["overwrite"])
    done = _complete_lines(args["output"]) if args["resume"] else 0
    if done > len(rows):
        raise ValueError(f"--resume: {args['output']} has {done} lines, more than the {len(rows)} rows to predict; "
                         "is it the output of another benchmark or shard?")
    rows = rows[done:]
    with make_progress(args["quiet"]) as progress:
        def advance_clips(total: int):
            bar = progress.add_task("clips", total=total)
            return lambda n: progress.advance(bar, n)

        build = {Method.vlembed: _vlembed, Method.socratic: _socratic, Method.stepdiff: _stepdiff}[method]
        model = build(task, rows, args["gt"], args, advance_clips) if rows else None
        bar = progress.add_task(f"{method.value} {task}", total=len(rows))
        try:
            for prediction in sp.predict_rows(task, rows, model, str(args["gt"])):
                sink.write(dumps(prediction))
                progress.advance(bar)
        finally:
            sink.close()
    if done:
        stderr.print(f"vi predict: resumed after {done} complete lines", highlight=False)


def _complete_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())
