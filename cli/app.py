"""`vi`: the top-level command. Each stage lives in its own `vi.cli` module."""

from __future__ import annotations

import os
import sys

import typer

from vi import __version__

app = typer.Typer(
    name="vi",
    help="Composable stages for research on instructional videos. Every stage reads JSONL "
         "records on stdin and writes them on stdout; progress and logs go to stderr.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vi {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Composable stages for research on instructional videos."""


def _register() -> None:
    # Imported for their side effect of adding commands; each is cheap to import.
    from vi.cli import (  # noqa: F401
        align_frames, ask, caption_frames, captioner_data, clips, describe, encode_videos, eval_showhowto, evaluate,
        export, extract_steps, filter_instructional, frames, generate, judge, keyframes, models, pair, pair_qa, predict,
        probe, train, train_showhowto, transcribe, view)


def _forward_to_editor(argv: list[str]) -> None:
    """`vi FILE` (git's default editor inside an activated venv) opens the real vi.

    Our `vi` shadows the editor on PATH; when the first argument is not one of our commands
    or options, hand the call to the next `vi` on PATH instead of failing.
    """
    me = os.path.realpath(argv[0])
    if len(argv) < 2 or os.path.basename(me) != "vi" or argv[1].startswith("-"):
        return
    commands = {c.name or c.callback.__name__ for c in app.registered_commands}
    commands |= {g.name for g in app.registered_groups}  # vi export showhowto
    # Only a path is forwarded: a mistyped command must get our "no such command" error.
    if argv[1] in commands or not (os.path.exists(argv[1]) or os.sep in argv[1]):
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
    _register()
    _forward_to_editor(sys.argv)
    app()


if __name__ == "__main__":  # python -m vi.cli.app ..., as torchrun and accelerate launch name a module
    main()
