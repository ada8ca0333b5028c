"""`vi train stepdiff`: train StepDiff's projector (Sec. 3.3, Supp. S3) on a mixture of datasets.

Only the Perceiver resampler + head learn; the LLM is frozen and the encoder ran earlier (its
tokens come from feature stores, `vi encode-videos`). The recipe: AdamW, linear warm-up then
cosine decay, gradient accumulation up to the effective batch (micro batch x accumulation x
processes), gradient clipping, bf16/fp16 autocast on GPU. Multi-GPU and multi-node runs go
through accelerate (`accelerate launch` or `torchrun`): every process draws the same global
batch from the mixture and keeps its own slice; gradients are averaged by DDP.

Output folder:
- `checkpoints/step-NNNNNNN/`: projector weights + model.json (what `vi ask` / `vi predict`
  load), optimizer.pt, scheduler.pt and trainer_state.json (step, data position, config), each
  written whole to a temporary folder and renamed, so a kill never leaves half a checkpoint;
- `log.jsonl`: one line per logged step ({"split": "train"|"val", "step", "loss", ...});
  `--resume` continues from the last checkpoint and drops the log lines after it, so the log
  reads as one run.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from vi.core.progress import log, make_progress, stderr
from vi.core.seeding import seed_everything
from vi.core.training import make_accelerator, publish_checkpoint, trim_log
from vi.pipelines.stepdiff.train_data import Dataset, Mixture, Sample, held_out
from vi.pipelines.stepdiff.model import StepDiffModel
from vi.pipelines.stepdiff.prompt import Sequence

CHECKPOINTS, LOG, STATE = "checkpoints", "log.jsonl", "trainer_state.json"


@dataclass
class TrainConfig:
    output: Path
    llm: str = "smollm2-135m"
    template: str = "auto"
    steps: int = 1000
    batch_size: int = 8  # per process and micro step
    grad_accum: int = 1
    lr: float = 1e-4  # StepDiff: AdamW, 1e-4
    weight_decay: float = 0.0
    warmup_steps: int = 100
    max_grad_norm: float = 1.0
    latents: int = 32
    layers: int = 2
    projector_dim: int = 0
    heads: int = 8
    val_fraction: float = 0.0
    val_samples: int = 512
    eval_every: int = 100
    save_every: int = 500
    log_every: int = 10
    keep_checkpoints: int = 3
    init_from: Path | None = None
    resume: bool = False
    overwrite: bool = False
    gradient_checkpointing: bool = False
    device: str = "auto"
    seed: int = 0
    quiet: bool = False
    weights: list[float] | None = None
    data: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}


def sequence_for(model: StepDiffModel, sample: Sample) -> Sequence:
    if sample.kind == "pair_qa":
        question, answer = sample.texts
        sequence, _ = model.format.pair_question(question, (sample.clips[0], sample.clips[1]), answer=answer)
        return model.format.finished(sequence)
    return model.format.interleaved(list(sample.clips), list(sample.texts))


def split_held_out(datasets: list[Dataset], fraction: float, seed: int) -> tuple[list[Dataset], list[Sample]]:
    if fraction <= 0:
        return datasets, []
    train, val = [], []
    for dataset in datasets:
        keep = [s for s in dataset.samples if not held_out(s, fraction, seed)]
        val.extend(s for s in dataset.samples if held_out(s, fraction, seed))
        train.append(Dataset(dataset.name, dataset.kind, keep, dataset.skipped))
    return train, val


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest complete checkpoint under a run folder (or `folder` itself when it is one)."""
    if (folder / "model.json").is_file():
        return folder
    found = sorted(p for p in (folder / CHECKPOINTS).glob("step-*") if (p / STATE).is_file())
    return found[-1] if found else None


