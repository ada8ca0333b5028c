"""`make bench` section l: a command that builds no model starts like a Unix tool.

Each command runs as a fresh process, as a user or an array job runs it: `vi --version`, `vi
--help`, a stage's `--help`, and the model-free stages on one record (probe, view, status, export,
eval), against a bare `python -c "import typer, rich"` (what any typer CLI pays), alternating
round by round, with a plain typer app laid out as `vi probe`'s help (no vi code) asked for
its --help: typer's rich help (rich.markdown, markdown-it, one table row per option) is the floor of
any command's own --help. Measured: wall seconds (goal: within 3x of the bare import) and peak RSS (goal:
under 150 MiB). Which modules they import is pinned by tests/cli/test_startup.py, not here.

    python -m vi.evaluation.bench.startup --repeats 5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vi.evaluation.bench.tools import Row, alternate, median, peak_rss_kib, progress, run_checked, vi_command, walls

TIME_TARGET = 3.0  # x the bare import
RSS_GOAL_MIB = 150.0
BARE = "python -c 'import typer, rich'"
PROBE_OWN, PROBE_SHARED = 2, 11  # vi probe's options: its own (with one argument), the record stream's panel
TYPER_HELP = f"a plain typer app's --help (1 argument, {PROBE_OWN} + {PROBE_SHARED} options in 2 panels)"


def plain_typer_app(path: Path) -> Path:
    """A typer app laid out as vi probe's help is (an argument, its own options, a second panel of the shared
    ones), and nothing else."""
    options = [f'o{i}: int = typer.Option({i}, "--o{i}", help="an option with a help text of a usual length, '
               f'number {i}"{", rich_help_panel=" + repr("Shared") if i >= PROBE_OWN else ""})'
               for i in range(PROBE_OWN + PROBE_SHARED)]
    params = ",\n    ".join(['paths: list[str] = typer.Argument(None, help="Files or directories.")', *options])
    path.write_text(f"import typer\napp = typer.Typer(add_completion=False)\n\n\n@app.command()\ndef main(\n    {params},\n):\n"
                    f'    """A command."""\n\n\napp()\n')
    return path


def commands(video: Path, work: Path) -> dict[str, tuple[list[str], Path | None]]:
    """{label: (argv, stdin)}: the commands measured, their inputs made in `work`."""
    vi = vi_command()
    probed = work / "probed.jsonl"
    run_checked([*vi, "probe", str(video), "-q"], stdout=probed)
    steps = work / "steps.jsonl"
    steps.write_text(json.dumps({"id": "s", "video": str(video), "duration": 10.0, "steps": {
        "title": "How to", "items": [{"text": f"Step {i}.", "start": 2.0 * i, "end": 2.0 * i + 2,
                                      "frame": {"time": 2.0 * i + 1, "score": 0.5}} for i in range(2)]}}) + "\n")
    options = [[f"v{i}_1_2", f"w{i}_3_4"] for i in range(4)]
    gt, pred = work / "gt.jsonl", work / "pred.jsonl"
    gt.write_text(json.dumps({"difference": "d", "category": "Technique", "answer": options[0],
                              "options": options}) + "\n")
    pred.write_text(json.dumps({"scores": [0.9, 0.1, 0.2, 0.3]}) + "\n")
    return {
        BARE: ([sys.executable, "-c", "import typer, rich"], None),
        TYPER_HELP: ([sys.executable, str(plain_typer_app(work / "plain_typer_app.py")), "--help"], None),
        "vi --version": ([*vi, "--version"], None),
        "vi --help": ([*vi, "--help"], None),
        "vi probe --help": ([*vi, "probe", "--help"], None),
        "vi train stepdiff --help": ([*vi, "train", "stepdiff", "--help"], None),
        "vi probe FILE": ([*vi, "probe", str(video), "-q"], None),
        "vi view RECORDS": ([*vi, "view", str(probed), "--out", str(work / "report"), "-q"], None),
        "vi status OUTPUT": ([*vi, "status", str(probed), "--json"], None),
        "vi export showhowto": ([*vi, "export", "showhowto", "-q", "--out", str(work / "ds"), "--overwrite"], steps),
        "vi eval diffmcq": ([*vi, "eval", "diffmcq", "--gt", str(gt), "--pred", str(pred)], None),
    }


def bench_startup(video: Path, work: Path, repeats: int = 5) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    runs = commands(video, work)
    for argv, stdin in runs.values():  # untimed: the files in the page cache, any first-run cache made
        run_checked(argv, stdin=stdin)
    progress.print(f"  {len(runs)} commands, {repeats} alternating rounds")
    samples = alternate({label: (lambda a=argv, s=stdin: run_checked(a, stdin=s))
                         for label, (argv, stdin) in runs.items()}, repeats)
    return {"repeats": repeats, "wall_s": {label: walls(s) for label, s in samples.items()},
            "peak_rss_kib": {label: peak_rss_kib(argv, stdin) for label, (argv, stdin) in runs.items()}}


def startup_rows(result: dict) -> list[Row]:
    bare_s = median(result["wall_s"][BARE])
    bare_mib = result["peak_rss_kib"][BARE] / 1024
    rows = []
    for label, seconds in result["wall_s"].items():
        if label == BARE:
            continue
        mib = result["peak_rss_kib"][label] / 1024
        rows += [Row(f"start-up: {label}", median(seconds), bare_s, "s", TIME_TARGET,
                     f"baseline = {BARE}; median of {len(seconds)}"),
                 Row("  peak RSS", mib, RSS_GOAL_MIB, "MiB", 1.0,
                     f"baseline = the {RSS_GOAL_MIB:.0f} MiB goal; the bare import peaks at {bare_mib:.0f} MiB")]
    return rows


def main(argv: list[str] | None = None) -> None:
    import tempfile

    from rich.console import Console

    from vi.evaluation.bench.tools import build_table
    from vi.evaluation.demo.samples import make_tea_sample

    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.bench.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=Path, default=Path("out/sample"), help="folder of the tea sample")
    parser.add_argument("--repeats", type=int, default=5, help="alternating rounds (median)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vi-bench-startup-") as tmp:
        result = bench_startup(make_tea_sample(args.sample), Path(tmp), args.repeats)
    Console(width=150).print(build_table(startup_rows(result)))


if __name__ == "__main__":
    main()
