"""`vi eval`: score predictions on StepDiff's benchmarks, and build DiffMCQ instances.

The metrics live in `vi.evaluation.stepdiff.metrics`, the negative sampling in
`vi.evaluation.stepdiff.mcq_negatives`; this module only parses options and prints.
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
from vi.evaluation.stepdiff.mcq_negatives import AUTO, NegativesConfig, Variant
from vi.evaluation.stepdiff.metrics import ScoreConfig


OUTPUT = ("[bold]Writes:[/bold] one JSON object on stdout: {task, rows, METRICS, per_category: {CATEGORY: "
          "{rows, METRICS}}}; a table on stderr. Exit code 2 for a file that cannot be scored; the message "
          "names the file and line.")


def _cell(value) -> str:
    if value is None:
        return "NaN"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


# Table headers short enough for an 80-column terminal; the JSON keeps the full names.
HEADERS = {"ktau_official": "official", "constant_pred_rows": "const pred", "constant_gt_rows": "const gt",
           "tied_top_rows": "tied top"}


def metrics_table(result: dict) -> Table:
    columns = [k for k in result if k not in ("task", "per_category")]
    table = Table(title=f"StepDiff {result['task']}")
    table.add_column("category", no_wrap=True)
    for column in columns:
        table.add_column(HEADERS.get(column, column), justify="right")
    for category, values in result["per_category"].items():
        table.add_row(escape(category), *(_cell(values.get(c)) for c in columns))
    table.add_row("[bold]all[/bold]", *(f"[bold]{_cell(result[c])}[/bold]" for c in columns))
    return table


def _score(task: str, config: ScoreConfig) -> None:
    from vi.evaluation.stepdiff.metrics import evaluate_files

    def body() -> None:
        result = evaluate_files(task, config.gt, config.pred, allow_unknown_categories=config.allow_unknown_categories)
        stderr.print(metrics_table(result))
        sink = StdoutSink()
        sink.write(dumps(result))
        sink.close()

    run_command(body)


@command(help=(
    "DiffCap: BLEU-1, CIDEr-D and ROUGE-L of generated difference captions (pycocoevalcap, raw strings).\n\n"
    "[bold]Reads:[/bold] --gt rows {reference, candidate, category, text: [captions]}; --pred rows "
    "{generated_text}.\n\n" + OUTPUT), epilog="Example: [cyan]vi eval diffcap --gt diffcap_dataset.jsonl "
    "--pred my_diffcap.jsonl[/cyan]", config=ScoreConfig)
def diffcap_command(config: ScoreConfig) -> None:
    _score("diffcap", config)


@command(help=(
    "DiffMCQ: accuracy of choosing the video pair a difference caption describes (argmax of 4 scores; a tie "
    "goes to the first option, as numpy's argmax). [cyan]tied_top_rows[/cyan] counts rows with a tied "
    "maximum.\n\n[bold]Reads:[/bold] --gt rows {difference, category, options: 4 x [reference, candidate], "
    "answer}; --pred rows {scores: [4 numbers]}.\n\n" + OUTPUT),
    epilog="Example: [cyan]vi eval diffmcq --gt diffmcq_dataset.jsonl --pred my_scores.jsonl[/cyan]",
    config=ScoreConfig)
def diffmcq_command(config: ScoreConfig) -> None:
    _score("diffmcq", config)


@command(help=(
    "DiffRank: Kendall's tau-b (scipy) between predicted and annotated scores of 4 targets, averaged over "
    "rows. A row whose predicted (or annotated) scores are all equal has no tau: the official mean is then "
    "NaN, reported as [cyan]ktau_official[/cyan] (null in JSON); [cyan]ktau[/cyan] counts such a row as "
    "tau = 0 (no ranking information, like a random ranking on average; dropping it would reward "
    "abstaining). [cyan]constant_pred_rows[/cyan] and [cyan]constant_gt_rows[/cyan] count them.\n\n"
    "[bold]Reads:[/bold] --gt rows {reference, targets: [4], category, scores: [4]}; --pred rows "
    "{scores: [4 numbers]}.\n\n" + OUTPUT),
    epilog="Example: [cyan]vi eval diffrank --gt diffrank_dataset.jsonl --pred my_ranks.jsonl[/cyan]",
    config=ScoreConfig)
def diffrank_command(config: ScoreConfig) -> None:
    _score("diffrank", config)


def _text_model(choice: str) -> str:
    if choice != AUTO:
        return choice
    from vi.core.models import get_spec

    if get_spec("mpnet-base").available():
        return "mpnet-base"
    stderr.print("vi eval mcq-negatives: mpnet-base (StepDiff's MPNet) is not installed, so captions are "
                 f"compared with minilm-l6 ({get_spec('mpnet-base').install} gets MPNet)", highlight=False)
    return "minilm-l6"


NEGATIVES_HELP, NEGATIVES_EPILOG = stage_help(
    "Build DiffMCQ instances from DiffCap-style annotations (StepDiff Supp. S5): each caption of each "
    "annotated pair becomes a question whose answer is that pair, among 3 negative pairs. v1: the visually "
    "nearest other pairs (mean CLIP embedding of the two clips) that share no clip with the answer; v2: the "
    "same, sharing a clip allowed; v3: the answer's reference with random other clips. A pair with a caption "
    "in the same category more similar than --threshold (sentence-embedding cosine) is never a negative.",
    reads="--input rows {reference, candidate, category, text: [captions]}; v1/v2 also --clip-features, "
          "JSONL {id, embedding} per clip or NPZ with arrays id and embedding.",
    writes="official DiffMCQ rows {difference, category, options: 4 x [reference, candidate], answer} on "
           "stdout, options in a seeded random order. A caption that cannot get 3 negatives is left out and "
           "named on stderr.",
    example="vi eval mcq-negatives -i diffcap_dataset.jsonl --variant v1 --clip-features clips.npz > mcq.jsonl",
)


@command(help=NEGATIVES_HELP, epilog=NEGATIVES_EPILOG, config=NegativesConfig)
def mcq_negatives_command(config: NegativesConfig) -> None:
    from vi.evaluation.stepdiff import mcq_negatives

    input, variant = config.input, config.variant

    def body() -> None:
        if str(input) == "-" and sys.stdin.isatty():
            raise ValueError("no annotations: pass --input FILE or pipe DiffCap-style JSONL on stdin")
        annotations = mcq_negatives.read_annotations(input, config.allow_unknown_categories)
        features = mcq_negatives.read_clip_features(config.clip_features) if config.clip_features else None
        if variant is not Variant.v3 and features is None:
            raise ValueError(f"--variant {variant.value} ranks pairs by visual similarity: give --clip-features")
        from vi.core.devices import resolve_placement
        from vi.core.models.text_embedding import load_text_embedder

        placement, model = resolve_placement(config.device, "auto"), _text_model(config.text_model)

        def embed(texts: list[str]):  # loaded only once the input has passed every check
            return load_text_embedder(model, placement).encode(texts)

        rows, short = mcq_negatives.build_instances(
            annotations, variant.value, embed, features, seed=config.seed, threshold=config.threshold,
            source="<stdin>" if str(input) == "-" else str(input))
        sink = StdoutSink()
        for row in rows:
            sink.write(dumps(row))
        sink.close()
        captions = sum(len(a.captions) for a in annotations)
        stderr.print(f"vi eval mcq-negatives: {len(rows)} {variant.value} instances from {captions} captions "
                     f"of {len(annotations)} annotation rows", highlight=False)
        for line in short[:10]:
            stderr.print(f"[yellow]left out[/yellow] {escape(line)}", highlight=False)
        if len(short) > 10:
            stderr.print(f"... and {len(short) - 10} more captions left out", highlight=False)

    run_command(body)


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
