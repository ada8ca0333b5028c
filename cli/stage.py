"""The options every stage shares, and the decorator that adds them to a stage command.

A stage command is a plain function `fn(opts: StreamOptions, **its_own_options) -> Report`.
`stage_command` appends the record-contract options (--input, --output, --resume, --shard,
...) to its signature, builds the StreamOptions, and maps the outcome to the documented
exit code, so every stage takes the same options spelled the same way.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from vi.core.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_SETUP, EXIT_USAGE, RecordError, SetupError
from vi.core.progress import setup_logging, stderr
from vi.core.seeding import seed_everything
from vi.core.sharding import Shard
from vi.core.sink import DownstreamClosed, claim_stdout
from vi.core.stream import Report, StreamOptions

CONTRACT_PANEL = "Record stream (every stage)"
MODEL_PANEL = "Model placement"

_COMMON = [
    ("input", Annotated[Optional[Path], typer.Option(
        "--input", "-i", help="Read JSONL from FILE instead of stdin.", rich_help_panel=CONTRACT_PANEL)], None),
    ("output", Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Write JSONL to FILE instead of stdout.", rich_help_panel=CONTRACT_PANEL)], None),
    ("resume", Annotated[bool, typer.Option(
        "--resume", help="With --output: skip ids already complete in FILE and append; safe after a kill.",
        rich_help_panel=CONTRACT_PANEL)], False),
    ("overwrite", Annotated[bool, typer.Option(
        "--overwrite", help="With --output: replace FILE if it already has records.",
        rich_help_panel=CONTRACT_PANEL)], False),
    ("shard", Annotated[Optional[str], typer.Option(
        "--shard", metavar="I/N", help="Keep only shard I of N (stable hash of id). "
        "Defaults to the Slurm array task when SLURM_ARRAY_TASK_ID/COUNT are set.",
        rich_help_panel=CONTRACT_PANEL)], None),
    ("strict", Annotated[bool, typer.Option(
        "--strict", help="Stop at the first failed record (exit code 4).", rich_help_panel=CONTRACT_PANEL)], False),
    ("quiet", Annotated[bool, typer.Option(
        "--quiet", "-q", help="No progress bar.", rich_help_panel=CONTRACT_PANEL)], False),
    ("verbose", Annotated[bool, typer.Option(
        "--verbose", "-v", help="Debug logs on stderr (tracebacks of failed records).",
        rich_help_panel=CONTRACT_PANEL)], False),
    ("seed", Annotated[int, typer.Option(
        "--seed", help="Seed for every random choice; same input + same seed = same output.",
        rich_help_panel=CONTRACT_PANEL)], 0),
]

_MODEL = [
    ("device", Annotated[str, typer.Option(
        "--device", help="auto (cuda, then mps where the engine supports it, then cpu), cpu, mps, "
        "cuda or cuda:N.",
        rich_help_panel=MODEL_PANEL)], "auto"),
    ("dtype", Annotated[str, typer.Option(
        "--dtype", help="auto (bf16/fp16 on GPU; int8 for CTranslate2 and fp32 otherwise on CPU), "
        "float32, float16, bfloat16 or int8.", rich_help_panel=MODEL_PANEL)], "auto"),
]


MAX_SEED = 2**32


def os_message(exc: Exception) -> str:
    """An error's message without Python's '[Errno N]' prefix; the file name stays."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)


def _shard(text: str | None) -> Shard | None:
    return Shard.parse(text) if text else Shard.from_slurm()


def stage_help(summary: str, reads: str, writes: str, example: str) -> tuple[str, str]:
    """(help, epilog) in the shape every stage's --help shares."""
    help_text = f"{summary}\n\n[bold]Reads:[/bold] {reads}\n\n[bold]Writes:[/bold] {writes}"
    return help_text, f"Example: [cyan]{example}[/cyan]"


