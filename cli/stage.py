"""The options every stage shares, and the decorators that make a function a command.

A stage command is a plain function `fn(opts: StreamOptions, config: ItsConfig, **own) -> Report`.
`stage_command` appends the record-contract options (--input, --output, --resume, --shard,
...) to its signature, builds the StreamOptions and the config from their options, and maps the
outcome to the documented exit code, so every stage takes the same options spelled the same way.
`command` does the same for a command that is not a stage. Neither registers anything nor names or
summarises the command: the command table in cli/app.py gives each its name and one-line summary
(`command_settings` puts that summary at the head of its --help) and loads its module only when it
is run or asked for its own help.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from vi.cli.options import config_parameters, take_values
from vi.core.errors import (EXIT_INTERRUPTED, EXIT_OK, EXIT_SETUP, EXIT_USAGE, TRANSIENT_KINDS, RecordError,
                            SetupError)
from vi.core.progress import setup_logging, stderr
from vi.core.provenance import fingerprint
from vi.core.seeding import seed_everything
from vi.core.sharding import Shard
from vi.core.sink import DownstreamClosed, claim_stdout
from vi.core.records import count_file, read_records
from vi.core.stream import RecordStage, Report, StreamOptions, run_stage

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
    ("retry_errors", Annotated[Optional[str], typer.Option(
        "--retry-errors", metavar="[KIND,...]", help="With --resume: redo the records this stage failed with "
        "these error kinds (comma-separated; alone: the transient ones, "
        f"{', '.join(TRANSIENT_KINDS)}; 'all': any), their lines replaced; exactly once, as --resume.",
        rich_help_panel=CONTRACT_PANEL, show_default=False)], None),
    ("allow_mixed", Annotated[bool, typer.Option(
        "--allow-mixed", help="With --resume: go on although FILE's records were made by another "
        "configuration (model, prompt, options, vi version) than this run's.",
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


RETRY_FLAG_ALONE = "transient"  # what --retry-errors means with no KIND after it


def retry_kinds(text: str | None) -> frozenset[str] | None:
    """--retry-errors' kinds: None when not given, an empty set for 'all' (any kind)."""
    if text is None:
        return None
    kinds = frozenset(k.strip() for k in text.split(",") if k.strip())
    if kinds == {RETRY_FLAG_ALONE}:
        return frozenset(TRANSIENT_KINDS)
    if "all" in kinds:
        return frozenset()
    odd = sorted(k for k in kinds if not k.replace("_", "").isalnum())
    if odd or not kinds:
        raise ValueError(f"--retry-errors takes error kinds such as {TRANSIENT_KINDS[0]} (comma-separated), "
                         f"'all', or nothing; got {text!r}. A path after it is taken as its value: put "
                         "--retry-errors after the paths, or give its kinds")
    return kinds


def finish_command(command: Any) -> None:
    """What typer cannot say, done to the built command: the hidden catch-all argument (STRAY) kept
    out of the usage line, and --retry-errors allowed to stand alone: alone, or before another
    option, it means RETRY_FLAG_ALONE (click's optional option values are not in the click that
    typer carries, so the arguments are completed before they are parsed)."""
    for param in getattr(command, "params", []):
        if param.name == STRAY:
            param.get_usage_pieces = lambda ctx: []
    if not any("--retry-errors" in getattr(p, "opts", ()) for p in getattr(command, "params", [])):
        return
    parse = command.parse_args

    def parse_args(ctx, args):
        args = list(args)
        for i, arg in enumerate(args):
            if arg == "--":
                break
            if arg == "--retry-errors" and (i + 1 == len(args) or args[i + 1].startswith("-")):
                args.insert(i + 1, RETRY_FLAG_ALONE)
        return parse(ctx, args)

    command.parse_args = parse_args


def _shard(text: str | None) -> Shard | None:
    return Shard.parse(text) if text else Shard.from_slurm()


def stage_help(lead: str | None = None, *, reads: str, writes: str, example: str) -> tuple[str, str]:
    """(help, epilog) in the shape every stage's --help shares: what it reads and what it writes, under
    `lead` (none: under the command table's summary, as `command(details=...)`), and its example."""
    paragraphs = [lead] if lead else []
    help_text = "\n\n".join([*paragraphs, f"[bold]Reads:[/bold] {reads}", f"[bold]Writes:[/bold] {writes}"])
    return help_text, f"Example: [cyan]{example}[/cyan]"


def command_settings(function: Callable, summary: str) -> dict[str, Any]:
    """typer's settings of a command that stage_command or command made, given its one-line summary from
    the command table (cli/app.py): the line `vi --help` lists, and the first paragraph of the command's
    own --help, above its details, unless the command wrote a whole help of its own."""
    settings = dict(function.typer_command)
    details = settings.pop("details", None)
    if settings.get("help") is None:
        settings["help"] = f"{summary}\n\n{details}" if details else summary
    return {**settings, "short_help": summary}


