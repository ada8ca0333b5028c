"""`vi train captioner`: ProgressCaptioner's SFT and DPO stages (CVPR 2025) on a transformers VLM, with TRL.

The paper fine-tunes LLaVA-OneVision on FrameCap-style data: SFT on progress captions (lr 1e-5 for the LLM and
projector, 2e-6 for the vision encoder), then DPO on chosen/rejected caption sequences (lr 5e-7, beta 0.2).
Here TRL's SFTTrainer / DPOTrainer run the loop (mixed precision, gradient checkpointing, checkpoints and
resume, accelerate/torchrun processes); vi adds the data reading (train_captioner_data.py), the two learning
rates (an optimizer with one group per part, `_TwoLearningRates`), the run folder's log.jsonl, and the final
model saved where `vi caption-frames --vlm RUN` loads it (LoRA adapters merged into it), and `--cache-images`
(`CachedImages`: each image file decoded once and kept in memory instead of re-read for every batch).

DPO's reference log-probabilities are computed on the fly, a forward of the reference model per batch: TRL
1.16's `precompute_ref_log_probs` refuses vision datasets ("not supported for vision datasets").

Run folder (claimed, resumed or overwritten as `vi.core.training` does for every trainer): RUN/ holds the final
model and processor, RUN/checkpoints/checkpoint-N the Trainer's checkpoints (model, optimizer, scheduler, RNG,
data position), RUN/log.jsonl one line per log event in vi's format (`RunLog`): split train (loss,
learning_rate, grad_norm; DPO also rewards/*), split val (loss: the held-out eval_loss; DPO also
eval_rewards/accuracies and eval_rewards/margins), the first at step 0 before any update, so a run shows its own
start.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from vi.core.config import check_choices, internal, option, with_default
from vi.core.models.catalog import DEFAULT_VLM  # the paper's base (its 7B OneVision)
from vi.core.progress import log
from vi.core.training import (CHECKPOINTS, DATA, LOG, MODEL, OPTIM, RunConfig, RunLog, claim_run, on_cpu,
                              run_option)
from vi.pipelines.progresscaptioner.train_captioner_data import CachedImages, load_split, param_groups

# The paper's learning rates. For DPO it gives one (5e-7); the vision encoder keeps SFT's ratio (1/5) to it.
PAPER_LR = {"sft": (1e-5, 2e-6), "dpo": (5e-7, 1e-7)}


@dataclass(kw_only=True)
class CaptionerTrainConfig(RunConfig):
    """The options of `vi train captioner`; lr/vision_lr None take the paper's for `method`."""

    output: Path = run_option("output", help="Run folder: the final model, checkpoints and log.jsonl.")
    data: Path = option(flag="--data", exists=True, dir_okay=False, help="sft.jsonl or dpo.jsonl of vi "
                        "captioner-data.", panel=DATA, show_default=False)
    method: str = option("sft", choices=PAPER_LR, help="sft or dpo.", panel=MODEL)
    model: str = option(DEFAULT_VLM, flag="--vlm", hidden_aliases=("--model",), help="The VLM to start from: a transformers folder (e.g. the SFT run) or a "
                        "cached hub id.", panel=MODEL)
    val: Path | None = option(None, exists=True, dir_okay=False, help="Held-out records (default: the --data "
                              "records of split heldout).", panel=DATA)
    lr: float | None = option(None, min=0.0, help="Peak learning rate of the LLM and projector (default: 1e-5 SFT, "
                              "5e-7 DPO).", panel=OPTIM, show_default=False)
    vision_lr: float | None = option(None, min=0.0, help="Peak learning rate of the vision encoder (default: 2e-6 "
                                     "SFT, 1e-7 DPO; 0 freezes it).", panel=OPTIM, show_default=False)
    beta: float = option(0.2, min=0.0, help="DPO's beta.", panel=OPTIM)  # DPO's KL strength (the paper's)
    lora: bool = option(False, flag="--lora", help="Train LoRA adapters on every linear layer instead of all "
                        "weights; they are merged into the saved model.", panel=MODEL)
    lora_rank: int = option(16, min=1, help="LoRA rank.", panel=MODEL)
    lora_alpha: int = option(32, min=1, help="LoRA alpha.", panel=MODEL)
    lora_dropout: float = internal(0.05)
    epochs: float = option(1.0, min=0.0, help="Passes over the training records.", panel=OPTIM)
    max_steps: int = option(0, min=0, help="Optimizer steps (0: --epochs decides).", panel=OPTIM)
    batch_size: int = option(1, min=1, help="Records per process and micro step.", panel=OPTIM)
    eval_batch_size: int | None = internal(None)  # None: --batch-size
    warmup_ratio: float = option(0.03, min=0.0, max=1.0, help="Linear warm-up over this fraction of the steps, "
                                 "then --scheduler.", panel=OPTIM)
    scheduler: str = option("cosine", help="transformers' scheduler name: cosine, linear, constant...", panel=OPTIM)
    # 0: no truncation (a cut inside the image tokens breaks the model's inputs)
    max_length: int = option(0, min=0, help="Truncate sequences to this many tokens (0: never; a cut inside the "
                             "image tokens fails).", panel=OPTIM)
    gradient_checkpointing: bool = with_default(RunConfig, "gradient_checkpointing", True)
    cache_images: bool = option(False, flag="--cache-images", help="Decode each image file once and keep it in "
                                "memory instead of re-reading it for every batch: width x height x 3 bytes a distinct "
                                "frame (0.7 MB at 640x360, 6.2 MB at 1920x1080) in each process, for the whole run.",
                                panel=DATA)
    keep_checkpoints: int = with_default(RunConfig, "keep_checkpoints", 2)
    seed: int = run_option("seed", help="Seed of the data order and LoRA's initialisation.")

    @property
    def rates(self) -> tuple[float, float]:
        lr, vision_lr = PAPER_LR[self.method]
        return (lr if self.lr is None else self.lr), (vision_lr if self.vision_lr is None else self.vision_lr)

    def check(self) -> None:
        super().check()
        check_choices(self)
        if not self.data.is_file():
            raise ValueError(f"--data {self.data}: no such file")
        if self.val is not None and not self.val.is_file():
            raise ValueError(f"--val {self.val}: no such file")


