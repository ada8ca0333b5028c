"""`vi train showhowto`: fine-tune ShowHowTo's generator (the U-Net and the image-token projection;
the VAE and the CLIP encoders stay frozen) on datasets `vi export showhowto` wrote.

Batches (paper Sec. 4): every step draws one length k in [--min-frames, --max-frames] (at most the
longest sequence), then sequences at least k long, each cut to k consecutive frames from a random
start; frame 0 of the cut is the input image, its prompt tau_0. The draw depends on (seed, step,
micro step) only, and so does the noise, so a resumed run continues the same loss curve.
`--prompts joined` is the paper's ablation: every frame gets the cut's prompts joined into one.

The recipe: AdamW, linear warm-up then a constant rate (DynamiCrafter's fine-tuning), gradient
clipping and accumulation, classifier-free-guidance dropout of the text (`--drop-text`) and of the
image (`--drop-image`), an optional EMA of the weights (`--ema DECAY`: checkpoints then hold the EMA
weights to generate with), bf16/fp16 autocast on GPU, gradient checkpointing, and accelerate for
several GPUs or nodes (DDP; every process draws the global batch and keeps its slice).
`--cache-latents` runs the frozen encoders once per frame and prompt (VAE posterior, CLIP image
embedding, CLIP text states) and keeps them in memory instead of at every step.

The run folder, the log and the loop are `vi.core.training`'s. The run folder: `base/` (the frozen
parts, linked or copied once), `checkpoints/step-N/` (a model folder `vi generate` loads: unet/,
image_proj/, showhowto.json naming ../../base; plus `training/` with the optimizer, scheduler, EMA
and step), `log.jsonl`.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from vi.core.config import option, with_default
from vi.core.progress import stderr
from vi.core.seeding import record_seed, seed_everything
from vi.core.training import (CHECKPOINTS, DATA, MODEL, OPTIM, RUN, STATE, RunConfig, TrainingLoop, claim_run,
                              make_accelerator, mixed_precision_option, run_option)
from vi.core.training import latest_checkpoint as latest_in_run
from vi.pipelines.showhowto.generator import ShowHowToGenerator
from vi.pipelines.showhowto.generator_data import DatasetSequence, read_dataset
from vi.pipelines.showhowto.generator_model import CONFIG, FROZEN, TRAINED, load_parts, save_parts

TRAINING = "training"  # a checkpoint's training state, beside the model folder vi generate loads
PROMPTS = ("per-frame", "joined")


@dataclass(kw_only=True)
class GeneratorTrainConfig(RunConfig):
    """The options of `vi train showhowto`."""

    data: list[Path] = option(default_factory=list, flag="--data", exists=True, file_okay=False,
                              help="A vi export showhowto folder (repeatable).", panel=DATA, show_default=False)
    model: Path = option(exists=True, file_okay=False, help="The generator to start from: a model folder (docs/showhowto.md: "
                         "converting DynamiCrafter) or a checkpoint.", panel=MODEL, show_default=False)
    val: list[Path] = option(default_factory=list, flag="--val", exists=True, file_okay=False,
                             help="A held-out dataset folder.", panel=DATA)
    val_fraction: float = option(0.0, min=0.0, max=0.9, help="Hold out this fraction of the videos (a stable hash).",
                                 panel=DATA)
    min_frames: int = option(2, min=2, help="Shortest cut (the input frame and one step).", panel=DATA)
    # ShowHowTo: training on <= 8 consecutive steps was best
    max_frames: int = option(8, min=2, help="Longest cut.", panel=DATA)
    prompts: str = option("per-frame", help="per-frame (each frame its own prompt, the paper's model) or joined "
                          "(every frame the cut's prompts joined: the ablation).", panel=MODEL)
    cache_latents: bool = option(False, flag="--cache-latents", help="Run the frozen encoders once per frame and "
                                 "prompt and keep their outputs in memory.", panel=DATA)
    steps: int = option(1000, min=1, help="Optimizer steps.", panel=OPTIM)
    batch_size: int = option(4, min=1, help="Sequences per process and micro step.", panel=OPTIM)
    lr: float = option(1e-5, min=0.0, help="AdamW learning rate (constant after warm-up).", panel=OPTIM)
    weight_decay: float = with_default(RunConfig, "weight_decay", 1e-2)
    warmup_steps: int = option(100, min=0, help="Linear warm-up steps.", panel=OPTIM)
    drop_text: float = option(0.05, min=0.0, max=1.0, help="Probability of training without the prompts.",
                              panel=OPTIM)
    drop_image: float = option(0.05, min=0.0, max=1.0, help="Probability of training without the image.",
                               panel=OPTIM)
    ema: float = option(0.0, min=0.0, max=0.99999, help="EMA decay of the weights (0: off); checkpoints then hold "
                        "the EMA weights.", panel=OPTIM)
    gradient_checkpointing: bool = run_option("gradient_checkpointing", help="Recompute the U-Net's activations in "
                                              "the backward pass: less memory.")
    mixed_precision: str = mixed_precision_option(RUN)
    seed: int = run_option("seed", help="Seed of the batches, the noise and the dropped conditions.")

    def check(self) -> None:
        super().check()
        if not self.data:
            raise ValueError("give at least one --data DIR (the --out folder of vi export showhowto)")
        if not 2 <= self.min_frames <= self.max_frames:
            raise ValueError(f"--min-frames {self.min_frames} --max-frames {self.max_frames}: need "
                             "2 <= min <= max (frame 0 is the input image, so a sequence has a step)")
        if self.prompts not in PROMPTS:
            raise ValueError(f"--prompts must be one of {', '.join(PROMPTS)}, got {self.prompts!r}")
        if not 0 <= self.ema < 1:
            raise ValueError(f"--ema is a decay in [0, 1) (0: off), got {self.ema}")


def split(sequences: list[DatasetSequence], fraction: float, seed: int) -> tuple[list, list]:
    """A stable share of the videos held out: one video's sequences all on one side."""
    if fraction <= 0:
        return sequences, []
    held = [s for s in sequences if (record_seed(seed, f"val:{s.video or s.key}") % 10_000) < fraction * 10_000]
    return [s for s in sequences if s not in held], held


