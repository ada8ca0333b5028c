"""`vi train stepdiff`: train StepDiff's projector (Sec. 3.3, Supp. S3) on a mixture of datasets.

Only the Perceiver resampler + head learn; the LLM is frozen and the encoder ran earlier (its
tokens come from feature stores, `vi encode-videos`). The recipe: AdamW, linear warm-up then
cosine decay, gradient accumulation up to the effective batch (micro batch x accumulation x
processes), gradient clipping, bf16/fp16 autocast on GPU. Multi-GPU and multi-node runs go
through accelerate (`accelerate launch` or `torchrun`): every process draws the same global
batch from the mixture and keeps its own slice; gradients are averaged by DDP.

The run folder, the log and the loop are `vi.core.training`'s (claimed, --resume, --overwrite; log.jsonl
lines `{"split": "train"|"val", "step", "loss", ...}`). What is StepDiff's own: the model, the
batches from the mixture, and what a checkpoint holds: `checkpoints/step-NNNNNNN/` has the projector's
weights + model.json (what `vi ask` / `vi predict` load), optimizer.pt, scheduler.pt and
trainer_state.json (step, data position, config).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from vi.core.progress import stderr
from vi.core.seeding import seed_everything
from vi.core.training import TrainingLoop, claim_run, make_accelerator
from vi.core.training import latest_checkpoint as latest_in_run
from vi.pipelines.stepdiff.train_config import TrainConfig
from vi.pipelines.stepdiff.model import StepDiffModel
from vi.pipelines.stepdiff.prompt import Sequence
from vi.pipelines.stepdiff.train_data import Dataset, Mixture, Sample, held_out


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
    return latest_in_run(folder)


class Trainer(TrainingLoop):
    """StepDiff's part of the loop: the projector learns, batches come from the mixture, a checkpoint holds
    the projector (what `vi ask` loads) and the mixture's data position."""

    name = "train stepdiff"

    def __init__(self, config: TrainConfig, model: StepDiffModel, features, train: list[Dataset],
                 val: list[Sample], accelerator):
        super().__init__(config, accelerator)
        self.model, self.features, self.val = model, features, val
        self.mixture = Mixture(train, config.mixture_weights(), config.seed)
        params = [p for p in model.projector.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        from transformers import get_cosine_schedule_with_warmup

        self.scheduler = get_cosine_schedule_with_warmup(self.optimizer, config.warmup_steps, config.steps)

    @property
    def trained(self):
        return self.model.projector

    @property
    def samples_per_step(self) -> int:
        return self.config.batch_size * self.config.grad_accum * self.accelerator.num_processes

    # --- state ---------------------------------------------------------------------------------

    def save_model(self, folder: Path) -> None:
        projector = self.model.projector
        self.model.projector = self.accelerator.unwrap_model(projector)
        try:
            self.model.save(folder)
        finally:
            self.model.projector = projector

    def load_model(self, checkpoint: Path, state: dict) -> None:
        self._load_projector(checkpoint)
        self.mixture.load_state(state["data"])

    def extra_state(self) -> dict:
        return {"data": self.mixture.state()}

    def init_from(self, checkpoint: Path) -> None:
        """--init-from: another run's projector, which must sit between the same encoder and LLM."""
        from vi.core.features import differing_keys
        from vi.pipelines.stepdiff.model import ModelConfig

        other, mine = ModelConfig.load(checkpoint), self.model.config
        differ = differing_keys(other.encoder, mine.encoder)
        if differ or other.llm != mine.llm:
            what = f"encoder ({', '.join(differ)})" if differ else f"LLM ({other.llm}, not {mine.llm})"
            raise ValueError(f"--init-from {checkpoint}: it was trained with another {what}; its projector "
                             "would read tokens it never saw")
        self._load_projector(checkpoint)

    def _load_projector(self, checkpoint: Path) -> None:
        from safetensors.torch import load_file

        weights = load_file(str(checkpoint / "projector.safetensors"))
        try:
            self.accelerator.unwrap_model(self.model.projector).load_state_dict(weights)
        except RuntimeError as exc:
            raise ValueError(f"{checkpoint}: its projector does not fit this model ({exc}); --init-from needs "
                             "the same encoder, LLM and projector options") from None

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

    def held_out(self) -> tuple[float, dict] | None:
        """Mean negative log-likelihood per answer token over the held-out samples (all processes)."""
        if not self.val:
            return None
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
        return float(total[0] / total[1]), {"samples": len(self.val)}

    def train_step(self) -> float:
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        losses = []
        for micro in range(self.config.grad_accum):
            samples = self.mixture.take(self.config.batch_size * world)[rank::world]
            last = micro == self.config.grad_accum - 1
            with contextlib.nullcontext() if last else self.accelerator.no_sync(self.model.projector):
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

    def train_metrics(self) -> dict:
        return {"samples": self.step * self.samples_per_step}


def train(config: TrainConfig, train_sets: list[Dataset], val: list[Sample], features, placement, accelerator,
          checkpoint: Path | None = None) -> dict:
    """Build the model on `placement`, restore it from `checkpoint` (--resume) or initialise it, and train
    (see the module doc)."""
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
    if checkpoint is not None:
        trainer.restore(checkpoint)
        stderr.print(f"vi train stepdiff: resumed from {checkpoint} (step {trainer.step})", highlight=False)
    elif config.init_from is not None:
        start = latest_checkpoint(config.init_from)
        if start is None:
            raise ValueError(f"--init-from {config.init_from}: no checkpoint there")
        trainer.init_from(start)
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


def run_training(config: TrainConfig) -> dict:
    """Read the datasets and the features, then train (what `vi train stepdiff` does)."""
    from vi.core.devices import Placement
    from vi.core.features import FeatureStore
    from vi.pipelines.stepdiff import train_data as sd

    config.check()
    accelerator = make_accelerator(config.device, config.mixed_precision)
    if accelerator.num_processes > 1 and any(sd.parse_spec(s)[1] == "-" for s in [*config.data, *config.val]):
        raise ValueError("a dataset on stdin (-) cannot be split across processes: every process reads a different "
                         "part of the pipe. Write it to a file first (e.g. vi encode-videos ... -o clips.jsonl)")
    datasets, named = sd.read_datasets(config.data, "train")
    val_sets, val_named = sd.read_datasets(config.val, "train") if config.val else ([], [])
    stores = list(dict.fromkeys([str(p) for p in config.features] + named + val_named))
    if not stores:
        raise ValueError("no feature store: give --features DIR (vi encode-videos --store DIR), or records whose "
                         "features.store names one")
    features = FeatureStore([Path(s) for s in stores])
    datasets = sd.drop_unencoded(datasets, features.__contains__)
    train_sets, val = split_held_out(datasets, config.val_fraction, config.seed)
    val += [s for d in sd.drop_unencoded(val_sets, features.__contains__) for s in d.samples]
    _check_same_data(accelerator, train_sets, val)
    checkpoint = claim_run(config, accelerator.is_main_process)  # every process checks; one changes the folder
    accelerator.wait_for_everyone()
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(accelerator.mixed_precision, "float32")
    placement = Placement(str(accelerator.device), dtype)
    stderr.print(f"vi train stepdiff: {', '.join(f'{d.name} ({len(d.samples)} samples)' for d in train_sets)}; "
                 f"{len(val)} held out; {accelerator.num_processes} process(es) on {accelerator.device}, "
                 f"precision {accelerator.mixed_precision}", highlight=False)
    return train(config, train_sets, val, features, placement, accelerator, checkpoint)