CONTEXT_PARAM = "vi_context"


def command_name(ctx: typer.Context | None = None) -> str:
    """`vi NAME` as the user typed it (`vi judge match`), for messages: the command table names a
    command, so the command does not repeat its own name. Set when a command starts."""
    if ctx is not None:
        names = []
        while ctx.parent is not None:
            names.append(ctx.info_name or "")
            ctx = ctx.parent
        _running[0] = " ".join(["vi", *reversed(names)])
    return _running[0]


_running = ["vi"]
_CONTEXT = inspect.Parameter(CONTEXT_PARAM, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)


def _with_config(fn: Callable, config: type | None, skip: tuple[str, ...], shared: list[inspect.Parameter]):
    """fn's own parameters (less `opts`/`config` and the shared ones), then its config's options, then
    `shared`; and a function that turns the parsed keywords back into (config, own keywords)."""
    names = {p.name for p in shared}
    hints = typing.get_type_hints(fn, include_extras=True)  # in fn's module, not this one
    own = [p.replace(annotation=hints.get(p.name, p.annotation), kind=inspect.Parameter.KEYWORD_ONLY)
           for p in inspect.signature(fn).parameters.values()
           if p.name not in ("opts", "config") and p.name not in names]
    from_config = config_parameters(config, skip=skip) if config is not None else []

    def split(kwargs: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
        if config is None:
            return kwargs
        values = take_values(config, kwargs, skip=skip)
        return {**kwargs, "config": config(**values, **fixed)}

    return own + from_config + shared, split


STRAY = "stray_arguments"
_STRAY = inspect.Parameter(STRAY, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
    Optional[list[str]], typer.Argument(hidden=True, show_default=False, metavar="")])


def _takes_arguments(params: list[inspect.Parameter]) -> bool:
    return any(isinstance(meta, typer.models.ArgumentInfo)
               for p in params for meta in typing.get_args(p.annotation)[1:])


def refuse_stray(name: str, stray: list[str] | None) -> None:
    """A stage that reads records only, given a path where it takes none (`vi transcribe video.mp4`):
    say where records come from, and, for a video, which command takes it, instead of click's
    'unexpected extra argument'."""
    if not stray:
        return
    first = Path(stray[0])
    if first.is_file():
        from vi.core.records import NotRecords, SNIFF_BYTES, refuse_binary

        with open(first, "rb") as handle:
            try:
                refuse_binary(handle.read(SNIFF_BYTES), first, name.removeprefix("vi "))
            except NotRecords as exc:
                raise ValueError(f"it takes no file arguments, it reads records (stdin or --input); "
                                 f"{stray[0]} is {str(exc).split(' is ', 1)[1]}") from None
        raise ValueError(f"it takes no file arguments: give a records file with --input "
                         f"({name} -i {stray[0]}) or on stdin")
    raise ValueError(f"it takes no arguments (got {' '.join(stray)[:200]!r}): it reads records from "
                     f"stdin or --input FILE; see {name} --help")


def _typer_signature(command: Callable, params: list[inspect.Parameter]) -> None:
    params = [_CONTEXT, *params]  # typer hands the command its context: its name for messages
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {p.name: p.annotation for p in params}


