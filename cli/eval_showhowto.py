"""`vi eval showhowto`: ShowHowTo's metrics of generated sequences (Sec. 5.1) and its Table 1 baselines.

The evaluation lives in `vi.evaluation.showhowto.generator_eval`, the metrics in `generator_metrics`;
this module only parses options and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from vi.cli.stage import command, run_command, stage_help
from vi.core.progress import stderr
from vi.core.records import dumps
from vi.core.sink import StdoutSink
from vi.evaluation.showhowto.generator_eval_config import PAPER_TABLE_1, GeneratorEvalConfig

METRICS = ("step_faithfulness", "scene_consistency", "task_faithfulness")
PAPER_ROW = {"generated": "ShowHowTo", "copy": "copy of input", "random": "random", "source": "source sequences"}


HELP, EPILOG = stage_help(
    "ShowHowTo's metrics of generated step sequences (Sec. 5.1), or of a Table 1 baseline. Step faithfulness: "
    "each generated image, classified zero-shot by CLIP among its own sequence's step texts, is its own step. "
    "Scene consistency: the nearest test-set image (DINOv2 CLS feature, cosine) among all test-set frames but "
    "the sequence's own input image comes from the input's video. Task faithfulness: the sequence's mean "
    "L2-normalised CLIP image feature, classified among the test set's task titles, is its own task. Each is a "
    "mean over generated frames (task: over sequences); a tie at the top gives 1/k credit. Baselines (--method): "
    "copy = every step image is the input image; random = the step images of another test sequence (drawn from "
    "--seed and the id); source = the sequence's own ground-truth frames. The paper's models are "
    "dfn5b-clip-vit-h-14 and facebook/dinov2-base from the local HF cache; without them [cyan]auto[/cyan] falls "
    "back to the embedded offline models (imagenet-labels; EfficientNet-Lite0 pooled features) and the output "
    "says [cyan]offline: true[/cyan]: those numbers are not comparable with the paper's.",
    reads="--dataset: the folder vi export showhowto wrote (prompts.json + imgseqs*/KEY.jpg with KEY.json "
          "sidecars {id, prompts, title, video}, or webdataset tars); a sequence's task is its title (its id when "
          "it has none: counted in tasks_from_id) and its video its video (else its KEY). --generated: vi "
          "generate's JSONL, one record per test sequence {id, generated: {frames: \\[one image per step]}}, matched "
          "by id (or KEY); a record with errors or without generated counts as failed.",
    writes="one JSON object on stdout: {method, sequences, frames, step_faithfulness, scene_consistency, "
           "task_faithfulness, tasks, tasks_from_id, models: {clip, dino}, offline, failed, missing[, "
           "failed_records]}; a table with Table 1's figures on stderr; with --per-sequence one JSONL row per "
           "scored sequence {id, key, task, video, step: \\[credit per frame], scene: \\[...], task_correct}. "
           "Exit code 2 for input that cannot be scored (the message names file, line and field), 5 for a missing "
           "model.",
    example="vi eval showhowto --dataset out/ds --generated generated.jsonl",
)


def result_table(result: dict) -> Table:
    offline = " (offline models: not comparable with the paper)" if result["offline"] else ""
    table = Table(title=f"ShowHowTo step faithfulness, scene consistency, task faithfulness{offline}")
    table.add_column("method")
    for name in METRICS:
        table.add_column(name.split("_")[0], justify="right")
    table.add_row(f"[bold]{escape(result['method'])}[/bold]",
                  *(f"[bold]{'-' if result[m] is None else format(result[m], '.3f')}[/bold]" for m in METRICS))
    for name, figures in PAPER_TABLE_1.items():
        mark = " <" if name == PAPER_ROW[result["method"]] else ""
        table.add_row(f"[dim]paper: {escape(name)}{mark}[/dim]", *(f"[dim]{v:.2f}[/dim]" for v in figures))
    return table


@command(help=HELP, epilog=EPILOG, config=GeneratorEvalConfig)
def showhowto_command(
    config: GeneratorEvalConfig,
    per_sequence: Annotated[Path | None, typer.Option(
        "--per-sequence", dir_okay=False, show_default=False,
        help="Also write one JSONL row per scored sequence to this file.")] = None,
) -> None:
    # the scoring (numpy, PIL, the models) is imported when the command runs, not for its --help
    from vi.evaluation.showhowto.generator_eval import evaluate

    def body() -> None:
        result, rows = evaluate(config)
        if per_sequence is not None:
            per_sequence.write_bytes(b"".join(dumps(row) for row in rows))
        stderr.print(result_table(result))
        notes = [f"{r['id']} (line {r['line']}): {r['reason']}" for r in result.get("failed_records", [])]
        for note in notes[:10]:
            stderr.print(f"[yellow]failed, not scored[/yellow] {escape(note)}", highlight=False)
        if len(notes) > 10:
            stderr.print(f"... and {len(notes) - 10} more failed records", highlight=False)
        if result["missing"]:
            stderr.print(f"[yellow]{result['missing']} test sequence(s) have no generated record[/yellow]: not "
                         "scored", highlight=False)
        if result["tasks_from_id"]:
            stderr.print(f"{result['tasks_from_id']} test sequence(s) have no title: their task text is their id",
                         highlight=False)
        sink = StdoutSink()
        sink.write(dumps(result))
        sink.close()

    run_command(body)
