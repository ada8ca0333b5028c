"""`vi train stepdiff` and `vi train captioner`: options in, the pipelines' training runs out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.app import app
from vi.cli.stage import run_command
from vi.pipelines.progresscaptioner.train_captioner import CaptionerTrainConfig
from vi.pipelines.stepdiff.train import TrainConfig

train_app = typer.Typer(rich_markup_mode="rich", no_args_is_help=True,
                        context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(train_app, name="train", help="Train models: StepDiff's video-conditioned LLM (projector only); "
              "ShowHowTo's generator; "
              "ProgressCaptioner's VLM (SFT, then DPO).")

DATA, OPTIM, MODEL, RUN = "Data", "Optimisation", "Model", "Run"
# The run options both trainers share (each command gives its own default).
EvalEvery = Annotated[int, typer.Option(min=1, help="Held-out evaluation every N steps.", rich_help_panel=RUN)]
SaveEvery = Annotated[int, typer.Option(min=1, help="Checkpoint every N steps.", rich_help_panel=RUN)]
LogEvery = Annotated[int, typer.Option(min=1, help="Train loss line every N steps.", rich_help_panel=RUN)]
KeepCheckpoints = Annotated[int, typer.Option(min=1, help="Checkpoints kept (the newest).", rich_help_panel=RUN)]
Resume = Annotated[bool, typer.Option("--resume", help="Continue from the last checkpoint in --output.",
                                      rich_help_panel=RUN)]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace the run in --output (its checkpoints and "
                                         "log).", rich_help_panel=RUN)]
Device = Annotated[str, typer.Option(help="auto, cpu or cuda (a launcher gives each process its GPU).",
                                     rich_help_panel=RUN)]
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
    eval_every: EvalEvery = DEFAULTS.eval_every,
    save_every: SaveEvery = DEFAULTS.save_every,
    log_every: LogEvery = DEFAULTS.log_every,
    keep_checkpoints: KeepCheckpoints = DEFAULTS.keep_checkpoints,
    resume: Resume = False,
    overwrite: Overwrite = False,
    device: Device = "auto",
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


CAPTIONER_HELP = (
    "Train ProgressCaptioner's VLM (CVPR 2025) with TRL: [cyan]--method sft[/cyan] on progress captions, then "
    "[cyan]--method dpo[/cyan] from the SFT run on chosen/rejected captions. Full fine-tuning (the paper's), or "
    "--lora (adapters merged into the saved model). LLaVA-OneVision (the paper's base), Qwen2-VL and "
    "Idefics3/SmolVLM models.\n\n"
    "[bold]Data[/bold]: vi captioner-data's sft.jsonl or dpo.jsonl (images relative to the file); it trains "
    "on the records of split train and scores those of split heldout every --eval-every steps (or --val FILE).\n\n"
    "[bold]Learning rates[/bold] (the paper's by default): SFT 1e-5 for the LLM and projector, 2e-6 for the "
    "vision encoder; DPO 5e-7 (vision 1e-7, SFT's ratio) with beta 0.2. --vision-lr 0 freezes the encoder.\n\n"
    "[bold]Writes[/bold] to --output: the final model and processor (give the folder to [cyan]vi caption-frames "
    "--vlm RUN[/cyan], or to --model of the DPO run), checkpoints/checkpoint-N every --save-every steps, and "
    "log.jsonl (kind train: loss, learning rate; kind eval: held-out loss, for DPO also eval_rewards/accuracies "
    "and eval_rewards/margins; the first eval at step 0). --resume continues from the last checkpoint. bf16 on "
    "GPU; progress goes to stderr.\n\n"
    "[bold]Several GPUs or nodes:[/bold] launch this same command with [cyan]accelerate launch --num_processes "
    "8 -m vi train captioner ...[/cyan] or [cyan]torchrun --nproc-per-node 8 -m vi train "
    "captioner ...[/cyan]; under Slurm, [cyan]srun torchrun --nnodes $SLURM_NNODES --nproc-per-node 8 "
    "--rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 -m vi train captioner ...[/cyan]. The "
    "effective batch is --batch-size x --grad-accum x processes.")
CD = CaptionerTrainConfig(output=Path("."), data=Path("."))  # its module imports no torch: a fast --help


@train_app.command("captioner", help=CAPTIONER_HELP, short_help="Train ProgressCaptioner's VLM: SFT or DPO (TRL).",
                   epilog="Example: [cyan]vi captioner-data -o data ... && vi train captioner --method sft --data "
                          "data/sft.jsonl -o runs/sft && vi train captioner --method dpo --data data/dpo.jsonl "
                          "--model runs/sft -o runs/dpo && vi caption-frames --vlm runs/dpo[/cyan]")
def captioner_command(
    output: Annotated[Path, typer.Option("--output", "-o", file_okay=False, help="Run folder: the final model, "
                                         "checkpoints and log.jsonl.", show_default=False)],
    data: Annotated[Path, typer.Option("--data", exists=True, dir_okay=False, help="sft.jsonl or dpo.jsonl of vi "
                                       "captioner-data.", rich_help_panel=DATA, show_default=False)],
    method: Annotated[str, typer.Option(help="sft or dpo.", rich_help_panel=MODEL)] = CD.method,
    val: Annotated[Path | None, typer.Option(exists=True, dir_okay=False, help="Held-out records (default: the "
                                             "--data records of split heldout).", rich_help_panel=DATA)] = None,
    model: Annotated[str, typer.Option(help="The VLM to start from: a transformers folder (e.g. the SFT run) or a "
                                       "cached hub id.", rich_help_panel=MODEL)] = CD.model,
    lora: Annotated[bool, typer.Option("--lora", help="Train LoRA adapters on every linear layer instead of all "
                                       "weights; they are merged into the saved model.", rich_help_panel=MODEL)
                    ] = False,
    lora_rank: Annotated[int, typer.Option(min=1, help="LoRA rank.", rich_help_panel=MODEL)] = CD.lora_rank,
    lora_alpha: Annotated[int, typer.Option(min=1, help="LoRA alpha.", rich_help_panel=MODEL)] = CD.lora_alpha,
    beta: Annotated[float, typer.Option(min=0.0, help="DPO's beta.", rich_help_panel=OPTIM)] = CD.beta,
    lr: Annotated[float | None, typer.Option(min=0.0, help="Peak learning rate of the LLM and projector "
                                             "(default: 1e-5 SFT, 5e-7 DPO).", rich_help_panel=OPTIM,
                                             show_default=False)] = None,
    vision_lr: Annotated[float | None, typer.Option(min=0.0, help="Peak learning rate of the vision encoder "
                                                    "(default: 2e-6 SFT, 1e-7 DPO; 0 freezes it).",
                                                    rich_help_panel=OPTIM, show_default=False)] = None,
    epochs: Annotated[float, typer.Option(min=0.0, help="Passes over the training records.", rich_help_panel=OPTIM)
                      ] = CD.epochs,
    max_steps: Annotated[int, typer.Option(min=0, help="Optimizer steps (0: --epochs decides).",
                                           rich_help_panel=OPTIM)] = CD.max_steps,
    batch_size: Annotated[int, typer.Option(min=1, help="Records per process and micro step.",
                                            rich_help_panel=OPTIM)] = CD.batch_size,
    grad_accum: Annotated[int, typer.Option(min=1, help="Micro steps per optimizer step.", rich_help_panel=OPTIM)
                          ] = CD.grad_accum,
    weight_decay: Annotated[float, typer.Option(min=0.0, help="AdamW weight decay.", rich_help_panel=OPTIM)
                            ] = CD.weight_decay,
    warmup_ratio: Annotated[float, typer.Option(min=0.0, max=1.0, help="Linear warm-up over this fraction of the "
                                                "steps, then --scheduler.", rich_help_panel=OPTIM)] = CD.warmup_ratio,
    scheduler: Annotated[str, typer.Option(help="transformers' scheduler name: cosine, linear, constant...",
                                           rich_help_panel=OPTIM)] = CD.scheduler,
    max_grad_norm: Annotated[float, typer.Option(min=0.0, help="Gradient clipping.", rich_help_panel=OPTIM)
                             ] = CD.max_grad_norm,
    max_length: Annotated[int, typer.Option(min=0, help="Truncate sequences to this many tokens (0: never; a cut "
                                            "inside the image tokens fails).", rich_help_panel=OPTIM)
                          ] = CD.max_length,
    gradient_checkpointing: Annotated[bool, typer.Option(help="Recompute activations in the backward pass: less "
                                      "memory.", rich_help_panel=OPTIM)] = CD.gradient_checkpointing,
    cache_images: Annotated[bool, typer.Option("--cache-images", help="Decode each image file once and keep it in "
                                               "memory instead of re-reading it for every batch: width x height x 3 "
                                               "bytes a distinct frame (0.7 MB at 640x360, 6.2 MB at 1920x1080) "
                                               "in each process, for the whole run.", rich_help_panel=DATA)
                    ] = CD.cache_images,
    eval_every: EvalEvery = CD.eval_every,
    save_every: SaveEvery = CD.save_every,
    log_every: LogEvery = CD.log_every,
    keep_checkpoints: KeepCheckpoints = CD.keep_checkpoints,
    resume: Resume = False,
    overwrite: Overwrite = False,
    device: Device = CD.device,
    seed: Annotated[int, typer.Option(help="Seed of the data order and LoRA's initialisation.", rich_help_panel=RUN)
                    ] = CD.seed,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.", rich_help_panel=RUN)] = False,
) -> None:
    from vi.pipelines.progresscaptioner.train_captioner import run_training

    def body() -> None:
        config = CaptionerTrainConfig(
            output=output, data=data, method=method, model=model, val=val, lr=lr, vision_lr=vision_lr, beta=beta,
            lora=lora, lora_rank=lora_rank, lora_alpha=lora_alpha, epochs=epochs, max_steps=max_steps,
            batch_size=batch_size, eval_batch_size=batch_size, grad_accum=grad_accum, weight_decay=weight_decay,
            warmup_ratio=warmup_ratio, scheduler=scheduler, max_grad_norm=max_grad_norm, max_length=max_length,
            gradient_checkpointing=gradient_checkpointing, cache_images=cache_images, eval_every=eval_every,
            save_every=save_every, log_every=log_every, keep_checkpoints=keep_checkpoints, resume=resume,
            overwrite=overwrite, device=device, seed=seed, quiet=quiet)
        run_training(config)

    run_command("train captioner", body)
