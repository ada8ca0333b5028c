"""`vi`: the top-level command and its command table.

COMMANDS maps each command's name to what runs it, "module:name" (a pipeline's RecordStage, a stage
that is one function of a record and its config, or a command function of a cli/ module, for what
needs more than that), and to its one-line summary; or a group's name to its help and its own
table; grouped by paper as `vi --help` lists them. `vi --help` lists the table's names and summaries
without importing any command module; a command's module is imported only when that command runs or
its own help is shown, and its --help opens with the summary written here. So no command module
imports another, none imports this one, and adding a stage is one line here.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

import typer
from typer.core import TyperCommand, TyperGroup

from vi import __version__

Entry = tuple[str, str]  # ("module:name", the one-line summary)


@dataclass(frozen=True)
class Group:
    help: str
    commands: dict[str, Entry]


COMMON, SHOWHOWTO, STEPDIFF, PROGRESS = "Every pipeline", "ShowHowTo", "StepDiff", "ProgressCaptioner"

# panel -> {name: ("module:function", summary) | Group}
TABLE: dict[str, dict[str, Entry | Group]] = {
    COMMON: {
        "download": ("vi.cli.download:download_command",
                     "Fetch videos by YouTube id or URL (yt-dlp): files on disk and the [cyan]video[/cyan] field "
                     "every stage reads."),
        "probe": ("vi.cli.probe:probe_command",
                  "Turn video paths into metadata records (the first stage of every pipeline)."),
        "transcribe": ("vi.pipelines.common.transcribe:TRANSCRIBE",
                       "Speech to sentence-level segments with word times (WhisperX schema)."),
        "models": ("vi.cli.models:models_command",
                   "List the models vi knows: role, format, source, licence, and whether available here."),
        "view": ("vi.cli.view:view_command",
                 "Write an HTML report of any stage's records: frames, steps, captions, QA, errors."),
        "status": ("vi.cli.status:status_command",
                   "Records done, failed (by error kind) and left, per output file and in total. Reads only: "
                   "safe while the run still writes (a half-written last line is counted as partial)."),
        "eval": Group("Score predictions: StepDiff's benchmarks (DiffCap, DiffMCQ, DiffRank) as the official "
                      "script does and its DiffMCQ instances, ShowHowTo's generated sequences, and "
                      "ProgressCaptioner's frame captions (FrameCapEval).", {
                          "diffcap": ("vi.cli.evaluate:diffcap_command",
                                      "Score difference captions (BLEU-1, CIDEr-D, ROUGE-L)."),
                          "diffmcq": ("vi.cli.evaluate:diffmcq_command",
                                      "Score difference recognition (accuracy over 4 options)."),
                          "diffrank": ("vi.cli.evaluate:diffrank_command",
                                       "Score difference ranking (Kendall's tau)."),
                          "mcq-negatives": ("vi.cli.evaluate:mcq_negatives_command",
                                            "Build DiffMCQ instances (negatives v1, v2 or v3) from annotated "
                                            "pairs."),
                          "showhowto": ("vi.cli.eval_showhowto:showhowto_command",
                                        "Score generated ShowHowTo sequences (step, scene, task) or a Table 1 "
                                        "baseline."),
                          "framecap": ("vi.cli.eval_framecap:framecap_command",
                                       "Score progress-aware frame captions (FrameCapEval: Cap and Prog per "
                                       "source)."),
                      }),
        "train": Group("Train models: StepDiff's video-conditioned LLM (projector only); ShowHowTo's "
                       "generator; ProgressCaptioner's VLM (SFT, then DPO).", {
                           "stepdiff": ("vi.cli.train:stepdiff_command",
                                        "Train StepDiff's projector on pair QA, caption and interleaved data."),
                           "showhowto": ("vi.cli.train_showhowto:showhowto_command",
                                         "Train ShowHowTo's step-conditioned video-diffusion model."),
                           "captioner": ("vi.cli.train:captioner_command",
                                         "Train ProgressCaptioner's VLM: SFT or DPO (TRL)."),
                       }),
    },
    SHOWHOWTO: {
        "filter-instructional": ("vi.cli.filter_instructional:filter_instructional_command",
                                 "Label each video instructional or not with an LLM (ShowHowTo's filter)."),
        "extract-steps": ("vi.pipelines.showhowto.extract_steps:EXTRACT_STEPS",
                          "WikiHow-style steps with start/end times from the transcript, by an LLM (ShowHowTo)."),
        "align-frames": ("vi.pipelines.showhowto.align_frames:ALIGN_FRAMES",
                         "One representative frame per step, in the steps' order (ShowHowTo's frame alignment)."),
        "export": Group("Write records out as a training dataset in a model's own layout (files, not JSONL).", {
            "showhowto": ("vi.cli.export:showhowto_command",
                          "Step sequences as ShowHowTo training data: one strip of frames per video, one prompt "
                          "per frame."),
        }),
        "rebuild": Group("Rebuild a paper's released dataset from the original videos, as its own recipe cuts it.", {
            "showhowto": ("vi.cli.rebuild:rebuild_showhowto_command",
                          "ShowHowTo's released sequences rebuilt from the original videos, byte for byte as its "
                          "ffmpeg recipe cuts them."),
        }),
        "generate": ("vi.cli.generate:generate_command",
                     "ShowHowTo's generator: a scene image and step prompts in, one generated image per step out."),
    },
    STEPDIFF: {
        "clips": ("vi.cli.clips:clips_command",
                  "Clip records (a keystep segment of a video) for StepDiff's pairs: from a StepDiff benchmark "
                  "file, an HT-Step-style segment file, or vi extract-steps records."),
        "describe": ("vi.pipelines.stepdiff.describe:DESCRIBE",
                     "A one-sentence description of each clip from its narration, an action caption and the "
                     "objects on its centre frame, consolidated by an LLM (StepDiff)."),
        "pair": ("vi.cli.pair:pair_command",
                 "Pairs of clips with the same keystep from two different videos (StepDiff's reference/candidate "
                 "pairs)."),
        "pair-qa": ("vi.pipelines.stepdiff.pair_qa:PAIR_QA",
                    "Question-answer pairs comparing the two clips of a pair, by an LLM, filtered (StepDiff)."),
        "encode-videos": ("vi.cli.encode_videos:encode_videos_command",
                          "Run a frozen video encoder once per clip and keep its visual tokens in a feature store "
                          "(safetensors chunks), so that training and scoring never decode the videos again "
                          "(StepDiff)."),
        "ask": ("vi.cli.ask:ask_command",
                "A trained StepDiff model answers a question about a pair of clips (vi train stepdiff's "
                "checkpoint)."),
        "predict": ("vi.cli.predict:predict_command",
                    "Predictions on a StepDiff benchmark from a baseline (VLEmbed, Socratic) or a trained StepDiff "
                    "model, in the official format."),
    },
    PROGRESS: {
        "frames": ("vi.cli.frames:frames_command",
                   "Frame sequences for progress-aware captioning (ProgressCaptioner): frames at --fps of a video "
                   "or clip, or a FrameCapEval sequence; all of them, sliding windows, or FrameCapEval's K-means "
                   "selection."),
        "caption-frames": ("vi.cli.caption_frames:caption_frames_command",
                           "One caption per frame of a sequence, progress-aware (ProgressCaptioner): a VLM sees the "
                           "frames as T images and answers <Frame i>: lines."),
        "judge": Group("ProgressCaptioner's judges of frame captions: progression detection by LLMs (progression) "
                       "and caption matching by a VLM (match).", {
                           "progression": ("vi.pipelines.progresscaptioner.judge_progression:JUDGE_PROGRESSION",
                                           "Progression detection: LLM judges say, per adjacent pair of frame "
                                           "captions, whether they show a change (ProgressCaptioner)."),
                           "match": ("vi.cli.judge:match_command",
                                     "Caption matching: for each distinct frame a judge picks its caption among "
                                     "the sequence's, or none (ProgressCaptioner)."),
                       }),
        "captioner-data": ("vi.cli.captioner_data:captioner_data_command",
                           "Judged captions as ProgressCaptioner's training data: SFT on the captions the judges "
                           "accept, DPO on (accepted, rejected) captions of the same frames."),
        "keyframes": ("vi.cli.keyframes:keyframes_command",
                      "Keyframes of a frame sequence (ProgressCaptioner): frames where the action progresses, or "
                      "uniform / K-means frames to compare."),
    },
}
COMMANDS: dict[str, Entry | Group] = {name: entry for panel in TABLE.values() for name, entry in panel.items()}
PANELS = {name: panel for panel, table in TABLE.items() for name in table}
CONTEXT = {"help_option_names": ["-h", "--help"]}


def load(target: str, name: str, summary: str, panel: str | None = None):
    """The click command of "module:name", a function that stage_command or command made or a pipeline's
    RecordStage, its --help opening with `summary`."""
    from vi.cli.stage import command_settings, finish_command, record_stage_command
    from vi.core.stream import RecordStage

    module, _, attr = target.partition(":")
    function = getattr(importlib.import_module(module), attr)
    if isinstance(function, RecordStage):
        function = record_stage_command(function)
    holder = typer.Typer(rich_markup_mode="rich", context_settings=CONTEXT, add_completion=False)
    holder.command(name, rich_help_panel=panel, **command_settings(function, summary))(function)
    built = typer.main.get_command(holder)
    finish_command(built)
    return built


class CommandTable(TyperGroup):
    """A group whose commands come from a table. A command is built (its module imported) when it runs or
    its own help is asked for (resolve_command); until then, what lists it (this group's --help, shell
    completion, command_names) gets the table's line for it: its name and summary."""

    table: dict[str, Entry | Group] = COMMANDS
    panels: dict[str, str] = PANELS

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(self.table)

    def get_command(self, ctx: typer.Context, name: str) -> typer.core.TyperCommand | None:
        if self.commands.get(name) is not None or name not in self.table:
            return self.commands.get(name)
        entry, panel = self.table[name], self.panels.get(name)
        if isinstance(entry, Group):
            group = CommandTable(name=name, help=entry.help, rich_markup_mode="rich", no_args_is_help=True,
                                 rich_help_panel=panel, context_settings=CONTEXT)
            group.table, group.panels = entry.commands, {}
            self.commands[name] = group
            return group
        _, summary = entry
        return TyperCommand(name, help=summary, short_help=summary, rich_help_panel=panel)

    def resolve_command(self, ctx: typer.Context, args: list[str]):
        entry = self.table.get(args[0]) if args else None
        if isinstance(entry, tuple) and args[0] not in self.commands:  # a command, to run or show its help
            target, summary = entry
            self.commands[args[0]] = load(target, args[0], summary, self.panels.get(args[0]))
        self.commands = {**{n: None for n in self.table}, **self.commands}  # typo suggestions see every name
        try:
            return super().resolve_command(ctx, args)
        finally:
            self.commands = {n: c for n, c in self.commands.items() if c is not None}


