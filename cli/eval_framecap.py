"""`vi eval framecap`: ProgressCaptioner's FrameCapEval (Cap and Prog per source).

The scoring lives in `vi.evaluation.progresscaptioner.framecap`; this module only parses options and
prints. It is a module of its own so that the other `vi eval` commands do not import the progression
judge that framecap reads its letters with.
"""

from __future__ import annotations

import sys

from rich.markup import escape
from rich.table import Table
from vi.cli.stage import command, run_command, stage_help
from vi.core.progress import stderr
from vi.core.records import dumps
from vi.core.sink import StdoutSink
from vi.evaluation.progresscaptioner import framecap

FRAMECAP_HELP, FRAMECAP_EPILOG = stage_help(
    "FrameCapEval (ProgressCaptioner, Table 1): progression detection (Prog) = scikit-learn's balanced accuracy "
    "of the evaluation LLM's A/B answers (vi judge progression --prompt eval) against the annotated labels, over "
    "all adjacent pairs; caption matching (Cap) = sequence-level accuracy (a sequence counts only when every "
    "frame was matched to its own caption, vi judge match). Per source (HTC, COIN, Penn&K, ...) and overall, one "
    "row per captioning model. An answer of C (uncertain), or a labelled pair the judge never answered, counts "
    "as wrong in [cyan]prog[/cyan] (the prediction is the opposite of the label, so abstaining cannot help); "
    "[cyan]prog_answered[/cyan] is the balanced accuracy over the A/B answers only (the paper's reading) and "
    "[cyan]coverage[/cyan] their share of the pairs. Records without progression, matching or labels are not "
    "scored for that metric and counted (prog_missing, cap_missing, labels_missing); records judged with "
    "--prompt pseudo are counted in pseudo_prompt, not scored; records matched on fewer frames than they have "
    "(matching_subset) are not scored for Cap: FrameCapEval matches every frame, so run vi judge match before "
    "vi judge progression.",
    reads="--pred FILE(s) or stdin: records with [cyan]captions[/cyan] (or --captions FIELD, repeatable: one row "
          "each; the row is named by its captions.model), [cyan]progression[/cyan] and [cyan]matching[/cyan], "
          "and [cyan]source[/cyan] (else the prefix of an id <source>/<idx>). Labels (1 = progression, 0 = none, "
          "one per adjacent frame pair, so frames - 1 of them): --labels FILE, JSONL {\"id\": ID, \"labels\": "
          "[1, 0, ...]}, ids matching the records' (FrameCapEval sequences: <source>/<idx>, like COIN/0004); or "
          "a JSON list shaped like the release's sequence file with a 'labels' list added to each entry ({idx, "
          "..., labels}, the source from an entry's 'source' or the file name); else each record's "
          "[cyan]progress_labels[/cyan]. [bold]The ProgressCaptioner release ships no labels[/bold]: its "
          "coin_valhs_seq.json and htc_valhs_seq.json hold {idx, action_label, n_frames, image_files, query0} "
          "only, and given as --labels they are refused (exit 2). The labels come from your own annotation or "
          "from the paper's authors. Labels of the wrong length stop the run (exit 2) naming the record, "
          "expected and found counts.",
    writes="one JSON object on stdout: {task, records, rows: {MODEL: {field, model, overall: METRICS, "
           "per_source: {SOURCE: METRICS}}}} with METRICS = {sequences, cap, cap_sequences, cap_missing, "
           "matching_subset, prog, prog_answered, pairs, pairs_answered, coverage, uncertain, pairs_missing, "
           "prog_missing, labels_missing, pseudo_prompt, positives} (fractions; null where nothing was scored); "
           "Table 1's Cap/Prog per source in percent on stderr, with the paper's figures for orientation.",
    example="vi caption-frames -i seqs.jsonl | vi judge match | vi judge progression --prompt eval | "
            "vi eval framecap --labels labels.jsonl",
)


def framecap_table(result: dict) -> Table:
    sources, rows = framecap.table_cells(result)
    table = Table(title="FrameCapEval (Cap = caption matching, Prog = progression detection, %)")
    table.add_column("model", max_width=26, overflow="fold")  # the offline captioner's name is long
    for source in [*sources, "overall"]:
        name = "All" if source == "overall" else escape(source)
        table.add_column(f"{name} Cap", justify="right", min_width=5)
        table.add_column(f"{name} Prog", justify="right", min_width=5)
    for name, cells in rows:
        table.add_row(escape(name), *cells)
    for name, figures in framecap.PAPER_TABLE_1.items():
        cells = []
        for source in [*sources, "overall"]:
            cells += [f"[dim]{v}[/dim]" for v in figures[source]] if source in figures else ["", ""]
        table.add_row(f"[dim]{escape(name)}[/dim]", *cells)
    return table


@command(help=FRAMECAP_HELP, epilog=FRAMECAP_EPILOG, config=framecap.FramecapConfig)
def framecap_command(config: framecap.FramecapConfig) -> None:
    from vi.core.records import read_records

    def body() -> None:
        if not config.pred and sys.stdin.isatty():
            raise ValueError("no records: pass --pred FILE or pipe the judged records on stdin")
        truth = framecap.read_labels(config.labels) if config.labels else None

        def records():
            for path in config.pred or [None]:
                yield from read_records(path, "eval framecap")

        result = framecap.evaluate(records(), list(config.captions), truth)
        if not result["rows"]:
            raise ValueError(f"no record carries {' or '.join(config.captions)}: nothing to score "
                             "(pass --captions FIELD for another caption field)")
        stderr.print(framecap_table(result))
        subset = sum(row["overall"]["matching_subset"] for row in result["rows"].values())
        if subset:
            stderr.print(f"[yellow]{subset} sequence(s) were matched on fewer frames than they have[/yellow] (vi "
                         "judge match after vi judge progression matches only the distinct frames): not scored "
                         "for Cap; for FrameCapEval run vi judge match before vi judge progression", highlight=False)
        sink = StdoutSink()
        sink.write(dumps(result))
        sink.close()

    run_command(body)