class Batches:
    """The deterministic batch of a step: (sequences, start of each cut, k)."""

    def __init__(self, sequences: list[DatasetSequence], config: GeneratorTrainConfig):
        self.sequences, self.config = sequences, config
        self.longest = max(len(s.prompts) for s in sequences)
        if self.longest < config.min_frames:
            raise ValueError(f"no training sequence has --min-frames {config.min_frames} frames (the longest has "
                             f"{self.longest})")

    def draw(self, step: int, micro: int, size: int) -> tuple[list[DatasetSequence], list[int], int]:
        rng = random.Random(f"{self.config.seed}:{step}:{micro}")
        k = rng.randint(self.config.min_frames, min(self.config.max_frames, self.longest))
        eligible = [s for s in self.sequences if len(s.prompts) >= k]
        chosen = rng.sample(eligible, size) if len(eligible) >= size else rng.choices(eligible, k=size)
        return chosen, [rng.randint(0, len(s.prompts) - k) for s in chosen], k


class Encoded:
    """The frozen encoders' outputs for cuts of sequences, computed each time or cached once."""

    def __init__(self, generator: ShowHowToGenerator, cache: bool, size: int):
        self.g, self.cache, self.size = generator, cache, size
        # keyed by the sequence object: two datasets (--data, --val) may use the same keys
        self.frames: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self.texts: dict[str, torch.Tensor] = {}

    def pixels(self, sequence: DatasetSequence) -> torch.Tensor:
        tiles = np.stack([np.asarray(t, np.float32) for t in sequence.tiles(self.size)])
        return torch.from_numpy(tiles).permute(0, 3, 1, 2).div(127.5).sub(1).to(self.g.device)

    def _frame_features(self, sequence: DatasetSequence, first: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(VAE moments of the k frames, CLIP image embedding of the first)."""
        if not self.cache:
            pixels = self.pixels(sequence)[first:first + k]
            return self.g.latent_moments(pixels), self.g.encode_image(pixels[:1])[0]
        if (id(sequence), 0) not in self.frames:
            pixels = self.pixels(sequence)
            moments, embeds = self.g.latent_moments(pixels), self.g.encode_image(pixels)
            for i in range(len(pixels)):
                self.frames[(id(sequence), i)] = (moments[i], embeds[i])
        parts = [self.frames[(id(sequence), first + i)] for i in range(k)]
        return torch.stack([m for m, _ in parts]), parts[0][1]

    def text(self, prompts: list[list[str]]) -> torch.Tensor:
        if not self.cache:
            return self.g.encode_prompts(prompts)
        missing = sorted({t for p in prompts for t in p} - self.texts.keys())
        if missing:
            for text, states in zip(missing, self.g.encode_prompts([missing])[0].split(self.g.config.text_tokens)):
                self.texts[text] = states
        return torch.stack([torch.cat([self.texts[t] for t in p]) for p in prompts])

    def batch(self, sequences, starts, k, joined: bool, generator: torch.Generator):
        moments, embeds, prompts = [], [], []
        for sequence, first in zip(sequences, starts):
            m, e = self._frame_features(sequence, first, k)
            moments.append(m)
            embeds.append(e)
            cut = sequence.prompts[first:first + k]
            prompts.append([" ".join(cut)] * k if joined else cut)
        flat = self.g.sample_latents(torch.cat(moments), generator)
        latents = flat.reshape(len(sequences), k, *flat.shape[1:]).permute(0, 2, 1, 3, 4)
        return latents, torch.stack(embeds), self.text(prompts)


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest complete checkpoint of a run folder (or `folder` itself when it is a model folder)."""
    if (folder / CONFIG).is_file() and not (folder / CHECKPOINTS).is_dir():
        return folder
    return latest_in_run(folder, f"{TRAINING}/{STATE}")


class Trainer(TrainingLoop):
    """ShowHowTo's part of the loop: the U-Net and the image projection learn (`model`: the generator,
    prepared by accelerate once `run_training` has), with batches, noise and dropped conditions drawn
    from (seed, step); a checkpoint is a model folder plus `training/` (the loop's state, and with --ema
    the raw weights and the EMA's)."""

    name = "train showhowto"
    state_folder = TRAINING

    def __init__(self, config: GeneratorTrainConfig, generator: ShowHowToGenerator, train: list[DatasetSequence],
                 val: list[DatasetSequence], accelerator):
        from transformers import get_constant_schedule_with_warmup

        super().__init__(config, accelerator)
        self.g, self.model, self.val = generator, generator, val
        self.batches = Batches(train, config)
        self.encoded = Encoded(generator, config.cache_latents, generator.config.image_size)
        self.optimizer = torch.optim.AdamW(generator.trainable(), lr=config.lr, weight_decay=config.weight_decay)
        self.scheduler = get_constant_schedule_with_warmup(self.optimizer, config.warmup_steps)
        self.ema = None
        if config.ema:
            from diffusers.training_utils import EMAModel

            self.ema = EMAModel(generator.trainable(), decay=config.ema)
        self.empty: dict[int, torch.Tensor] = {}  # k -> the empty prompts' states (the dropped text)

    @property
    def trained(self):
        return self.model

    @property
    def samples_per_step(self) -> int:
        return self.config.batch_size * self.config.grad_accum * self.accelerator.num_processes

    def _empty(self, k: int) -> torch.Tensor:
        if k not in self.empty:
            self.empty[k] = self.g.encode_prompts([[""] * k])
        return self.empty[k]

    def _generator(self, *parts) -> torch.Generator:
        seed = record_seed(self.config.seed, ":".join(map(str, parts)))
        return torch.Generator(device=self.g.device).manual_seed(seed)

    # --- state ---------------------------------------------------------------------------------

    def save_model(self, folder: Path) -> None:
        parts = replace(self.g.parts, config=replace(self.g.config, base="../../base"))
        if self.ema is None:
            save_parts(parts, folder, TRAINED)
            return
        # the model folder holds the EMA weights; training/ the raw ones to resume
        torch.save(self._trainable_state(), folder / TRAINING / "raw.pt")
        torch.save(self.ema.state_dict(), folder / TRAINING / "ema.pt")
        with self._ema_weights():
            save_parts(parts, folder, TRAINED)

    def _trainable_state(self) -> dict:
        return {"unet": self.g.unet.state_dict(), "image_proj": self.g.image_proj.state_dict()}

    @contextlib.contextmanager
    def _ema_weights(self):
        params = self.g.trainable()
        self.ema.store(params)
        self.ema.copy_to(params)
        try:
            yield
        finally:
            self.ema.restore(params)

    def load_model(self, checkpoint: Path, state: dict) -> None:
        """The weights came with the checkpoint's model folder (EMA ones with --ema: then the raw ones here)."""
        training = checkpoint / TRAINING
        if (training / "raw.pt").is_file():
            raw = torch.load(training / "raw.pt", map_location="cpu")
            self.g.unet.load_state_dict(raw["unet"])
            self.g.image_proj.load_state_dict(raw["image_proj"])
        if self.ema is not None and (training / "ema.pt").is_file():
            self.ema.load_state_dict(torch.load(training / "ema.pt", map_location="cpu"))

    # --- the work ------------------------------------------------------------------------------

    def train_step(self) -> float:
        world, rank, config, model = (self.accelerator.num_processes, self.accelerator.process_index, self.config,
                                      self.model)
        losses = []
        for micro in range(config.grad_accum):
            sequences, starts, k = self.batches.draw(self.step, micro, config.batch_size * world)
            mine = slice(rank * config.batch_size, (rank + 1) * config.batch_size)
            noise = self._generator("train", self.step, micro, rank)
            latents, embeds, text = self.encoded.batch(sequences[mine], starts[mine], k, config.prompts == "joined",
                                                       noise)
            drops = torch.rand((2, latents.shape[0]), generator=noise, device=latents.device)
            last = micro == config.grad_accum - 1
            with (contextlib.nullcontext() if last else self.accelerator.no_sync(model)), self.accelerator.autocast():
                loss = model(latents, embeds, text, self._empty(k), drops[0] < config.drop_text,
                             drops[1] < config.drop_image, noise)
                self.accelerator.backward(loss / config.grad_accum)
            losses.append(loss.detach())
        if config.max_grad_norm > 0:
            self.accelerator.clip_grad_norm_(self.g.trainable(), config.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.step(self.g.trainable())
        self.step += 1
        return float(self.accelerator.reduce(torch.stack(losses).mean(), "mean"))

    def held_out(self) -> tuple[float, dict] | None:
        """The loss over the held-out sequences (their first max-frames frames), with noise and timesteps
        fixed per sequence: the same draw at every evaluation, so the curve compares."""
        if not self.val:
            return None
        total = torch.zeros(2, device=self.g.device)
        for sequence in self.val[self.accelerator.process_index::self.accelerator.num_processes]:
            k = min(len(sequence.prompts), self.config.max_frames)
            noise = self._generator("val", sequence.key)
            latents, embeds, text = self.encoded.batch([sequence], [0], k, self.config.prompts == "joined", noise)
            no = torch.zeros(1, dtype=torch.bool, device=latents.device)
            with self.accelerator.autocast():
                loss = self.model(latents, embeds, text, self._empty(k), no, no, noise)
            total += torch.stack([loss.float(), torch.ones((), device=total.device)])
        total = self.accelerator.reduce(total, "sum")
        return float(total[0] / total[1]), {"sequences": len(self.val)}


def run_training(config: GeneratorTrainConfig) -> dict:
    """Read the datasets, build the generator, and train (what `vi train showhowto` does)."""
    config.check()
    sequences = [s for root in config.data for s in read_dataset(root)]
    train, val = split(sequences, config.val_fraction, config.seed)
    val += [s for root in config.val for s in read_dataset(root)]
    if not train:
        raise ValueError("every training sequence is held out: lower --val-fraction")
    accelerator = make_accelerator(config.device, config.mixed_precision)
    checkpoint = claim_run(config, accelerator.is_main_process, complete=f"{TRAINING}/{STATE}",
                           also_remove=("base",))
    accelerator.wait_for_everyone()
    seed_everything(config.seed)
    torch.manual_seed(config.seed)
    base = config.output / "base"
    source = Path(config.model)
    if accelerator.is_main_process and not (base / CONFIG).is_file():
        parts = load_parts(source)
        save_parts(replace(parts, config=replace(parts.config, base=None)), base, FROZEN)
    accelerator.wait_for_everyone()
    parts = load_parts(checkpoint or source)
    generator = ShowHowToGenerator(parts).to(accelerator.device)
    if config.gradient_checkpointing:
        generator.unet.enable_gradient_checkpointing()
    trainer = Trainer(config, generator, train, val, accelerator)
    if checkpoint is not None:
        trainer.restore(checkpoint)
        stderr.print(f"vi train showhowto: resumed from {checkpoint} (step {trainer.step})", highlight=False)
    stderr.print(f"vi train showhowto: {len(train)} training sequences, {len(val)} held out; "
                 f"{accelerator.num_processes} process(es) on {accelerator.device}, precision "
                 f"{accelerator.mixed_precision}; model {source} ({parts.config.note or 'no note'})", highlight=False)
    # The scheduler stays unprepared: accelerate would step it once per process.
    trainer.model, trainer.optimizer = accelerator.prepare(generator, trainer.optimizer)
    return trainer.run()
