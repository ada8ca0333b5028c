"""`vi train showhowto`: options in, ShowHowTo's generator trained out (pipelines/showhowto/train_generator)."""

from __future__ import annotations

from vi.cli.stage import command, run_command
from vi.pipelines.showhowto.train_generator_config import GeneratorTrainConfig

HELP = (
    "Fine-tune ShowHowTo's generator as the release's train.py does (the video U-Net learns; the autoencoder, "
    "OpenCLIP encoders and Resampler stay frozen), starting from a release file (--init "
    "dynamicrafter_256_v1.ckpt, as the paper) on datasets of vi export showhowto.\n\n"
    "[bold]Batches:[/bold] each step trains one batch of every length 2..--max-frames (8), one update per length "
    "(--lengths random: one length per step); every sequence is cut to k consecutive frames from a random start, "
    "its first frame the scene image. AdamW 2e-5, cosine after a linear warm-up.\n\n"
    "[bold]Writes[/bold] to --output: checkpoints/step-N/ (unet.pt + showhowto.json, which vi generate loads, plus "
    "training/ state) and log.jsonl (train loss, lr, samples/s; held-out loss every --eval-every steps). --resume "
    "continues the same loss curve from the last checkpoint.\n\n"
    "[bold]Several GPUs or nodes:[/bold] [cyan]accelerate launch --num_processes 8 -m vi.cli.app train showhowto "
    "...[/cyan] or [cyan]torchrun --nproc-per-node 8 -m vi.cli.app train showhowto ...[/cyan]; under Slurm, "
    "[cyan]srun torchrun --nnodes $SLURM_NNODES --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint "
    "$MASTER_ADDR:29500 -m vi.cli.app train showhowto ...[/cyan]. The effective batch is --batch-size x "
    "--grad-accum x processes, per length.")


@command(help=HELP, config=GeneratorTrainConfig,
         epilog="Example: [cyan]vi export showhowto -i aligned.jsonl --out ds && vi train showhowto --data "
                "ds --init dynamicrafter_256_v1.ckpt -o runs/showhowto && vi generate --model "
                "runs/showhowto --prompt-file prompts.txt --out gen[/cyan]")
def showhowto_command(config: GeneratorTrainConfig) -> None:
    from vi.pipelines.showhowto.train_generator import run_training

    run_command(lambda: run_training(config))
