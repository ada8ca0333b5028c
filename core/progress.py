"""Progress and logs on stderr (stdout is reserved for JSONL)."""

from __future__ import annotations

import logging

from rich.console import Console
from rich.logging import RichHandler
from rich.text import Text
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

# soft_wrap: a message keeps its words whole in a log file, instead of folding at 80 columns
stderr = Console(stderr=True, soft_wrap=True)
log = logging.getLogger("vi")


def setup_logging(verbose: bool = False) -> None:
    if not log.handlers:
        handler = RichHandler(console=stderr, show_path=False, show_time=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.DEBUG if verbose else logging.INFO)


class RateColumn(ProgressColumn):
    """Records per second, the number a user sizes an array job with."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:.2f} rec/s" if speed else "-- rec/s", style="progress.data.speed")


def make_progress(quiet: bool) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=stderr,
        disable=quiet,
        transient=False,
    )
