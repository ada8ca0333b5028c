"""`vi`: the top-level command and its command table.

COMMANDS maps each command's name to what runs it, "module:name": a pipeline's RecordStage (a stage
that is one function of a record and its config) or a command function of a cli/ module (what
needs more than that), or a group's name to its help and its own table, grouped by paper as
`vi --help` lists them. A command's module
is imported only when that command runs or its help is shown, so no command module imports
another and none imports this one: adding a stage is one line here.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

import typer
from typer.core import TyperGroup

from vi import __version__


@dataclass(frozen=True)
class Group:
    help: str
    commands: dict[str, str]


COMMON, SHOWHOWTO, STEPDIFF, PROGRESS = "Every pipeline", "ShowHowTo", "StepDiff", "ProgressCaptioner"

# panel -> {name: "module:function" | Group}
TABLE: dict[str, dict[str, str | Group]] = {
    COMMON: {
        "download": "vi.cli.download:download_command",
        "probe": "vi.cli.probe:probe_command",
        "transcribe": "vi.pipelines.common.transcribe:TRANSCRIBE",
        "models": "vi.cli.models:models_command",
        "view": "vi.cli.view:view_command",
        "status": "vi.cli.status:status_command",
        "eval": Group("Score predictions: StepDiff's benchmarks (DiffCap, DiffMCQ, DiffRank) as the official "
                      "script does and its DiffMCQ instances, ShowHowTo's generated sequences, and "
                      "ProgressCaptioner's frame captions (FrameCapEval).", {
                          "diffcap": "vi.cli.evaluate:diffcap_command",
                          "diffmcq": "vi.cli.evaluate:diffmcq_command",
                          "diffrank": "vi.cli.evaluate:diffrank_command",
                          "mcq-negatives": "vi.cli.evaluate:mcq_negatives_command",
                          "showhowto": "vi.cli.eval_showhowto:showhowto_command",
                          "framecap": "vi.cli.evaluate:framecap_command",
                      }),
        "train": Group("Train models: StepDiff's video-conditioned LLM (projector only); ShowHowTo's "
                       "generator; ProgressCaptioner's VLM (SFT, then DPO).", {
                           "stepdiff": "vi.cli.train:stepdiff_command",
                           "showhowto": "vi.cli.train_showhowto:showhowto_command",
                           "captioner": "vi.cli.train:captioner_command",
                       }),
    },
    SHOWHOWTO: {
        "filter-instructional": "vi.cli.filter_instructional:filter_instructional_command",
        "extract-steps": "vi.pipelines.showhowto.extract_steps:EXTRACT_STEPS",
        "align-frames": "vi.pipelines.showhowto.align_frames:ALIGN_FRAMES",
        "export": Group("Write records out as a training dataset in a model's own layout (files, not JSONL).",
                        {"showhowto": "vi.cli.export:showhowto_command"}),
        "rebuild": Group("Rebuild a paper's released dataset from the original videos, as its own recipe cuts it.",
                         {"showhowto": "vi.cli.rebuild:rebuild_showhowto_command"}),
        "generate": "vi.cli.generate:generate_command",
    },
    STEPDIFF: {
        "clips": "vi.cli.clips:clips_command",
        "describe": "vi.pipelines.stepdiff.describe:DESCRIBE",
        "pair": "vi.cli.pair:pair_command",
        "pair-qa": "vi.pipelines.stepdiff.pair_qa:PAIR_QA",
        "encode-videos": "vi.cli.encode_videos:encode_videos_command",
        "ask": "vi.cli.ask:ask_command",
        "predict": "vi.cli.predict:predict_command",
    },
    PROGRESS: {
        "frames": "vi.cli.frames:frames_command",
        "caption-frames": "vi.cli.caption_frames:caption_frames_command",
        "judge": Group("ProgressCaptioner's judges of frame captions: progression detection by LLMs (progression) "
                       "and caption matching by a VLM (match).", {
                           "progression": "vi.pipelines.progresscaptioner.judge_progression:JUDGE_PROGRESSION",
                           "match": "vi.cli.judge:match_command",
                       }),
        "captioner-data": "vi.cli.captioner_data:captioner_data_command",
        "keyframes": "vi.cli.keyframes:keyframes_command",
    },
}
COMMANDS: dict[str, str | Group] = {name: target for panel in TABLE.values() for name, target in panel.items()}
PANELS = {name: panel for panel, table in TABLE.items() for name in table}
CONTEXT = {"help_option_names": ["-h", "--help"]}


def load(target: str, name: str, panel: str | None = None):
    """The click command of "module:name": a function that stage_command or command made, or a
    pipeline's RecordStage."""
    from vi.cli.stage import finish_command, record_stage_command
    from vi.core.stream import RecordStage

    module, _, attr = target.partition(":")
    function = getattr(importlib.import_module(module), attr)
    if isinstance(function, RecordStage):
        function = record_stage_command(function)
    holder = typer.Typer(rich_markup_mode="rich", context_settings=CONTEXT, add_completion=False)
    holder.command(name, rich_help_panel=panel, **function.typer_command)(function)
    built = typer.main.get_command(holder)
    finish_command(built)
    return built


class CommandTable(TyperGroup):
    """A group whose commands come from a table and are built when first asked for."""

    table: dict[str, str | Group] = COMMANDS
    panels: dict[str, str] = PANELS

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(self.table)

    def get_command(self, ctx: typer.Context, name: str) -> typer.core.TyperCommand | None:
        if self.commands.get(name) is None and name in self.table:
            target = self.table[name]
            if isinstance(target, Group):
                group = CommandTable(name=name, help=target.help, rich_markup_mode="rich", no_args_is_help=True,
                                     rich_help_panel=self.panels.get(name), context_settings=CONTEXT)
                group.table, group.panels = target.commands, {}
                self.commands[name] = group
            else:
                self.commands[name] = load(target, name, self.panels.get(name))
        return self.commands.get(name)

    def resolve_command(self, ctx: typer.Context, args: list[str]):
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
