"""Progress and logs on stderr (stdout is reserved for JSONL)."""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.logging import RichHandler

if TYPE_CHECKING:
    from rich.progress import Progress

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


PROGRESS_SECONDS_ENV = "VI_PROGRESS_SECONDS"  # how often a log line is written when stderr is no terminal
DEFAULT_PROGRESS_SECONDS = 30.0


class LogProgress:
    """Progress for a batch log (a Slurm job's stderr, a make target's pipe): a bar redrawn in place
    means nothing in a file, and rich draws none there, so a long stage would print nothing until it
    ends. Instead, one line every `every` seconds: `vi STAGE: 120/500 records, 0.85 rec/s, eta 7m27s`.
    The same calls as rich's Progress, as the driver makes them."""

    def __init__(self, every: float, clock=time.monotonic):
        self.every, self.clock = every, clock
        self.name, self.total, self.count = "", None, 0
        self.start = self.last = 0.0

    def __enter__(self) -> LogProgress:
        self.start = self.last = self.clock()
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, description: str, total: int | None = None) -> int:
        self.name, self.total = description, total
        return 0

    def advance(self, task: int, advance: int = 1) -> None:
        self.count += advance
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            stderr.print(self.line(now), highlight=False, markup=False)

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.count / elapsed
        done = f"{self.count}/{self.total}" if self.total is not None else str(self.count)
        text = f"vi {self.name}: {done} records, {rate:.2f} rec/s, {_clock(elapsed)} elapsed"
        if self.total is not None and rate > 0:
            text += f", eta {_clock(max(self.total - self.count, 0) / rate)}"
        return text


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def make_progress(quiet: bool) -> Progress | LogProgress:
    if not quiet and not stderr.is_terminal:
        try:
            every = float(os.environ.get(PROGRESS_SECONDS_ENV, DEFAULT_PROGRESS_SECONDS))
        except ValueError:
            every = DEFAULT_PROGRESS_SECONDS
        return LogProgress(max(every, 0.0))
    # rich.progress (with rich.live and the spinners) is imported only here, where a bar is drawn: every
    # command imports this module, and its --help, a batch log and a quiet run draw none (issue 35).
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, SpinnerColumn, Task,
                               TextColumn, TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Records per second, the number a user sizes an array job with."""

        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:.2f} rec/s" if speed else "-- rec/s", style="progress.data.speed")

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
