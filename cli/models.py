"""`vi models`: every model vi knows, its role and source, and whether it is here."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from vi.cli.app import app
from vi.core.models.catalog import CATALOG


@app.command("models")
def models_command(
    as_json: Annotated[bool, typer.Option("--json", help="JSONL on stdout instead of a table.")] = False,
) -> None:
    """List the models vi knows: role, format, source, licence, and whether available here."""
    rows = []
    for spec in CATALOG.values():
        rows.append({"alias": spec.alias, "role": spec.role, "format": spec.format,
                     "embedded": spec.embedded, "available": spec.available(),
                     "license": spec.license, "summary": spec.summary, "install": spec.install})
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    table = Table(title="vi models", show_lines=False)
    for column in ("alias", "role", "format", "source", "here", "how to get it"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["alias"], row["role"], row["format"],
                      "embedded (PyPI)" if row["embedded"] else "hub cache",
                      "[green]yes[/green]" if row["available"] else "[red]no[/red]",
                      "" if row["available"] else row["install"])
    Console().print(table)