class _TwoLearningRates:
    """Mixed into TRL's trainers: the optimizer gets the vision encoder and the LLM + projector as separate
    groups with their own learning rates (transformers' Trainer has one for all); the scheduler then scales
    each group from its own peak."""

    captioner_rates: tuple[float, float] = (0.0, 0.0)

    def create_optimizer(self, *args, **kwargs):
        if self.optimizer is None:
            model = self.model
            cls, options = self.get_optimizer_cls_and_kwargs(self.args, model)
            lr, vision_lr = self.captioner_rates
            groups = param_groups(model, lr, vision_lr, self.args.weight_decay,
                                  set(self.get_decay_parameter_names(model)))
            self.optimizer = cls(groups, **options)
        return self.optimizer

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        # transformers 4.57 saves VLMs (LLaVA-OneVision, Qwen2-VL, Idefics3...) under their legacy key names
        # (`_checkpoint_conversion_mapping` reversed), but the Trainer's resume loads the checkpoint into the
        # model without mapping them back and non-strictly: every weight is "missing" and the run silently goes
        # on from the starting weights. Here the keys are mapped as from_pretrained maps them, and loaded
        # strictly. PEFT adapters (saved by peft, plain names), FSDP and DeepSpeed keep the Trainer's own way.
        model = self.model if model is None else model
        mapping = getattr(model, "_checkpoint_conversion_mapping", None)
        shards = sorted(Path(resume_from_checkpoint).glob("model*.safetensors"))
        if (not mapping or not shards or hasattr(model, "peft_config") or self.is_fsdp_enabled
                or self.is_deepspeed_enabled):
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        from safetensors.torch import load_file

        state = {}
        for shard in shards:
            for key, value in load_file(str(shard)).items():
                for pattern, replacement in mapping.items():
                    key, replaced = re.subn(pattern, replacement, key)
                    if replaced:
                        break
                state[key] = value
        result = model.load_state_dict(state, strict=False)
        tied = set(getattr(model, "_tied_weights_keys", None) or ())  # not saved when tied to the embeddings
        missing = [k for k in result.missing_keys if k not in tied]
        if missing or result.unexpected_keys:
            raise RuntimeError(f"{resume_from_checkpoint} does not fit the model: missing {missing[:5]}, "
                               f"unexpected {result.unexpected_keys[:5]}")
        model.tie_weights()


def _callbacks(path: Path, quiet: bool):
    from transformers import ProgressCallback, TrainerCallback

    class LogJsonl(TrainerCallback):
        """TRL's log events as RUN/log.jsonl lines in vi's format (`RunLog`), on the main process: a train
        event as split train, an evaluation (eval_* keys) as split val with its eval_loss as the loss, each
        with TRL's own keys too. The end-of-run totals (train_runtime, mean train_loss) are no step of the
        curve: they go to stderr."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            if "train_runtime" in logs:
                log.info("vi train captioner: %s", " ".join(f"{k}={v:.6g}" for k, v in logs.items()))
                return
            logs = dict(logs)
            evaluation = any(k.startswith("eval_") for k in logs)
            loss = logs.get("eval_loss") if evaluation else logs.pop("loss", None)
            RunLog(path).write("val" if evaluation else "train", state.global_step, loss,
                               **{"epoch": state.epoch or 0.0, **logs})

    class StderrProgress(ProgressCallback):
        """The Trainer's progress bar (stderr), with its log lines on stderr too: stdout is vi's JSONL."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and self.training_bar is not None and logs:
                shown = {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in logs.items()}
                self.training_bar.write(" ".join(f"{k}={v}" for k, v in shown.items()), file=sys.stderr)

    return [LogJsonl()] + ([] if quiet else [StderrProgress()])


def _claim_output(config: CaptionerTrainConfig) -> str | None:
    """The Trainer checkpoint to resume from (None: a fresh run); see `claim_run`."""
    from accelerate import PartialState

    state = PartialState()  # under a launcher, one process per GPU: only the first changes the folder
    last = claim_run(config, state.is_main_process, prefix="checkpoint-")
    state.wait_for_everyone()
    return None if last is None else str(last)


