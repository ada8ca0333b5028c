"""Command-line options built from a config dataclass's fields (vi.core.config), so an option's
spelling, default, help and panel are declared once, on the field.

`config_parameters(Config)` turns each option field into a typer parameter; `build_config(Config,
values)` turns the parsed values back into the config. `stage_command` and `command` (cli/stage.py)
use the two to give a command the options of its config: the function then receives `config=`
ready made, and still declares its own parameters (a positional path, say) the usual way.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
from typing import Annotated, Any, Optional

import typer

from vi.core.config import MISSING, cli_fields, long_flag

ALIAS_PREFIX = "alias__"  # the hidden parameters that carry an option's old spelling
_OWN_KEYS = ("help", "panel", "flag", "short", "hidden_aliases", "argument", "cli", "parse", "cli_type",
             "cli_default", "choices")


def _cli_type(hint: Any) -> Any:
    """The type typer parses for a field of type `hint`: tuples are repeated options (lists), and
    `X | None` is Optional[X]."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in args if a is not type(None)]
        inner = _cli_type(rest[0]) if len(rest) == 1 else str
        return Optional[inner] if type(None) in args else inner
    if origin in (tuple, list):
        return list[args[0] if args else str]
    return hint


def _choice_type(field: dataclasses.Field, hint: Any) -> Any:
    """An Enum of the field's `choices`, for typer to list them in --help (<a|b|c>) and refuse others as a usage
    error (take_values hands the config the value, not the member); `hint` where none are declared."""
    choices = field.metadata.get("choices")
    if not choices:
        return hint
    members = enum.Enum(field.name, [(str(value), str(value)) for value in choices], type=str)
    return Optional[members] if type(None) in typing.get_args(hint) else members


def _flags(field: dataclasses.Field, hint: Any) -> list[str]:
    meta, flag = field.metadata, long_flag(field)
    if hint is bool and not meta.get("flag"):
        flag = f"{flag}/--no-{flag[2:]}"
    return [flag, *([meta["short"]] if meta.get("short") else [])]


def _default(field: dataclasses.Field) -> Any:
    if "cli_default" in field.metadata:  # a field with parse=: its default as the command line spells it
        return field.metadata["cli_default"]
    if field.default is not MISSING:
        value = field.default
    elif field.default_factory is not MISSING:
        value = field.default_factory()
    else:
        return inspect.Parameter.empty  # a required option
    return list(value) if isinstance(value, tuple) else value


def config_parameters(config: type, *, skip: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """One keyword-only typer parameter per option field of `config` (and one hidden parameter per
    old spelling), in declaration order, except the fields named in `skip`."""
    hints = typing.get_type_hints(config)
    params = []
    for field in cli_fields(config):
        if field.name in skip:
            continue
        meta = field.metadata
        extra = {k: v for k, v in meta.items() if k not in _OWN_KEYS}
        hint = meta.get("cli_type", _choice_type(field, _cli_type(hints[field.name])))
        if meta.get("argument"):
            info = typer.Argument(help=meta["help"], rich_help_panel=meta.get("panel"), **extra)
        else:
            info = typer.Option(*_flags(field, hint), help=meta["help"], rich_help_panel=meta.get("panel"), **extra)
        params.append(inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY,
                                        annotation=Annotated[hint, info], default=_default(field)))
        for n, alias in enumerate(meta.get("hidden_aliases", ())):
            hidden = typer.Option(alias, hidden=True, show_default=False, **{
                k: v for k, v in extra.items() if k in ("metavar", "min", "max", "exists", "file_okay", "dir_okay")})
            params.append(inspect.Parameter(f"{ALIAS_PREFIX}{n}__{field.name}", inspect.Parameter.KEYWORD_ONLY,
                                            annotation=Annotated[Optional[hint], hidden], default=None))
    return params


def take_values(config: type, kwargs: dict[str, Any], *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Pop the parsed values of `config`'s options out of a command's keyword arguments (an old
    spelling, when given, stands for its option), each through its field's `parse`."""
    values = {}
    for field in cli_fields(config):
        if field.name in skip:
            continue
        value = kwargs.pop(field.name)
        for key in [k for k in kwargs if k.startswith(ALIAS_PREFIX) and k.endswith(f"__{field.name}")]:
            old = kwargs.pop(key)
            if old is not None and old != []:
                value = old
        parse = field.metadata.get("parse")
        if field.metadata.get("choices") and isinstance(value, enum.Enum):  # _choice_type's member: its value
            value = value.value
        if parse is not None:
            value = parse(value)
        elif isinstance(value, list) and typing.get_origin(typing.get_type_hints(config)[field.name]) is tuple:
            value = tuple(value)
        values[field.name] = value
    return values