def stage_command(app: typer.Typer, name: str, *, summary: str, reads: str, writes: str,
                  example: str, models: bool | str = False):
    """Register `fn(opts, **options) -> Report` as `vi NAME` with the shared options added.

    models=True adds --device and --dtype; models="device" only --device (for engines whose
    number format the weights fix, like llama.cpp's GGUF files).
    """
    placement = _MODEL if models is True else [_MODEL[0]] if models == "device" else []
    extra = _COMMON + placement

    def decorate(fn):
        # The function names device/dtype to receive them; their declaration is the shared one.
        names = {n for n, _, _ in extra}
        hints = typing.get_type_hints(fn, include_extras=True)  # in fn's module, not this one
        own = [p.replace(annotation=hints.get(p.name, p.annotation))
               for p in inspect.signature(fn).parameters.values()
               if p.name != "opts" and p.name not in names]
        shared = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=a, default=d)
                  for n, a, d in extra]

        @functools.wraps(fn)
        def command(**kwargs):
            common = {n: kwargs.pop(n) for n, _, _ in _COMMON}
            claim_stdout()  # before any library can print: stdout is for records only
            setup_logging(common["verbose"])
            try:
                if not 0 <= common["seed"] < MAX_SEED:
                    raise ValueError(f"--seed {common['seed']} is out of range: give a whole number "
                                     f"from 0 to {MAX_SEED - 1} (the engines' seeds are 32-bit)")
                opts = StreamOptions(
                    input=common["input"], output=common["output"], resume=common["resume"],
                    overwrite=common["overwrite"], shard=_shard(common["shard"]),
                    strict=common["strict"], quiet=common["quiet"],
                    seed=common["seed"])
                seed_everything(opts.seed)
                report = fn(opts, **kwargs)
            except SetupError as exc:
                stderr.print(f"[red]vi {name}: cannot start:[/red] {escape(str(exc))}", highlight=False)
                raise typer.Exit(EXIT_SETUP) from None
            except (ValueError, OSError) as exc:  # bad options, -i/-o paths we cannot use, a full disk
                stderr.print(f"[red]vi {name}:[/red] {escape(os_message(exc))}", highlight=False)
                raise typer.Exit(EXIT_USAGE) from None
            except KeyboardInterrupt:  # Ctrl-C: what is in --output is whole lines, resumable
                stderr.print(f"[red]vi {name}: interrupted[/red]; the records written so far are "
                             "complete: rerun with --resume to finish", highlight=False)
                raise typer.Exit(EXIT_INTERRUPTED) from None
            raise typer.Exit(report.exit_code if isinstance(report, Report) else int(report or 0))

        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + shared
        command.__signature__ = inspect.Signature(params)
        command.__annotations__ = {p.name: p.annotation for p in params}
        help_text, epilog = stage_help(summary, reads, writes, example)
        app.command(name, help=help_text, epilog=epilog, short_help=summary)(command)
        return fn

    return decorate



def run_command(name: str, body: Callable[[], None]) -> None:
    """Run a command that is not a record stage (vi eval, vi predict) with the stages' exit
    codes: 5 for a missing model or a setup failure, 2 for input or options it cannot use (the
    message names file and line), 0 when a downstream reader such as `head` stops early."""
    claim_stdout()  # stdout carries only the result: pycocoevalcap, torch and llama.cpp print
    setup_logging(False)
    try:
        body()
    except SetupError as exc:
        stderr.print(f"[red]vi {name}: cannot start:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_SETUP) from None
    except RecordError as exc:  # e.g. frames that cannot be decoded: here, nothing to go on without
        stderr.print(f"[red]vi {name}:[/red] {escape(exc.message)}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    except (ValueError, OSError) as exc:  # BenchmarkFileError is a ValueError
        stderr.print(f"[red]vi {name}:[/red] {escape(os_message(exc))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    except DownstreamClosed:
        pass
    raise typer.Exit(EXIT_OK)