def stage_command(*, reads: str, writes: str, example: str, config: type | None = None,
                  models: bool | str | None = None):
    """Make `fn(opts, [config,] **own) -> Report` a record stage: the record-contract options added,
    the options of `config` (a dataclass of vi.core.config options) built into `config=`, the outcome
    mapped to the documented exit code. Its name and one-line summary are the ones the command table
    (cli/app.py) gives it; its --help says what it reads and writes under that summary.

    A config field named seed takes --seed; device and dtype are the shared model-placement options
    (models=True adds --device and --dtype, models="device" only --device; by default what the config
    has), so every stage spells them the same.
    """
    fields = {f.name for f in dataclasses.fields(config)} if config is not None else set()
    if models is None:
        models = True if "dtype" in fields else "device" if "device" in fields else False
    placement = _MODEL if models is True else [_MODEL[0]] if models == "device" else []
    extra = _COMMON + placement
    shared = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=a, default=d) for n, a, d in extra]
    from_contract = tuple(n for n in ("seed", "device", "dtype") if n in fields)

    def decorate(fn):
        params, split = _with_config(fn, config, from_contract, shared)
        if not _takes_arguments(params):  # a path given anyway gets a message that says where it goes
            params = [*params, _STRAY]
        # With a config, the placement options go to it; fn receives them too only where it names them.
        config_only = {n for n, _, _ in placement
                       if config is not None and n not in inspect.signature(fn).parameters}

        @functools.wraps(fn)
        def command(**kwargs):
            name = command_name(kwargs.pop(CONTEXT_PARAM, None))
            stray = kwargs.pop(STRAY, None)
            common = {n: kwargs.pop(n) for n, _, _ in _COMMON}
            placed = {n: kwargs.pop(n) if n in config_only else kwargs[n] for n, _, _ in placement}
            claim_stdout()  # before any library can print: stdout is for records only
            setup_logging(common["verbose"])
            try:
                refuse_stray(name, stray)
                if not 0 <= common["seed"] < MAX_SEED:
                    raise ValueError(f"--seed {common['seed']} is out of range: give a whole number "
                                     f"from 0 to {MAX_SEED - 1} (the engines' seeds are 32-bit)")
                opts = StreamOptions(
                    input=common["input"], output=common["output"], resume=common["resume"],
                    overwrite=common["overwrite"], shard=_shard(common["shard"]),
                    strict=common["strict"], quiet=common["quiet"],
                    seed=common["seed"], retry_errors=retry_kinds(common["retry_errors"]),
                    allow_mixed=common["allow_mixed"])
                seed_everything(opts.seed)
                contract = {"seed": opts.seed, **placed}
                arguments = split(kwargs, {n: contract[n] for n in from_contract})
                opts.fingerprint = fingerprint(arguments.get("config"))
                report = fn(opts, **arguments)
            except SetupError as exc:
                stderr.print(f"[red]{name}: cannot start:[/red] {escape(str(exc))}", highlight=False)
                raise typer.Exit(EXIT_SETUP) from None
            except (ValueError, OSError) as exc:  # bad options, -i/-o paths we cannot use, a full disk
                stderr.print(f"[red]{name}:[/red] {escape(os_message(exc))}", highlight=False)
                raise typer.Exit(EXIT_USAGE) from None
            except KeyboardInterrupt:  # Ctrl-C: what is in --output is whole lines, resumable
                stderr.print(f"[red]{name}: interrupted[/red]; the records written so far are "
                             "complete: rerun with --resume to finish", highlight=False)
                raise typer.Exit(EXIT_INTERRUPTED) from None
            raise typer.Exit(report.exit_code if isinstance(report, Report) else int(report or 0))

        _typer_signature(command, params)
        details, epilog = stage_help(reads=reads, writes=writes, example=example)
        command.typer_command = {"details": details, "epilog": epilog}
        command.stage_function = fn  # the plain function, for tests and scripts
        return command

    return decorate


def record_stage_command(spec: RecordStage):
    """The command of a RecordStage: its config's options, the records of --input, its process."""

    @stage_command(reads=spec.reads, writes=spec.writes, example=spec.example, config=spec.config)
    def run(opts: StreamOptions, config):
        # The config was checked when built, before the stream starts: a bad option is exit 2 and a
        # missing model exit 5, with nothing written; models load on the first record that needs them.
        return run_stage(spec.stage(config), read_records(opts.input, spec.name), opts,
                         total=lambda: count_file(opts.input, opts.shard))

    return run


def command(*, details: str | None = None, help: str | None = None, epilog: str | None = None,
            config: type | None = None, **typer_kwargs: Any):
    """Make `fn([config,] **own)` a command that is not a record stage (vi eval, vi train): its
    config's options built into `config=` as stage_command does; its body runs through run_command
    for the stages' exit codes. Its --help is the command table's summary with `details` under it, or
    `help`, a whole text whose first paragraph says more than the summary that `vi --help` lists."""

    def decorate(fn):
        params, split = _with_config(fn, config, (), [])

        @functools.wraps(fn)
        def wrapper(**kwargs):
            command_name(kwargs.pop(CONTEXT_PARAM, None))
            with exit_codes():  # the config is checked before the body: a bad option exit 2, a missing model 5
                kwargs = split(kwargs, {})
            return fn(**kwargs)

        _typer_signature(wrapper, params)
        wrapper.typer_command = {"details": details, "help": help, "epilog": epilog, **typer_kwargs}
        return wrapper

    return decorate


@contextlib.contextmanager
def exit_codes():
    """The stages' exit codes for what fails in a command that is not a record stage: 5 for a
    missing model or a setup failure, 2 for input or options it cannot use (the message names
    file and line)."""
    name = command_name()
    try:
        yield
    except SetupError as exc:
        stderr.print(f"[red]{name}: cannot start:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_SETUP) from None
    except RecordError as exc:  # e.g. frames that cannot be decoded: here, nothing to go on without
        stderr.print(f"[red]{name}:[/red] {escape(exc.message)}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    except (ValueError, OSError) as exc:  # BenchmarkFileError is a ValueError
        stderr.print(f"[red]{name}:[/red] {escape(os_message(exc))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None


def run_command(body: Callable[[], None]) -> None:
    """Run a command that is not a record stage (vi eval, vi predict) with the stages' exit
    codes (`exit_codes`), and 0 when a downstream reader such as `head` stops early."""
    claim_stdout()  # stdout carries only the result: pycocoevalcap, torch and llama.cpp print
    setup_logging(False)
    try:
        with exit_codes():
            body()
    except DownstreamClosed:
        pass
    raise typer.Exit(EXIT_OK)
