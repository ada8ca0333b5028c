"""`vi train stepdiff`: options in, `pipelines.train_stepdiff.run_training` out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.app import app
from vi.cli.stage import run_command
from vi.pipelines.stepdiff.train import TrainConfig

train_app = typer.Typer(rich_markup_mode="rich", no_args_is_help=True,
                        context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(train_app, name="train", help="Train models: StepDiff's video-conditioned LLM (projector only).")

DATA, OPTIM, MODEL, RUN = "Data", "Optimisation", "Model", "Run"
DEFAULTS = TrainConfig(output=Path("."))
HELP = (
    "Train StepDiff's projector (a Perceiver resampler + linear head) between frozen video features and a "
    "frozen LLM, on a mixture of JSONL datasets; only the projector learns.\n\n"
    "[bold]Data[/bold] (--data KIND:PATH, repeatable; PATH - reads stdin): [cyan]pair_qa[/cyan] (vi pair-qa "
    "records: one sample per question), [cyan]caption[/cyan] (clip records: the clip with its caption, else its "
    "narration, else description.step), [cyan]interleaved[/cyan] (clip records: 3 consecutive clips of a video "
    "with their narration). Datasets are sampled round-robin, or by --weights. The clips' encoder tokens come "
    "from feature stores (vi encode-videos --store DIR): the ones the records name, and --features.\n\n"
    "[bold]Writes[/bold] to --output: checkpoints/step-N/ (projector, optimizer, scheduler, data position) "
    "every --save-every steps, and log.jsonl (train loss, lr, samples/s; held-out loss every --eval-every "
    "steps). --resume continues from the last checkpoint. Progress goes to stderr.\n\n"
    "[bold]Several GPUs or nodes:[/bold] launch this same command with [cyan]accelerate launch --num_processes "
    "8 -m vi.cli.app train stepdiff ...[/cyan] or [cyan]torchrun --nproc-per-node 8 -m vi.cli.app train "
    "stepdiff ...[/cyan]; under Slurm, [cyan]srun torchrun --nnodes $SLURM_NNODES --nproc-per-node 8 "
    "--rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 -m vi.cli.app train stepdiff ...[/cyan]. The "
    "effective batch is --batch-size x --grad-accum x processes.")


@train_app.command("stepdiff", help=HELP, short_help="Train StepDiff's projector on pair QA, caption and "
                   "interleaved data.",
                   epilog="Example: [cyan]vi clips -i steps.jsonl | vi encode-videos --store feats | vi train "
                          "stepdiff --data caption:- --data pair_qa:qa.jsonl --val-fraction 0.1 -o runs/stepdiff"
                          "[/cyan]")
def stepdiff_command(
    output: Annotated[Path, typer.Option("--output", "-o", file_okay=False, help="Run folder: checkpoints and "
                                         "log.jsonl.", show_default=False)],
    data: Annotated[list[str], typer.Option("--data", metavar="KIND:PATH", help="A training dataset (see above).",
                                            rich_help_panel=DATA, show_default=False)],
    features: Annotated[list[Path] | None, typer.Option("--features", file_okay=False, exists=True, help="A feature "
                        "store (vi encode-videos --store), besides those the records name.", rich_help_panel=DATA)
                        ] = None,
    weights: Annotated[str | None, typer.Option(help="Sampling weights, one per --data, comma-separated (default: "
                                                "round-robin).", rich_help_panel=DATA)] = None,
    val: Annotated[list[str] | None, typer.Option("--val", metavar="KIND:PATH", help="A held-out dataset.",
                                                   rich_help_panel=DATA)] = None,
    val_fraction: Annotated[float, typer.Option(min=0.0, max=0.9, help="Hold out this fraction of the training "
                            "samples (a stable hash of their id).", rich_help_panel=DATA)] = DEFAULTS.val_fraction,
    val_samples: Annotated[int, typer.Option(min=1, help="Most held-out samples scored at each evaluation.",
                                             rich_help_panel=DATA)] = DEFAULTS.val_samples,
    llm: Annotated[str, typer.Option(help="The frozen LLM: a transformers folder, a cached hub id, a .gguf, or a "
                                     "GGUF alias from `vi models` (dequantized once into vi's cache).",
                                     rich_help_panel=MODEL)] = DEFAULTS.llm,
    template: Annotated[str, typer.Option(help="auto (the LLM's chat template, else Llama-2's), chat or llama2.",
                                          rich_help_panel=MODEL)] = DEFAULTS.template,
    latents: Annotated[int, typer.Option(min=1, help="Tokens per video in the LLM's input.", rich_help_panel=MODEL)
                       ] = DEFAULTS.latents,
    layers: Annotated[int, typer.Option(min=1, help="Perceiver layers.", rich_help_panel=MODEL)] = DEFAULTS.layers,
    projector_dim: Annotated[int, typer.Option(min=0, help="The Perceiver's width (0: the encoder's).",
                                               rich_help_panel=MODEL)] = DEFAULTS.projector_dim,
    heads: Annotated[int, typer.Option(min=1, help="Perceiver attention heads.", rich_help_panel=MODEL)
                     ] = DEFAULTS.heads,
    init_from: Annotated[Path | None, typer.Option(exists=True, help="Start from this run's (or checkpoint's) "
                         "projector, e.g. the interleaved pre-training.", rich_help_panel=MODEL)] = None,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps.", rich_help_panel=OPTIM)] = DEFAULTS.steps,
    batch_size: Annotated[int, typer.Option(min=1, help="Samples per process and micro step.",
                                            rich_help_panel=OPTIM)] = DEFAULTS.batch_size,
    grad_accum: Annotated[int, typer.Option(min=1, help="Micro steps per optimizer step.", rich_help_panel=OPTIM)
                          ] = DEFAULTS.grad_accum,
    lr: Annotated[float, typer.Option(min=0.0, help="Peak learning rate (AdamW).", rich_help_panel=OPTIM)
                  ] = DEFAULTS.lr,
    weight_decay: Annotated[float, typer.Option(min=0.0, help="AdamW weight decay.", rich_help_panel=OPTIM)
                            ] = DEFAULTS.weight_decay,
    warmup_steps: Annotated[int, typer.Option(min=0, help="Linear warm-up steps, then cosine decay to 0.",
                                              rich_help_panel=OPTIM)] = DEFAULTS.warmup_steps,
    max_grad_norm: Annotated[float, typer.Option(min=0.0, help="Gradient clipping (0: none).",
                                                 rich_help_panel=OPTIM)] = DEFAULTS.max_grad_norm,
    mixed_precision: Annotated[str, typer.Option(help="auto (bf16, else fp16, on GPU; none on CPU), no, bf16 or "
                               "fp16.", rich_help_panel=OPTIM)] = "auto",
    gradient_checkpointing: Annotated[bool, typer.Option(help="Recompute the LLM's activations in the backward "
                                      "pass: less memory for long sequences.", rich_help_panel=OPTIM)] = False,
    eval_every: Annotated[int, typer.Option(min=1, help="Held-out loss every N steps.", rich_help_panel=RUN)
                          ] = DEFAULTS.eval_every,
    save_every: Annotated[int, typer.Option(min=1, help="Checkpoint every N steps.", rich_help_panel=RUN)
                          ] = DEFAULTS.save_every,
    log_every: Annotated[int, typer.Option(min=1, help="Train loss line every N steps.", rich_help_panel=RUN)
                         ] = DEFAULTS.log_every,
    keep_checkpoints: Annotated[int, typer.Option(min=1, help="Checkpoints kept (the newest).",
                                                  rich_help_panel=RUN)] = DEFAULTS.keep_checkpoints,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the last checkpoint in --output.",
                                         rich_help_panel=RUN)] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the run in --output (its checkpoints "
                                            "and log).", rich_help_panel=RUN)] = False,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda (a launcher gives each process its GPU).",
                                        rich_help_panel=RUN)] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of the projector's initialisation and the data order.",
                                      rich_help_panel=RUN)] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.", rich_help_panel=RUN)] = False,
) -> None:
    from vi.pipelines.stepdiff.train import run_training

    def body() -> None:
        parsed = [float(w) for w in weights.split(",")] if weights else None
        config = TrainConfig(
            output=output, llm=llm, template=template, steps=steps, batch_size=batch_size, grad_accum=grad_accum,
            lr=lr, weight_decay=weight_decay, warmup_steps=warmup_steps, max_grad_norm=max_grad_norm,
            latents=latents, layers=layers, projector_dim=projector_dim, heads=heads, val_fraction=val_fraction,
            val_samples=val_samples, eval_every=eval_every, save_every=save_every, log_every=log_every,
            keep_checkpoints=keep_checkpoints, init_from=init_from, resume=resume, overwrite=overwrite,
            gradient_checkpointing=gradient_checkpointing, device=device, seed=seed, quiet=quiet, weights=parsed,
            data=list(data))
        run_training(config, list(val or []), list(features or []), mixed_precision)

    run_command("train stepdiff", body)
