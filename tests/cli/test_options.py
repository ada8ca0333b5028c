"""Options declared once: a config dataclass's fields become a command's options (cli/options.py)."""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from vi.cli.app import CommandTable
from vi.cli.stage import command, stage_command
from vi.core.config import check_choices, internal, option, with_default
from vi.core.stream import StreamOptions


class Colour(str, enum.Enum):
    red = "red"
    blue = "blue"


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseConfig:
    n_ctx: int = option(4096, help="Context window in tokens.", panel="Shared", min=16)
    llm: str = option("tiny-llm", flag="--llm", hidden_aliases=("--model",), help="The LLM.", panel="Shared")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyConfig(BaseConfig):
    n_ctx: int = with_default(BaseConfig, "n_ctx", 2048)
    overlap_s: float = option(30.0, flag="--overlap", help="Seconds of context.")
    fields: tuple[str, ...] = option((), metavar="A[,B]", cli_type=str | None, cli_default=None,
                                     parse=lambda text: tuple(t for t in (text or "").split(",") if t),
                                     help="Field names, comma-separated.")
    prompt: Path | None = option(None, help="A prompt file.")
    verbose_reply: bool = option(False, help="Keep the whole reply.")
    pace: str = option("fast", choices=("fast", "slow"), help="How fast.")
    colour: Colour = option(Colour.red, help="A field typed as an Enum gets its member.")
    device: str = "auto"
    seed: int = 0
    derived: str = internal(init=False)

    def __post_init__(self) -> None:
        if self.overlap_s < 0:
            raise ValueError("--overlap must not be negative")
        check_choices(self)
        object.__setattr__(self, "derived", f"{self.llm}/{self.n_ctx}")


seen: list[ToyConfig] = []


@stage_command(reads="anything", writes="nothing", example="vi toy", config=ToyConfig)
def toy_stage(opts: StreamOptions, config: ToyConfig):
    seen.append(config)
    return 0


@dataclasses.dataclass(kw_only=True)
class RunToy:
    output: Path = option(help="Run folder.", short="-o", show_default=False)
    steps: int = option(10, help="Optimizer steps.", min=1)


@command(help="A toy trainer.", config=RunToy)
def toy_train(config: RunToy):
    seen.append(config)


def run(function, *args: str, command: tuple[str, ...] = ("toy",), **kwargs):
    """`vi toy ARGS` with `function` as the table's toy command."""
    module = types.ModuleType("toy_commands")
    module.toy = function
    sys.modules["toy_commands"] = module
    app = typer.Typer(cls=ToyTable, rich_markup_mode="rich")
    app.callback()(lambda: None)
    return CliRunner().invoke(app, [*command, *args], env={"COLUMNS": "200"}, **kwargs)


class ToyTable(CommandTable):
    table = {"toy": ("toy_commands:toy", "A toy command.")}
    panels = {}


def test_each_field_is_an_option_with_its_default_help_and_panel():
    out = run(toy_stage, "--help").output
    for text in ("--n-ctx", "2048", "Context window in tokens.", "Shared", "--llm", "tiny-llm", "--overlap",
                 "30.0", "--fields", "A[,B]", "--prompt", "--verbose-reply", "--no-verbose-reply",
                 "--device", "--seed", "--resume", "--shard"):
        assert text in out, text
    assert "--model" not in out  # the old spelling works but is not listed
    assert "--derived" not in out and "--text" not in out


def test_the_command_receives_the_config_built_from_its_options():
    seen.clear()
    assert run(toy_stage, input="").exit_code == 0
    assert seen[-1].fields == () and seen[-1].llm == "tiny-llm" and seen[-1].n_ctx == 2048
    done = run(toy_stage, "--llm", "other", "--overlap", "1.5", "--fields", "a,b", "--seed", "7", "--device", "cpu",
               input="")
    assert done.exit_code == 0, done.output
    config = seen[-1]
    assert (config.llm, config.n_ctx, config.overlap_s, config.fields) == ("other", 2048, 1.5, ("a", "b"))
    assert (config.seed, config.device, config.derived) == (7, "cpu", "other/2048")


def test_an_old_spelling_stands_for_its_option():
    seen.clear()
    assert run(toy_stage, "--model", "old-name", input="").exit_code == 0
    assert seen[-1].llm == "old-name"


def test_a_config_that_refuses_its_values_is_a_usage_error_naming_the_option():
    done = run(toy_stage, "--overlap", "-1", input="")
    assert done.exit_code == 2 and "--overlap must not be negative" in done.output


def test_typer_checks_the_declared_bounds():
    done = run(toy_stage, "--n-ctx", "4", input="")
    assert done.exit_code == 2 and "--n-ctx" in done.output


def test_the_choices_declared_on_a_field_are_listed_and_the_only_values_taken():
    assert "<fast|slow>" in run(toy_stage, "--help").output
    seen.clear()
    assert run(toy_stage, "--pace", "slow", input="").exit_code == 0 and seen[-1].pace == "slow"
    done = run(toy_stage, "--pace", "medium", input="")  # the parser's refusal, before a config is built
    assert done.exit_code == 2 and "'medium' is not one of 'fast', 'slow'" in done.output and not seen[1:]
    with pytest.raises(ValueError, match="--pace must be one of fast, slow, got 'medium'"):
        ToyConfig(pace="medium")  # a config built in code refuses it too
    # the plain value for a field with choices; a field typed as an Enum still gets its member
    assert run(toy_stage, "--pace", "slow", "--colour", "blue", input="").exit_code == 0
    assert seen[-1].pace == "slow" and type(seen[-1].pace) is str and seen[-1].colour is Colour.blue


def test_a_command_that_is_not_a_stage_gets_its_config_too():
    seen.clear()
    done = run(toy_train, "-o", "runs/a", "--steps", "3")
    assert done.exit_code is None or done.exit_code == 0, done.output
    assert seen[-1] == RunToy(output=Path("runs/a"), steps=3)
    missing = run(toy_train, "--steps", "3")
    assert missing.exit_code == 2 and "--output" in missing.output


def test_the_table_gives_the_summary_that_heads_the_command_help():
    stage, trainer = run(toy_stage, "--help").output, run(toy_train, "--help").output
    assert stage.index("A toy command.") < stage.index("Reads:") < stage.index("Writes:")
    assert "A toy trainer." in trainer and "A toy command." not in trainer  # a help of its own comes whole
    listed = run(toy_stage, "--help", command=()).output
    assert "toy" in listed and "A toy command." in listed


def test_the_table_lists_every_command_once_and_each_loads():
    from vi.cli.app import COMMANDS, Group, command_names, load

    names = command_names()
    assert len(names) == len(set(names))
    groups = {name for name, target in COMMANDS.items() if isinstance(target, Group)}
    assert {"probe", "extract-steps", "judge match", "train stepdiff", "eval framecap"} <= set(names)
    assert not groups & set(names)  # a group is listed by its commands
    entries = [(name, entry) for name, entry in COMMANDS.items() if not isinstance(entry, Group)]
    entries += [(name, entry) for group in COMMANDS.values() if isinstance(group, Group)
                for name, entry in group.commands.items()]
    for name, (target, summary) in entries:
        built = load(target, name, summary)
        assert built.short_help == summary and built.help and built.params, name