app = typer.Typer(
    name="vi",
    cls=CommandTable,
    help="Composable stages for research on instructional videos. Every stage reads JSONL "
         "records on stdin and writes them on stdout; progress and logs go to stderr.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vi {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Composable stages for research on instructional videos."""


def command_names(group: TyperGroup | None = None, prefix: str = "") -> list[str]:
    """Every command's full name (`probe`, `judge match`, ...), groups walked: what the docs must cover."""
    group = group or typer.main.get_command(app)
    ctx = typer.Context(group)
    names = []
    for name in group.list_commands(ctx):
        sub = group.get_command(ctx, name)
        if isinstance(sub, TyperGroup):
            names += command_names(sub, f"{prefix}{name} ")
        else:
            names.append(prefix + name)
    return names


def _forward_to_editor(argv: list[str]) -> None:
    """`vi FILE` (git's default editor inside an activated venv) opens the real vi.

    Our `vi` shadows the editor on PATH; when the first argument is not one of our commands
    or options, hand the call to the next `vi` on PATH instead of failing.
    """
    me = os.path.realpath(argv[0])
    if len(argv) < 2 or os.path.basename(me) != "vi" or argv[1].startswith("-"):
        return
    # Only a path is forwarded: a mistyped command must get our "no such command" error.
    if argv[1] in COMMANDS or not (os.path.exists(argv[1]) or os.sep in argv[1]):
        return
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder, "vi")
        if (os.path.isfile(candidate) and os.access(candidate, os.X_OK)
                and os.path.realpath(candidate) != me):
            os.execv(candidate, [candidate, *argv[1:]])


def main() -> None:
    # Offline unless the user opts in: a library inside a stage (transformers, pyannote)
    # must fail fast on a missing file, not try a download that hangs on a firewalled node.
    if os.environ.get("VI_ALLOW_DOWNLOAD") != "1":
        os.environ["HF_HUB_OFFLINE"] = "1"
    _forward_to_editor(sys.argv)
    app()


if __name__ == "__main__":  # python -m vi.cli.app ..., as torchrun and accelerate launch name a module
    main()
