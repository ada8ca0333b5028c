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

Run folder: RUN/ holds the final model and processor, RUN/checkpoints/checkpoint-N the Trainer's checkpoints
(model, optimizer, scheduler, RNG, data position), RUN/log.jsonl one line per log event: `kind` train (loss,
learning_rate, grad_norm; DPO also rewards/*), eval (held-out: eval_loss; DPO also eval_rewards/accuracies and
eval_rewards/margins), the first at step 0 before any update, so a run shows its own start.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from vi.core.progress import log
from vi.pipelines.progresscaptioner.train_captioner_data import CachedImages, load_split, param_groups

LOG, CHECKPOINTS = "log.jsonl", "checkpoints"
DEFAULT_MODEL = "llava-hf/llava-onevision-qwen2-7b-ov-hf"  # the paper's base (its 7B OneVision)
# The paper's learning rates. For DPO it gives one (5e-7); the vision encoder keeps SFT's ratio (1/5) to it.
PAPER_LR = {"sft": (1e-5, 2e-6), "dpo": (5e-7, 1e-7)}


@dataclass(frozen=True)
class CaptionerTrainConfig:
    """The options of `vi train captioner`; lr/vision_lr None take the paper's for `method`."""

    output: Path
    data: Path
    method: str = "sft"
    model: str = DEFAULT_MODEL
    val: Path | None = None
    lr: float | None = None
    vision_lr: float | None = None  # 0 freezes the vision encoder
    beta: float = 0.2  # DPO's KL strength (the paper's)
    lora: bool = False
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    epochs: float = 1.0
    max_steps: int = 0  # 0: `epochs` decides
    batch_size: int = 1
    eval_batch_size: int = 1
    grad_accum: int = 1
    weight_decay: float = 0.0
    warmup_ratio: float = 0.03
    scheduler: str = "cosine"
    max_grad_norm: float = 1.0
    max_length: int = 0  # 0: no truncation (a cut inside the image tokens breaks the model's inputs)
    gradient_checkpointing: bool = True
    cache_images: bool = False  # decode each image file once and keep it in memory (CachedImages)
    eval_every: int = 100
    save_every: int = 500
    log_every: int = 10
    keep_checkpoints: int = 2
    resume: bool = False
    overwrite: bool = False
    device: str = "auto"
    seed: int = 0
    quiet: bool = False

    @property
    def rates(self) -> tuple[float, float]:
        lr, vision_lr = PAPER_LR[self.method]
        return (lr if self.lr is None else self.lr), (vision_lr if self.vision_lr is None else self.vision_lr)

    def check(self) -> None:
        if self.method not in PAPER_LR:
            raise ValueError(f"--method must be sft or dpo, got {self.method!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")
        if self.resume and self.overwrite:
            raise ValueError("--resume continues the run in --output and --overwrite replaces it: give one")
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
        """Every log event as a line of RUN/log.jsonl (only the main process writes)."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            kind = "eval" if any(k.startswith("eval_") for k in logs) else (
                "summary" if "train_runtime" in logs else "train")
            row = {"kind": kind, "step": state.global_step, "epoch": round(state.epoch or 0.0, 4),
                   **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in logs.items()}}
            with path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(row) + "\n")

    class StderrProgress(ProgressCallback):
        """The Trainer's progress bar (stderr), with its log lines on stderr too: stdout is vi's JSONL."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and self.training_bar is not None and logs:
                shown = {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in logs.items()}
                self.training_bar.write(" ".join(f"{k}={v}" for k, v in shown.items()), file=sys.stderr)

    return [LogJsonl()] + ([] if quiet else [StderrProgress()])


def _claim_output(config: CaptionerTrainConfig) -> str | None:
    """The checkpoint to resume from (None: a fresh run). A folder holds one run: continued (--resume) or
    replaced (--overwrite); resuming drops the log lines after the checkpoint, which the run redoes."""
    from accelerate import PartialState
    from transformers.trainer_utils import get_last_checkpoint

    out, logfile = config.output, config.output / LOG
    checkpoints = out / CHECKPOINTS
    earlier = logfile.is_file() or checkpoints.is_dir()
    if earlier and not (config.resume or config.overwrite):
        raise ValueError(f"{out} holds an earlier run: give --resume to continue it or --overwrite to start again")
    last = get_last_checkpoint(str(checkpoints)) if config.resume and checkpoints.is_dir() else None
    state = PartialState()  # under a launcher, one process per GPU: only the first changes the folder
    if state.is_main_process:
        if earlier and config.overwrite:
            shutil.rmtree(checkpoints, ignore_errors=True)
            logfile.unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        if config.resume and last is None:
            log.warning("--resume: no checkpoint in %s yet; starting from step 0", checkpoints)
            logfile.unlink(missing_ok=True)
        if last is not None and logfile.is_file():
            step = int(Path(last).name.rsplit("-", 1)[1])
            rows = [r for r in logfile.read_text(encoding="utf-8").splitlines() if json.loads(r)["step"] <= step]
            logfile.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    state.wait_for_everyone()
    return last


def _trainer_args(config: CaptionerTrainConfig, cpu: bool, has_heldout: bool):
    import torch
    from trl import DPOConfig, SFTConfig

    common = dict(
        output_dir=str(config.output / CHECKPOINTS), learning_rate=config.rates[0], num_train_epochs=config.epochs,
        max_steps=config.max_steps or -1, per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.eval_batch_size, gradient_accumulation_steps=config.grad_accum,
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
    from vi.core.models.vlm import locate_vlm

    config.check()
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no cuda device is available here")
    cpu = config.device == "cpu" or not torch.cuda.is_available()
    files = locate_vlm(config.model)
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