class Trainer:
    def __init__(self, config: TrainConfig, model: StepDiffModel, features, train: list[Dataset],
                 val: list[Sample], accelerator):
        self.config, self.model, self.features, self.val = config, model, features, val
        self.accelerator = accelerator
        self.mixture = Mixture(train, config.weights, config.seed)
        params = [p for p in model.projector.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        from transformers import get_cosine_schedule_with_warmup

        self.scheduler = get_cosine_schedule_with_warmup(self.optimizer, config.warmup_steps, config.steps)
        self.step = 0
        self.window = [0.0, 0]  # train loss summed over the steps since the last log line, and their count
        self.log_path = config.output / LOG

    # --- state ---------------------------------------------------------------------------------

    def restore(self, checkpoint: Path, weights_only: bool) -> None:
        from safetensors.torch import load_file

        weights = load_file(str(checkpoint / "projector.safetensors"))
        if weights_only:
            self._same_model(checkpoint)
        try:
            self.accelerator.unwrap_model(self.model.projector).load_state_dict(weights)
        except RuntimeError as exc:
            raise ValueError(f"{checkpoint}: its projector does not fit this model ({exc}); --init-from needs "
                             "the same encoder, LLM and projector options") from None
        if weights_only:
            return
        state = json.loads((checkpoint / STATE).read_text())
        self.optimizer.load_state_dict(torch.load(checkpoint / "optimizer.pt", map_location="cpu"))
        self.scheduler.load_state_dict(torch.load(checkpoint / "scheduler.pt", map_location="cpu"))
        self.mixture.load_state(state["data"])
        self.step, self.window = int(state["step"]), list(state.get("window", [0.0, 0]))
        scaler = getattr(self.accelerator, "scaler", None)
        if scaler is not None and (checkpoint / "scaler.pt").is_file():  # fp16: the loss scale and its history
            scaler.load_state_dict(torch.load(checkpoint / "scaler.pt", map_location="cpu"))
        if self.accelerator.is_main_process:  # one run, one log
            trim_log(self.log_path, self.step)

    def _same_model(self, checkpoint: Path) -> None:
        """--init-from: the other run's projector must sit between the same encoder and LLM."""
        from vi.core.features import differing_keys
        from vi.pipelines.stepdiff.model import ModelConfig

        other, mine = ModelConfig.load(checkpoint), self.model.config
        differ = differing_keys(other.encoder, mine.encoder)
        if differ or other.llm != mine.llm:
            what = f"encoder ({', '.join(differ)})" if differ else f"LLM ({other.llm}, not {mine.llm})"
            raise ValueError(f"--init-from {checkpoint}: it was trained with another {what}; its projector "
                             "would read tokens it never saw")

    def save(self) -> None:
        self.accelerator.wait_for_everyone()
        if not self.accelerator.is_main_process:
            return
        root = self.config.output / CHECKPOINTS
        final = root / f"step-{self.step:07d}"
        partial = root / f".{final.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        projector = self.model.projector
        self.model.projector = self.accelerator.unwrap_model(projector)
        try:
            self.model.save(partial)
        finally:
            self.model.projector = projector
        torch.save(self.optimizer.state_dict(), partial / "optimizer.pt")
        torch.save(self.scheduler.state_dict(), partial / "scheduler.pt")
        if getattr(self.accelerator, "scaler", None) is not None:
            torch.save(self.accelerator.scaler.state_dict(), partial / "scaler.pt")
        (partial / STATE).write_text(json.dumps({"step": self.step, "data": self.mixture.state(),
                                                 "window": self.window,
                                                 "config": self.config.as_json()}, indent=1) + "\n")
        publish_checkpoint(partial, final, self.config.keep_checkpoints)

    def write_log(self, entry: dict) -> None:
        if self.accelerator.is_main_process:
            with open(self.log_path, "a") as handle:
                handle.write(json.dumps(entry) + "\n")

    # --- the work ------------------------------------------------------------------------------

    def _features(self, samples: list[Sample]) -> dict[str, torch.Tensor]:
        return {clip: self.features.get(clip) for s in samples for clip in s.clips}

    def _loss(self, samples: list[Sample]) -> torch.Tensor:
        sequences = [sequence_for(self.model, s) for s in samples]
        with self.accelerator.autocast():
            return self.model.loss(sequences, self._features(samples))

    def val_subset(self) -> list[Sample]:
        """At most --val-samples held-out samples, drawn from every dataset alike (a seeded shuffle), the same
        ones at every evaluation."""
        import random

        if len(self.val) <= self.config.val_samples:
            return self.val
        return random.Random(f"{self.config.seed}:val").sample(self.val, self.config.val_samples)

    @torch.no_grad()
    def held_out_loss(self) -> float | None:
        """Mean negative log-likelihood per answer token over the held-out samples (all processes)."""
        if not self.val:
            return None
        self.model.projector.eval()
        mine = self.val_subset()[self.accelerator.process_index::self.accelerator.num_processes]
        total = torch.zeros(2, device=self.accelerator.device)
        for first in range(0, len(mine), self.config.batch_size):
            batch = mine[first:first + self.config.batch_size]
            with self.accelerator.autocast():
                log_probs, _ = self.model.counted_log_probs([sequence_for(self.model, s) for s in batch],
                                                            self._features(batch))
            total += torch.stack([-log_probs.float().sum(), torch.tensor(float(log_probs.numel()),
                                                                         device=total.device)])
        total = self.accelerator.reduce(total, "sum")
        self.model.projector.train()
        return float(total[0] / total[1])

    def train_step(self) -> float:
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        losses = []
        for micro in range(self.config.grad_accum):
            samples = self.mixture.take(self.config.batch_size * world)[rank::world]
            last = micro == self.config.grad_accum - 1
            sync = self.accelerator.no_sync(self.model.projector) if not last else _nothing()
            with sync:
                loss = self._loss(samples)
                self.accelerator.backward(loss / self.config.grad_accum)
            losses.append(loss.detach())
        if self.config.max_grad_norm > 0:
            self.accelerator.clip_grad_norm_(self.model.projector.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return float(self.accelerator.reduce(torch.stack(losses).mean(), "mean"))

    def run(self) -> dict:
        config = self.config
        samples_per_step = config.batch_size * config.grad_accum * self.accelerator.num_processes
        if self.step == 0:
            self._evaluate()
        self.model.projector.train()
        started, steps_timed = time.perf_counter(), 0
        with make_progress(config.quiet or not self.accelerator.is_main_process) as progress:
            bar = progress.add_task("train stepdiff", total=config.steps, completed=self.step)
            while self.step < config.steps:
                loss = self.train_step()
                if not math.isfinite(loss):
                    raise RuntimeError(f"step {self.step}: the training loss is {loss}; lower --lr")
                self.window = [self.window[0] + loss, self.window[1] + 1]
                steps_timed += 1
                progress.update(bar, advance=1, description=f"train stepdiff loss {loss:.3f}")
                if self.step % config.log_every == 0 or self.step == config.steps:
                    seconds = time.perf_counter() - started
                    self.write_log({"split": "train", "step": self.step, "loss": round(self.window[0] / self.window[1], 5),
                                    "lr": self.scheduler.get_last_lr()[0],
                                    "samples_per_s": round(steps_timed * samples_per_step / seconds, 3),
                                    "samples": self.step * samples_per_step})
                    started, steps_timed, self.window = time.perf_counter(), 0, [0.0, 0]
                if self.step % config.eval_every == 0 or self.step == config.steps:
                    self._evaluate()
                if self.step % config.save_every == 0 or self.step == config.steps:
                    self.save()
        return {"step": self.step, "output": str(config.output)}

    def _evaluate(self) -> None:
        loss = self.held_out_loss()
        if loss is not None:
            self.write_log({"split": "val", "step": self.step, "loss": round(loss, 5), "samples": len(self.val)})
            if self.accelerator.is_main_process:
                stderr.print(f"vi train stepdiff: step {self.step}: held-out loss {loss:.4f}", highlight=False)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def train(config: TrainConfig, train_sets: list[Dataset], val: list[Sample], features, placement, accelerator
          ) -> dict:
    """Build the model on `placement`, restore or initialise it, and train (see the module doc)."""
    seed_everything(config.seed)
    model = StepDiffModel.build(config.llm, features.info, placement, config.template, latents=config.latents,
                                layers=config.layers, dim=config.projector_dim, heads=config.heads)
    if config.gradient_checkpointing:
        # transformers recomputes activations only in train mode; the LLM stays frozen (no weight grads),
        # and its dropout probabilities are the config's (0 in Llama, Qwen2, SmolLM2).
        model.llm.model.gradient_checkpointing_enable()
        model.llm.model.config.use_cache = False
        model.llm.model.train()
    trainer = Trainer(config, model, features, train_sets, val, accelerator)
    checkpoint = latest_checkpoint(config.output) if config.resume else None
    if config.resume and checkpoint is None:
        log.warning("--resume: no checkpoint in %s yet; starting from step 0", config.output)
    if checkpoint is not None:
        trainer.restore(checkpoint, weights_only=False)
        stderr.print(f"vi train stepdiff: resumed from {checkpoint} (step {trainer.step})", highlight=False)
    elif config.init_from is not None:
        start = latest_checkpoint(config.init_from)
        if start is None:
            raise ValueError(f"--init-from {config.init_from}: no checkpoint there")
        trainer.restore(start, weights_only=True)
    # The scheduler stays unprepared: accelerate would step it once per process, while here every
    # process takes its slice of one global batch per step.
    model.projector, trainer.optimizer = accelerator.prepare(model.projector, trainer.optimizer)
    return trainer.run()


def _check_same_data(accelerator, train_sets: list[Dataset], val: list[Sample]) -> None:
    """Every process must hold the same samples (each takes its slice of one global batch): a store that
    grew while they started, or files that differ between nodes, would silently break that."""
    if accelerator.num_processes == 1:
        return
    import hashlib

    from accelerate.utils import gather_object

    ids = "\n".join(s.id for d in train_sets for s in d.samples) + "\nval\n" + "\n".join(s.id for s in val)
    seen = gather_object([hashlib.sha256(ids.encode()).hexdigest()])
    if len(set(seen)) > 1:
        raise ValueError("the processes read different training samples (a feature store still being written? files "
                         "that differ between nodes?); wait for vi encode-videos to finish and start again")


def _claim_output(config: TrainConfig, remove: bool = True) -> None:
    """A run folder holds one run: an earlier one is continued (--resume) or replaced (--overwrite)."""
    earlier = (config.output / LOG).is_file() or any((config.output / CHECKPOINTS).glob("step-*"))
    if earlier and not (config.resume or config.overwrite):
        raise ValueError(f"{config.output} holds an earlier run: give --resume to continue it or --overwrite to "
                         "start again")
    if config.resume and config.overwrite:
        raise ValueError("--resume continues the run in --output and --overwrite replaces it: give one")
    if earlier and config.overwrite and remove:
        shutil.rmtree(config.output / CHECKPOINTS, ignore_errors=True)
        (config.output / LOG).unlink(missing_ok=True)
    config.output.mkdir(parents=True, exist_ok=True)


def run_training(config: TrainConfig, val_specs: list[str], feature_dirs: list[Path], mixed_precision: str = "auto"
                 ) -> dict:
    """Read the datasets and the features, then train (what `vi train stepdiff` does)."""
    from vi.core.devices import Placement
    from vi.core.features import FeatureStore
    from vi.pipelines.stepdiff import train_data as sd

    if not config.data:
        raise ValueError("give at least one --data KIND:PATH")
    if config.resume and config.init_from is not None:
        raise ValueError("--resume continues this run's own checkpoint; --init-from starts a new run from another "
                         "one: give one")
    accelerator = make_accelerator(config.device, mixed_precision)
    if accelerator.num_processes > 1 and any(sd.parse_spec(s)[1] == "-" for s in [*config.data, *val_specs]):
        raise ValueError("a dataset on stdin (-) cannot be split across processes: every process reads a different "
                         "part of the pipe. Write it to a file first (e.g. vi encode-videos ... -o clips.jsonl)")
    datasets, named = sd.read_datasets(config.data, "train")
    val_sets, val_named = sd.read_datasets(val_specs, "train") if val_specs else ([], [])
    stores = list(dict.fromkeys([str(p) for p in feature_dirs] + named + val_named))
    if not stores:
        raise ValueError("no feature store: give --features DIR (vi encode-videos --store DIR), or records whose "
                         "features.store names one")
    features = FeatureStore([Path(s) for s in stores])
    datasets = sd.drop_unencoded(datasets, features.__contains__)
    train_sets, val = split_held_out(datasets, config.val_fraction, config.seed)
    val += [s for d in sd.drop_unencoded(val_sets, features.__contains__) for s in d.samples]
    _check_same_data(accelerator, train_sets, val)
    _claim_output(config, remove=accelerator.is_main_process)  # every process checks; one removes
    accelerator.wait_for_everyone()
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(accelerator.mixed_precision, "float32")
    placement = Placement(str(accelerator.device), dtype)
    stderr.print(f"vi train stepdiff: {', '.join(f'{d.name} ({len(d.samples)} samples)' for d in train_sets)}; "
                 f"{len(val)} held out; {accelerator.num_processes} process(es) on {accelerator.device}, "
                 f"precision {accelerator.mixed_precision}", highlight=False)
    return train(config, train_sets, val, features, placement, accelerator)
