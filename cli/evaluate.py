"""`vi eval diffcap|diffmcq|diffrank|mcq-negatives`: score predictions on StepDiff's benchmarks, and build
DiffMCQ instances.

The metrics live in `vi.evaluation.stepdiff.metrics`, the negative sampling in
`vi.evaluation.stepdiff.mcq_negatives` (numpy: imported when the command runs, its options in
`mcq_negatives_config`); this module only parses options and prints.
"""

from __future__ import annotations

import sys

from rich.markup import escape
from rich.table import Table
from vi.cli.stage import command, run_command, stage_help
from vi.core.progress import stderr
from vi.core.records import dumps
from vi.core.sink import StdoutSink
from vi.evaluation.stepdiff.mcq_negatives_config import AUTO, NegativesConfig, Variant
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
    "[bold]Reads:[/bold] --gt rows {reference, candidate, category, text: \\[captions]}; --pred rows "
    "{generated_text}.\n\n" + OUTPUT), epilog="Example: [cyan]vi eval diffcap --gt diffcap_dataset.jsonl "
    "--pred my_diffcap.jsonl[/cyan]", config=ScoreConfig)
def diffcap_command(config: ScoreConfig) -> None:
    _score("diffcap", config)


@command(help=(
    "DiffMCQ: accuracy of choosing the video pair a difference caption describes (argmax of 4 scores; a tie "
    "goes to the first option, as numpy's argmax). [cyan]tied_top_rows[/cyan] counts rows with a tied "
    "maximum.\n\n[bold]Reads:[/bold] --gt rows {difference, category, options: 4 x \\[reference, candidate], "
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
    reads="--input rows {reference, candidate, category, text: \\[captions]}; v1/v2 also --clip-features, "
          "JSONL {id, embedding} per clip or NPZ with arrays id and embedding.",
    writes="official DiffMCQ rows {difference, category, options: 4 x \\[reference, candidate], answer} on "
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
