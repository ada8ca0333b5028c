"""`make bench` section m: a command that builds no model starts like a Unix tool.

Each command runs as a fresh process, as a user or an array job runs it: `vi --version`, `vi
--help`, a stage's `--help`, and the model-free stages on one record (probe, view, status, export,
eval), against a bare `python -c "import typer, rich"` (what any typer CLI pays), alternating
round by round. Each `--help` measured has a typer twin beside it: a plain typer app showing the same
help (no vi code, `twin_source`), whose time is typer's rich help for that many options (rich.markdown,
markdown-it, a table row per option): the floor under that command's. Measured: wall seconds (goal:
within 3x of the bare import) and peak RSS (goal: under 150 MiB). Which modules they import is pinned
by tests/cli/test_startup.py, not here.

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
HELPS = (("probe",), ("train", "stepdiff"))  # a stage's help (13 parameters) and one of the longest (32; train showhowto has 35)


# Writes on stdout `twin_source`'s app for the command `vi ARGS...`. It runs as a program, as the bench runs every
# command: evaluation code does not import the command layer (tests/core/test_layers.py).
TWIN_SCRIPT = """\
import sys
import typer
from vi.cli.app import app
from vi.evaluation.bench.startup import twin_source
command = typer.main.get_command(app)
for word in sys.argv[1:]:
    command = command.resolve_command(typer.Context(command), [word])[1]
sys.stdout.write(twin_source(command))
"""


def write_typer_twin(words: tuple[str, ...], path: Path) -> Path:
    """Write to `path` a plain typer app that shows the help of `vi WORDS` (`twin_source`)."""
    run_checked([sys.executable, "-c", TWIN_SCRIPT, *words], stdout=path)
    return path


def twin_source(command) -> str:
    """A plain typer app (no vi code) whose --help shows what the typer `command`'s shows: the same text
    and example, the same parameters with their names, flags, types, metavars, ranges, defaults, help
    and panels. Its time is typer's own for that help (rich.markdown, markdown-it, a table row per
    option): the floor under the command's, so that the two together say what vi adds."""
    params = [_twin_param(param) for param in command.params]
    body = ",\n    ".join(params)
    settings = {"help": command.help, "epilog": command.epilog}
    return ("import enum\nfrom pathlib import Path\nimport typer\n"
            "app = typer.Typer(add_completion=False, rich_markup_mode='rich', "
            "context_settings={'help_option_names': ['-h', '--help']})\n\n\n"
            f"@app.command({', '.join(f'{k}={v!r}' for k, v in settings.items() if v)})\n"
            f"def main(\n    {body},\n):\n    pass\n\n\napp()\n")


_TWIN_TYPES = {"IntParamType": "int", "IntRange": "int", "FloatParamType": "float", "FloatRange": "float",
               "TyperPath": "Path", "BoolParamType": "bool"}


def _twin_param(param) -> str:
    """One parameter of `twin_source`'s function, declared as the command's is shown."""
    kind = _TWIN_TYPES.get(type(param.type).__name__, "str")
    if isinstance(getattr(param.type, "choices", None), (list, tuple)):  # an option's choices, typer's way: an Enum
        kind = f"enum.Enum({param.name!r}, {[(str(c), str(c)) for c in param.type.choices]!r}, type=str)"
    extra = {"help": getattr(param, "help", None), "rich_help_panel": getattr(param, "rich_help_panel", None),
             "metavar": param.metavar, "min": getattr(param.type, "min", None), "max": getattr(param.type, "max", None)}
    if kind == "Path":
        extra.update(file_okay=param.type.file_okay, dir_okay=param.type.dir_okay)
    keywords = "".join(f", {key}={value!r}" for key, value in extra.items() if value is not None)
    many = param.nargs == -1 or getattr(param, "multiple", False)
    if many:
        kind = f"list[{kind}]"
    if param.required:
        default = "..."
    elif param.default is None or many:
        default = "None"
    else:
        default = repr(param.default if kind in ("int", "float", "bool") else str(param.default))
    if param.param_type_name == "argument":
        return f"{param.name}: {kind} = typer.Argument({default}{keywords})"
    flags = list(param.opts)
    if getattr(param, "secondary_opts", None):
        flags = [f"{flags[0]}/{param.secondary_opts[0]}", *flags[1:]]
    return f"{param.name}: {kind} = typer.Option({default}, {', '.join(map(repr, flags))}{keywords})"


def help_runs(words: tuple[str, ...], work: Path) -> dict[str, tuple[list[str], Path | None]]:
    """`vi WORDS --help`, and its plain typer twin's --help (`twin_source`)."""
    name = " ".join(words)
    twin = write_typer_twin(words, work / f"typer_twin_{'_'.join(words)}.py")
    return {f"vi {name} --help": ([*vi_command(), *words, "--help"], None),
            f"  its typer twin (no vi code), vi {name} --help's floor": ([sys.executable, str(twin), "--help"], None)}


def commands(video: Path, work: Path) -> dict[str, tuple[list[str], Path | None]]:
    """{label: (argv, stdin)}: the commands measured, their inputs made in `work`."""
    vi = vi_command()
    probed = work / "probed.jsonl"
    run_checked([*vi, "probe", str(video), "-q"], stdout=probed)
    none = work / "none.jsonl"
    none.write_text("")
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
        "vi --version": ([*vi, "--version"], None),
        "vi --help": ([*vi, "--help"], None),
        **{label: argv for words in HELPS for label, argv in help_runs(words, work).items()},
        "vi probe FILE": ([*vi, "probe", str(video), "-q"], None),
        "vi view RECORDS": ([*vi, "view", str(probed), "--out", str(work / "report"), "-q"], None),
        "vi status OUTPUT": ([*vi, "status", str(probed), "--json"], None),
        # its start alone (no record), then with one: decoding the step frames and writing them is its work
        "vi export showhowto, no record": ([*vi, "export", "showhowto", "-q", "--out", str(work / "ds0"),
                                            "--overwrite"], none),
        "vi export showhowto, one record": ([*vi, "export", "showhowto", "-q", "--out", str(work / "ds"),
                                             "--overwrite"], steps),
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
        what = label if label.startswith(" ") else f"start-up: {label}"  # a twin: under its command
        rows += [Row(what, median(seconds), bare_s, "s", TIME_TARGET,
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
