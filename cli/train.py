"""`vi train stepdiff` and `vi train captioner`: options in, the pipelines' training runs out."""

from __future__ import annotations

from vi.cli.stage import command, run_command
from vi.pipelines.progresscaptioner.train_captioner import CaptionerTrainConfig
from vi.pipelines.stepdiff.train_config import TrainConfig


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


@command(help=HELP, config=TrainConfig,
         epilog="Example: [cyan]vi clips -i steps.jsonl | vi encode-videos --store feats | vi train "
                "stepdiff --data caption:- --data pair_qa:qa.jsonl --val-fraction 0.1 -o runs/stepdiff[/cyan]")
def stepdiff_command(config: TrainConfig) -> None:
    from vi.pipelines.stepdiff.train import run_training

    run_command(lambda: run_training(config))


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
    "--vlm RUN[/cyan], or to --vlm of the DPO run), checkpoints/checkpoint-N every --save-every steps, and "
    "log.jsonl (split train: loss, learning rate; split val: held-out loss, for DPO also eval_rewards/accuracies "
    "and eval_rewards/margins; the first eval at step 0). --resume continues from the last checkpoint. bf16 on "
    "GPU; progress goes to stderr.\n\n"
    "[bold]Several GPUs or nodes:[/bold] launch this same command with [cyan]accelerate launch --num_processes "
    "8 -m vi train captioner ...[/cyan] or [cyan]torchrun --nproc-per-node 8 -m vi train "
    "captioner ...[/cyan]; under Slurm, [cyan]srun torchrun --nnodes $SLURM_NNODES --nproc-per-node 8 "
    "--rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 -m vi train captioner ...[/cyan]. The "
    "effective batch is --batch-size x --grad-accum x processes.")


@command(help=CAPTIONER_HELP, config=CaptionerTrainConfig,
         epilog="Example: [cyan]vi captioner-data -o data ... && vi train captioner --method sft --data "
                "data/sft.jsonl -o runs/sft && vi train captioner --method dpo --data data/dpo.jsonl "
                "--vlm runs/sft -o runs/dpo && vi caption-frames --vlm runs/dpo[/cyan]")
def captioner_command(config: CaptionerTrainConfig) -> None:
    from vi.pipelines.progresscaptioner.train_captioner import run_training

    run_command(lambda: run_training(config))
