"""`vi train showhowto`: options in, ShowHowTo's generator trained out (pipelines/showhowto/train_generator)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from vi.cli.stage import run_command
from vi.cli.train import (DATA, MODEL, OPTIM, RUN, Device, EvalEvery, KeepCheckpoints, LogEvery, Overwrite, Resume,
                          SaveEvery, train_app)
from vi.pipelines.showhowto.train_generator import GeneratorTrainConfig

D = GeneratorTrainConfig(output=Path("."), model=Path("."))
HELP = (
    "Fine-tune ShowHowTo's generator (the video U-Net and the image-token projection; VAE and CLIP encoders "
    "frozen) on datasets of vi export showhowto.\n\n"
    "[bold]Batches:[/bold] each step draws one length k in [--min-frames, --max-frames]; every sequence of the "
    "batch is cut to k consecutive frames from a random start, its first frame the input image. Text and image "
    "conditions are dropped at random for classifier-free guidance.\n\n"
    "[bold]Writes[/bold] to --output: base/ (the frozen parts, once), checkpoints/step-N/ (a model vi generate "
    "loads, plus training/ state) and log.jsonl (train loss, lr, samples/s; held-out loss every --eval-every "
    "steps). --resume continues the same loss curve from the last checkpoint.\n\n"
    "[bold]Several GPUs or nodes:[/bold] [cyan]accelerate launch --num_processes 8 -m vi.cli.app train showhowto "
    "...[/cyan] or [cyan]torchrun --nproc-per-node 8 -m vi.cli.app train showhowto ...[/cyan]; under Slurm, "
    "[cyan]srun torchrun --nnodes $SLURM_NNODES --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint "
    "$MASTER_ADDR:29500 -m vi.cli.app train showhowto ...[/cyan]. The effective batch is --batch-size x "
    "--grad-accum x processes.")


@train_app.command("showhowto", help=HELP, short_help="Train ShowHowTo's step-conditioned video-diffusion model.",
                   epilog="Example: [cyan]vi export showhowto -i aligned.jsonl --out ds && vi train showhowto --data "
                          "ds --model dynamicrafter-showhowto -o runs/showhowto && vi generate --model "
                          "runs/showhowto --prompt-file prompts.txt --out gen[/cyan]")
def showhowto_command(
    output: Annotated[Path, typer.Option("--output", "-o", file_okay=False, help="Run folder.", show_default=False)],
    data: Annotated[list[Path], typer.Option("--data", exists=True, file_okay=False, help="A vi export showhowto "
                                             "folder (repeatable).", rich_help_panel=DATA, show_default=False)],
    model: Annotated[Path, typer.Option(exists=True, file_okay=False, help="The generator to start from: a model "
                                        "folder (README: converting DynamiCrafter) or a checkpoint.",
                                        rich_help_panel=MODEL, show_default=False)],
    val: Annotated[list[Path] | None, typer.Option("--val", exists=True, file_okay=False, help="A held-out dataset "
                                                   "folder.", rich_help_panel=DATA)] = None,
    val_fraction: Annotated[float, typer.Option(min=0.0, max=0.9, help="Hold out this fraction of the videos (a "
                                                "stable hash).", rich_help_panel=DATA)] = D.val_fraction,
    min_frames: Annotated[int, typer.Option(min=2, help="Shortest cut (the input frame and one step).",
                                            rich_help_panel=DATA)] = D.min_frames,
    max_frames: Annotated[int, typer.Option(min=2, help="Longest cut.", rich_help_panel=DATA)] = D.max_frames,
    prompts: Annotated[str, typer.Option(help="per-frame (each frame its own prompt, the paper's model) or joined "
                                         "(every frame the cut's prompts joined: the ablation).",
                                         rich_help_panel=MODEL)] = D.prompts,
    cache_latents: Annotated[bool, typer.Option("--cache-latents", help="Run the frozen encoders once per frame and "
                                                "prompt and keep their outputs in memory.", rich_help_panel=DATA)
                             ] = False,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps.", rich_help_panel=OPTIM)] = D.steps,
    batch_size: Annotated[int, typer.Option(min=1, help="Sequences per process and micro step.",
                                            rich_help_panel=OPTIM)] = D.batch_size,
    grad_accum: Annotated[int, typer.Option(min=1, help="Micro steps per optimizer step.", rich_help_panel=OPTIM)
                          ] = D.grad_accum,
    lr: Annotated[float, typer.Option(min=0.0, help="AdamW learning rate (constant after warm-up).",
                                      rich_help_panel=OPTIM)] = D.lr,
    weight_decay: Annotated[float, typer.Option(min=0.0, help="AdamW weight decay.", rich_help_panel=OPTIM)
                            ] = D.weight_decay,
    warmup_steps: Annotated[int, typer.Option(min=0, help="Linear warm-up steps.", rich_help_panel=OPTIM)
                            ] = D.warmup_steps,
    max_grad_norm: Annotated[float, typer.Option(min=0.0, help="Gradient clipping (0: off).", rich_help_panel=OPTIM)
                             ] = D.max_grad_norm,
    drop_text: Annotated[float, typer.Option(min=0.0, max=1.0, help="Probability of training without the prompts.",
                                             rich_help_panel=OPTIM)] = D.drop_text,
    drop_image: Annotated[float, typer.Option(min=0.0, max=1.0, help="Probability of training without the image.",
                                              rich_help_panel=OPTIM)] = D.drop_image,
    ema: Annotated[float, typer.Option(min=0.0, max=0.99999, help="EMA decay of the weights (0: off); checkpoints "
                                       "then hold the EMA weights.", rich_help_panel=OPTIM)] = D.ema,
    gradient_checkpointing: Annotated[bool, typer.Option(help="Recompute the U-Net's activations in the backward "
                                      "pass: less memory.", rich_help_panel=OPTIM)] = False,
    mixed_precision: Annotated[str, typer.Option(help="auto (bf16, else fp16, on GPU; none on CPU), no, bf16 or "
                                                 "fp16.", rich_help_panel=RUN)] = "auto",
    eval_every: EvalEvery = D.eval_every,
    save_every: SaveEvery = D.save_every,
    log_every: LogEvery = D.log_every,
    keep_checkpoints: KeepCheckpoints = D.keep_checkpoints,
    resume: Resume = False,
    overwrite: Overwrite = False,
    device: Device = D.device,
    seed: Annotated[int, typer.Option(help="Seed of the batches, the noise and the dropped conditions.",
                                      rich_help_panel=RUN)] = D.seed,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.", rich_help_panel=RUN)] = False,
) -> None:
    from vi.pipelines.showhowto.train_generator import run_training

    def body() -> None:
        config = GeneratorTrainConfig(
            output=output, model=model, data=list(data), val=list(val or []), val_fraction=val_fraction,
            steps=steps, batch_size=batch_size, grad_accum=grad_accum, min_frames=min_frames, max_frames=max_frames,
            lr=lr, weight_decay=weight_decay, warmup_steps=warmup_steps, max_grad_norm=max_grad_norm,
            drop_text=drop_text, drop_image=drop_image, ema=ema, prompts=prompts, cache_latents=cache_latents,
            eval_every=eval_every, save_every=save_every, log_every=log_every, keep_checkpoints=keep_checkpoints,
            resume=resume, overwrite=overwrite, gradient_checkpointing=gradient_checkpointing, device=device,
            seed=seed, quiet=quiet)
        run_training(config, mixed_precision)

    run_command("train showhowto", body)
