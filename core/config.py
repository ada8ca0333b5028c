"""Options declared once: a config dataclass field carries its default and its help.

A stage's (or a trainer's) config dataclass is the one place where each of its options is
declared, as TRL declares its arguments: `field(default, metadata={"help": ...})`. `option()`
is that `field` with the metadata spelled out, and `vi.cli.options` builds the command-line
options from these fields. Nothing here imports typer: a config stays a plain dataclass that a
script or a test builds with keywords.

    @dataclass(frozen=True, kw_only=True)
    class ExtractConfig(LLMConfig):
        overlap_s: float = option(30.0, flag="--overlap", min=0.0,
                                  help="Seconds of transcript shown on each side of a chunk.")

Metadata keys (all optional but `help`):
- `help`: the option's help text; `panel`: the --help panel it is listed in;
- `flag`: its spelling (default: `--` + the field name with dashes), `short`: e.g. "-o";
- `hidden_aliases`: old spellings still accepted but not listed (kept for one release);
- `argument`: a positional argument instead of an option;
- `parse`: a function from what the command line parsed to the field's value (a comma list into a
  tuple), with `cli_type` the type the command line parses and `cli_default` its default as the
  command line spells it, when they differ from the field's;
- `choices`: the values the option takes (a tuple, or a dict whose keys they are): `--help` lists them, the
  command line refuses others, and `check_choices` refuses them for a config built in code;
- `cli=False`: a field the command line never sets (derived, or set by the command itself);
- anything else (`min`, `max`, `metavar`, `exists`, `file_okay`, `show_default`, ...) is handed to
  the command-line option as it is.
"""

from __future__ import annotations

import dataclasses
from typing import Any

MISSING: Any = dataclasses.MISSING


def option(default: Any = MISSING, *, help: str, default_factory: Any = MISSING, choices: Any = None,
           **meta: Any) -> Any:
    """A dataclass field that is also a command-line option (see the module's docstring)."""
    meta["help"] = help
    if choices is not None:
        meta["choices"] = tuple(choices)  # a dict's keys, in order
    return dataclasses.field(default=default, default_factory=default_factory, metadata=meta)


def internal(default: Any = MISSING, *, default_factory: Any = MISSING, init: bool = True) -> Any:
    """A config field that is not an option (derived in __post_init__, or set by code)."""
    return dataclasses.field(default=default, default_factory=default_factory, init=init,
                             compare=init, metadata={"cli": False})


def with_default(config: type, name: str, default: Any) -> Any:
    """Field `name` of `config` with another default, its help and spelling kept: a stage whose
    context window is smaller than the shared default says so once, without restating the help."""
    base = {f.name: f for f in dataclasses.fields(config)}[name]
    return dataclasses.field(default=default, metadata=dict(base.metadata))


def cli_fields(config: type) -> list[dataclasses.Field]:
    """The fields of `config` that are command-line options, in declaration order."""
    return [f for f in dataclasses.fields(config) if f.init and f.metadata.get("cli", True)]


def long_flag(field: dataclasses.Field) -> str:
    """A field's option as spelled on the command line: its `flag`, else `--` + its name with dashes (a bool
    whose flag is not given gets `--no-` + that name beside it: vi.cli.options)."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def check_choice(flag: str, value: Any, allowed: Any) -> None:
    """Refuse `value` for the option `flag` unless it is one of `allowed` (a tuple, or a dict's keys):
    one message for every choice option, naming the option, what it takes and what was given."""
    if value not in allowed:
        raise ValueError(f"{flag} must be one of {', '.join(allowed)}, got {value!r}")


def check_choices(config: Any) -> None:
    """Refuse, with check_choice's message, a value of an option declared with `choices` that is not one of
    them (None passes where None is the field's default: the option was not given)."""
    for field in cli_fields(type(config)):
        allowed = field.metadata.get("choices")
        value = getattr(config, field.name)
        if allowed is not None and not (value is None and field.default is None):
            check_choice(long_flag(field), value, allowed)


def defaults(config: type) -> dict[str, Any]:
    """Each option's declared default, by field name (fields without a default left out)."""
    out = {}
    for f in dataclasses.fields(config):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out
