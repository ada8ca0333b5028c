"""`vi status`: where a run stands, from its output files (shards of an array job too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vi.cli.stage import command, exit_codes


@command(epilog="Example: [cyan]vi status 'out/work/aligned.*.jsonl' --input videos.jsonl[/cyan]")
def status_command(
    outputs: Annotated[list[str], typer.Argument(
        help="Output files of a stage, or a quoted glob of a sharded run's outputs ('out/*.jsonl').",
        show_default=False)],
    input: Annotated[Optional[Path], typer.Option(
        "--input", "-i", help="The run's input: what is left is counted against it, per shard.")] = None,
    shards: Annotated[Optional[int], typer.Option(
        "--shards", min=1, help="How many shards the run has (default: the number of outputs when more "
        "than one): an output's shard is the one its ids fall in.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout instead of a table.")] = False,
) -> None:
    from vi.core.status import expand, status

    with exit_codes():
        found = status(expand(outputs), input, shards)
    if as_json:
        typer.echo(json.dumps(found, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table

    total = found["total"]
    table = Table(title="vi status", show_footer=True)
    columns = ("output", "shard", "done", "failed", "by kind", "left", "partial")
    footer = {"output": "total", "done": str(total["done"]), "failed": str(total["failed"]),
              "by kind": _kinds(total["failed_by_kind"]),
              "left": "" if total["left"] is None else str(total["left"]), "partial": str(total["partial"])}
    for name in columns:
        table.add_column(name, footer=footer.get(name, ""), overflow="fold",
                         justify="right" if name in ("done", "failed", "left", "partial") else "left")
    for row in found["files"]:
        table.add_row(row["output"], "" if row["shard"] is None else str(row["shard"]), str(row["done"]),
                      str(row["failed"]), _kinds(row["failed_by_kind"]),
                      "" if row["left"] is None else str(row["left"]), str(row["partial"]))
    console = Console()
    console.print(table)
    if total["input"] is not None:
        console.print(f"{total['input']} records in {input}: {total['done']} done, {total['failed']} failed, "
                      f"{total['left']} left" + "".join(
                          f"; shard {s} has no output yet ({n} records)" for s, n in total.get("not_started", {}).items()),
                      highlight=False)


def _kinds(kinds: dict[str, int]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in kinds.items())