def _trainer_args(config: CaptionerTrainConfig, cpu: bool, has_heldout: bool):
    import torch
    from trl import DPOConfig, SFTConfig

    common = dict(
        output_dir=str(config.output / CHECKPOINTS), learning_rate=config.rates[0], num_train_epochs=config.epochs,
        max_steps=config.max_steps or -1, per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.eval_batch_size or config.batch_size,
        gradient_accumulation_steps=config.grad_accum,
        weight_decay=config.weight_decay, warmup_ratio=config.warmup_ratio, lr_scheduler_type=config.scheduler,
        max_grad_norm=config.max_grad_norm, gradient_checkpointing=config.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False}, bf16=not cpu and torch.cuda.is_bf16_supported(),
        use_cpu=cpu, eval_strategy="steps" if has_heldout else "no", eval_steps=config.eval_every,
        save_strategy="steps", save_steps=config.save_every, save_total_limit=config.keep_checkpoints,
        logging_steps=config.log_every, logging_first_step=True, report_to=[], seed=config.seed,
        data_seed=config.seed, disable_tqdm=config.quiet, dataloader_pin_memory=not cpu,
        max_length=config.max_length or None)
    if config.method == "sft":
        # The loss on the completion (the frame captions) only, as the paper's SFT.
        return SFTConfig(**common, completion_only_loss=True)
    return DPOConfig(**common, beta=config.beta)


def _load(folder: Path, dtype):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(str(folder), local_files_only=True, dtype=dtype)


def build_trainer(config: CaptionerTrainConfig):
    """TRL's trainer for `config`, with the data, the model, the optimizer groups and the callbacks; not
    started. Also what a test inspects."""
    import torch
    from transformers import AutoProcessor, PrinterCallback, ProgressCallback, set_seed
    from trl import DPOTrainer, SFTTrainer
    from vi.core.models.resolve import resolve

    config.check()
    cpu = on_cpu(config.device)
    files = resolve(config.model, "vlm")
    train, heldout = load_split(config.data, config.val, config.method, decode=not config.cache_images)
    set_seed(config.seed)  # before the model: LoRA's adapters start random
    # bf16 weights on GPU, as the paper trains; float32 on CPU, where bf16 is slow and imprecise.
    dtype = torch.float32 if cpu else (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32)
    model = _load(files.folder, dtype)
    processor = AutoProcessor.from_pretrained(str(files.folder), local_files_only=True)
    lr, vision_lr = config.rates
    if vision_lr == 0:  # a frozen encoder: no gradients, no optimizer state
        from vi.pipelines.progresscaptioner.train_captioner_data import is_vision

        for name, param in model.named_parameters():
            param.requires_grad_(not is_vision(name))
    peft_config = None
    if config.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                                 target_modules="all-linear", task_type="CAUSAL_LM")
    args = _trainer_args(config, cpu, heldout is not None)
    options = dict(model=model, args=args, train_dataset=train, eval_dataset=heldout, processing_class=processor,
                   peft_config=peft_config, callbacks=_callbacks(config.output / LOG, config.quiet))
    if config.method == "sft":
        cls = type("CaptionerSFTTrainer", (_TwoLearningRates, SFTTrainer), {})
    else:
        cls = type("CaptionerDPOTrainer", (_TwoLearningRates, DPOTrainer), {})
        if not config.lora:  # the frozen reference: the starting model (LoRA: the base with adapters off)
            options["ref_model"] = _load(files.folder, dtype).eval()
    trainer = cls(**options)
    trainer.captioner_rates = (lr, vision_lr)
    if config.cache_images:  # the datasets hold paths: the collator decodes each file once, for train and eval
        trainer.data_collator = CachedImages(trainer.data_collator)
    # The Trainer prints its log lines on stdout; vi keeps them on stderr (or only in log.jsonl with --quiet).
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer, processor


def run_training(config: CaptionerTrainConfig) -> Path:
    """Train, then save the final model and processor in config.output; returns that folder."""
    config.check()
    resume_from = _claim_output(config)
    trainer, processor = build_trainer(config)
    if resume_from is not None:
        log.info("vi train captioner: resuming from %s", resume_from)
    elif trainer.eval_dataset is not None:
        trainer.evaluate()  # step 0: the held-out numbers before any update
    trainer.train(resume_from_checkpoint=resume_from)
    save_final(trainer, processor, config.output, config.lora)
    return config.output


def save_final(trainer, processor, folder: Path, lora: bool) -> None:
    """The trained model where vi caption-frames loads it: the full weights (a LoRA run's adapters merged)."""
    if not lora:
        trainer.save_model(str(folder))  # gathers sharded weights under FSDP/DeepSpeed; saves the processor too
    elif trainer.is_world_process_zero():
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        merged.save_pretrained(str(folder))
    if trainer.is_world_process_zero():
        processor.save_pretrained(str(folder))
        (folder / "training_args.bin").unlink(missing_ok=True)  # in the checkpoints already
        log.info("vi train captioner: model saved in %s (vi caption-frames --vlm %s)", folder, folder)
