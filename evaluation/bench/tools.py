"""Measuring tools for `make bench`: timing, alternation, peak memory, and the ratio table.

Nothing here knows about a vi stage; `vi.evaluation.bench.run` uses these to compare each stage
with the raw library doing the same work.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

progress = Console(stderr=True, highlight=False)


# --- timing -------------------------------------------------------------------------------

@dataclass
class Sample:
    wall: float  # seconds
    cpu: float  # CPU seconds of this process and of the children it waited for


def cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def measure(fn: Callable[[], Any]) -> tuple[Sample, Any]:
    cpu, start = cpu_seconds(), time.perf_counter()
    result = fn()
    return Sample(time.perf_counter() - start, cpu_seconds() - cpu), result


def alternate(runs: dict[str, Callable[[], Any]], repeats: int,
              on_sample: Callable[[str, Sample], None] | None = None) -> dict[str, list[Sample]]:
    """Run each function `repeats` times, reversing the order every round (A B, B A, ...).

    Reversing cancels a steady drift in machine load and gives neither side the warm slot.
    """
    names = list(runs)
    samples: dict[str, list[Sample]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else names[::-1]:
            sample = measure(runs[name])[0]
            samples[name].append(sample)
            if on_sample is not None:
                on_sample(name, sample)
    return samples


def show_sample(name: str, sample: Sample) -> None:
    progress.print(f"    {name}: {sample.wall:.2f} s wall, {sample.cpu:.2f} s CPU")


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def walls(samples: list[Sample]) -> list[float]:
    return [s.wall for s in samples]


def cpus(samples: list[Sample]) -> list[float]:
    return [s.cpu for s in samples]


@contextmanager
def time_spent_in(owner: Any, name: str, spent: list[float]) -> Iterator[list[float]]:
    """Replace `owner.name` by a wrapper that appends each call's seconds to `spent`.

    `owner` is an instance or a module; the original is put back on exit (an inherited
    method by deleting the instance attribute that shadowed it).
    """
    original = getattr(owner, name)
    shadowed = name in vars(owner)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    setattr(owner, name, timed)
    try:
        yield spent
    finally:
        if shadowed:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


# --- subprocesses -------------------------------------------------------------------------

def child_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


def vi_command() -> list[str]:
    """The `vi` console script of this interpreter's environment (what a user runs)."""
    script = Path(sys.executable).parent / "vi"
    return [str(script)] if script.exists() else [sys.executable, "-m", "vi"]


def run_checked(cmd: Sequence[str], stdin: Path | None = None, stdout: Path | None = None) -> None:
    """Run `cmd` (stdin/stdout from/to files, or /dev/null); raise with its stderr on failure."""
    with open(stdin or os.devnull, "rb") as source, open(stdout or os.devnull, "wb") as sink:
        done = subprocess.run(list(cmd), stdin=source, stdout=sink, stderr=subprocess.PIPE,
                              env=child_env(), check=False)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-15:]
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n" + "\n".join(tail))


# Run in a fresh interpreter: RUSAGE_CHILDREN's ru_maxrss is the largest child ever waited
# for, so in the bench process itself it would report the whisper runs measured earlier.
_PEAK_RSS_SCRIPT = """\
import json, os, resource, subprocess, sys
cmd, stdin = json.loads(sys.argv[1]), sys.argv[2] or os.devnull
with open(stdin, "rb") as source:
    done = subprocess.run(cmd, stdin=source, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
if done.returncode != 0:
    sys.stderr.write(done.stderr.decode(errors="replace"))
    sys.exit(done.returncode)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss_kib(cmd: Sequence[str], stdin: Path | None = None) -> int:
    """Peak resident memory (KiB, Linux's ru_maxrss unit) of `cmd` and anything it waited for."""
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS_SCRIPT, json.dumps(list(cmd)),
                           str(stdin or "")], capture_output=True, text=True, env=child_env(),
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return int(done.stdout.strip().splitlines()[-1])


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def make_links(target: Path, folder: Path, count: int) -> list[Path]:
    """`count` distinct symlinks to one file: as many records, with no copies on disk."""
    folder.mkdir(parents=True, exist_ok=True)
    links = [folder / f"clip{i:04d}{target.suffix}" for i in range(count)]
    for link in links:
        link.symlink_to(target.resolve())
    return links


# --- the table ----------------------------------------------------------------------------

@dataclass
class Row:
    what: str
    vi: float | None  # the measured side (vi; or the stage at 1,000 records)
    baseline: float | None  # what it is compared with (raw library; or 10 records)
    unit: str  # "s", "ms", "MiB"
    target: float | None = None  # largest acceptable ratio, where there is one
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return ratio(self.vi, self.baseline)

    @property
    def verdict(self) -> str:
        if self.target is None or self.ratio is None:
            return ""
        return "ok" if self.ratio <= self.target else "over"

    def as_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "verdict": self.verdict}


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    digits = {"s": 2, "ms": 1, "MiB": 0}.get(unit, 2)
    return f"{value:.{digits}f} {unit}"


def build_table(rows: list[Row]) -> Table:
    table = Table(title="vi stages vs the raw libraries: ratio = vi / baseline",
                  title_justify="left")
    for header, justify in (("measurement", "left"), ("vi", "right"), ("baseline", "right"),
                            ("ratio", "right"), ("target", "right"), ("", "left"),
                            ("note", "left")):
        table.add_column(header, justify=justify)
    colours = {"ok": "green", "over": "red"}
    for row in rows:
        verdict = f"[{colours[row.verdict]}]{row.verdict}[/]" if row.verdict else ""
        table.add_row(row.what, format_value(row.vi, row.unit),
                      format_value(row.baseline, row.unit),
                      "-" if row.ratio is None else f"{row.ratio:.2f}x",
                      "" if row.target is None else f"<= {row.target:.2f}", verdict, row.note)
    return table
