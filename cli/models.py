"""`vi models`: every model vi knows, its role and source, and whether it is here."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from vi.cli.stage import command
from rich.console import Console
from rich.table import Table

from vi.core.models.catalog import CATALOG


@command()
def models_command(
    as_json: Annotated[bool, typer.Option("--json", help="JSONL on stdout instead of a table.")] = False,
) -> None:
    rows = []
    for spec in CATALOG.values():
        rows.append({"alias": spec.alias, "role": spec.role, "format": spec.format,
                     "embedded": spec.embedded, "available": spec.available(),
                     "license": spec.license, "summary": spec.summary, "install": spec.install})
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    # The alias and the install command are what a user copies: never cut, at any terminal width.
    # The alias stays on one line in the table; install commands follow it on lines of their own,
    # unwrapped (the terminal folds a long one, and copying it gives the whole command).
    console = Console()
    table = Table(title="vi models", show_lines=False)
    table.add_column("alias", no_wrap=True, min_width=max(len(row["alias"]) for row in rows))
    for column in ("role", "format", "source", "here"):
        table.add_column(column, overflow="fold")
    for row in rows:
        where = "PyPI" if row["embedded"] else "web" if row["install"].startswith("a web file") else "hub cache"
        table.add_row(row["alias"], row["role"], row["format"], where,
                      "[green]yes[/green]" if row["available"] else "[red]no[/red]")
    console.print(table)
    missing = [row for row in rows if not row["available"]]
    if missing:
        console.print("How to get the models not here:", highlight=False)
        for row in missing:
            console.print(f"  {row['alias']}: {row['install']}", soft_wrap=True, highlight=False, markup=False)
