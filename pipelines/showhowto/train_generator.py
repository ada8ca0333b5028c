"""`vi train showhowto`: fine-tune ShowHowTo's generator as the release's train.py does, on datasets
`vi export showhowto` wrote, starting from a release file (DynamiCrafter's `dynamicrafter_256_v1.ckpt`,
or ShowHowTo's weights) or a vi checkpoint.

The release's recipe, the defaults here: only the U-Net learns (the autoencoder, the OpenCLIP encoders
and the Resampler stay frozen); AdamW at 2e-5 with a cosine schedule after a linear warm-up; every
step trains one batch of each length 2..--max-frames (8), one optimizer update per length (`--lengths
all`; `random` draws one length per step instead); each sequence is cut to k consecutive frames from
a random start, frame 0 of the cut the scene image, its prompt tau_0; eps-prediction MSE with a
uniform timestep; frame stride 1; no condition dropped (`--drop-text`, `--drop-image` drop them for
classifier-free guidance, as DynamiCrafter's own training did). `--prompts joined` is the paper's
ablation: every frame gets the cut's prompts joined into one.

Added for running it anywhere: the batches, noise and dropped conditions depend on (seed, step,
length, micro step) only, so a resumed run continues the same loss curve; gradient accumulation and
clipping; an optional EMA (`--ema DECAY`: checkpoints then hold the EMA weights to generate with);
bf16/fp16 autocast and gradient checkpointing on GPU; accelerate for several GPUs or nodes (each
process draws the global batch and keeps its slice); `--cache-latents` runs the frozen encoders once
per frame and prompt.

The run folder, the log and the loop are `vi.core.training`'s: `checkpoints/step-N/` is a checkpoint
`vi generate` loads (`unet.pt` + `showhowto.json`, which names the base file and model config) plus
`training/` (optimizer, scheduler, EMA, step), and `log.jsonl`.
"""

from __future__ import annotations

import contextlib
import math
import random
from pathlib import Path

import torch

from vi.core.progress import stderr
from vi.core.seeding import record_seed, seed_everything
from vi.core.training import STATE, TrainingLoop, claim_run, make_accelerator
from vi.pipelines.showhowto.generator import conditions, diffusion_loss
from vi.pipelines.showhowto.generator_data import DatasetSequence, read_dataset
from vi.pipelines.showhowto.generator_model import ShowHowToModel, load, resolve_source, save_checkpoint
from vi.pipelines.showhowto.train_generator_config import GeneratorTrainConfig

TRAINING = "training"  # a checkpoint's training state, beside the model files vi generate loads
def split(sequences: list[DatasetSequence], fraction: float, seed: int) -> tuple[list, list]:
    """A stable share of the videos held out: one video's sequences all on one side."""
    if fraction <= 0:
        return sequences, []
    held = [s for s in sequences if (record_seed(seed, f"val:{s.video or s.key}") % 10_000) < fraction * 10_000]
    return [s for s in sequences if s not in held], held


class Batches:
    """The deterministic batches of a step: for each length k of the step, (sequences, start of each cut)."""

    def __init__(self, sequences: list[DatasetSequence], config: GeneratorTrainConfig):
        self.sequences, self.config = sequences, config
        self.longest = max(len(s.prompts) for s in sequences)
        if self.longest < config.min_frames:
            raise ValueError(f"no training sequence has --min-frames {config.min_frames} frames (the longest has "
                             f"{self.longest})")

    def lengths(self, step: int) -> list[int]:
        top = min(self.config.max_frames, self.longest)
        if self.config.lengths == "all":
            return list(range(self.config.min_frames, top + 1))
        return [random.Random(f"{self.config.seed}:{step}:length").randint(self.config.min_frames, top)]

    def draw(self, step: int, k: int, micro: int, size: int) -> tuple[list[DatasetSequence], list[int]]:
        rng = random.Random(f"{self.config.seed}:{step}:{k}:{micro}")
        eligible = [s for s in self.sequences if len(s.prompts) >= k]
        chosen = rng.sample(eligible, size) if len(eligible) >= size else rng.choices(eligible, k=size)
        return chosen, [rng.randint(0, len(s.prompts) - k) for s in chosen]


class Encoded:
    """The frozen parts' outputs for cuts of sequences, computed each time or cached once: the
    autoencoder's posterior of each frame, the image tokens of each frame (a cut's first frame is its
    scene), each prompt's text states."""

    def __init__(self, model: ShowHowToModel, cache: bool):
        self.m, self.cache, self.size = model, cache, model.spec.image_size
        # keyed by the sequence object: two datasets (--data, --val) may use the same keys
        self.frames: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self.texts: dict[str, torch.Tensor] = {}
        self._blank: torch.Tensor | None = None

    def pixels(self, sequence: DatasetSequence) -> torch.Tensor:
        import numpy as np

        tiles = np.stack([np.asarray(t, np.float32) for t in sequence.tiles(self.size)])
        return torch.from_numpy(tiles).permute(0, 3, 1, 2).div(255 / 2).sub(1).to(self.m.device)

    def _frame_features(self, sequence: DatasetSequence, first: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(posterior moments of the k frames, image tokens of the first)."""
        if not self.cache:
            pixels = self.pixels(sequence)[first:first + k]
            return self.m.latent_moments(pixels), self.m.image_tokens(pixels[:1])[0]
        if (id(sequence), 0) not in self.frames:
            pixels = self.pixels(sequence)
            moments, tokens = self.m.latent_moments(pixels), self.m.image_tokens(pixels)
            for i in range(len(pixels)):
                self.frames[(id(sequence), i)] = (moments[i], tokens[i])
        parts = [self.frames[(id(sequence), first + i)] for i in range(k)]
        return torch.stack([m for m, _ in parts]), parts[0][1]

    def text(self, texts: list[str]) -> torch.Tensor:
        if not self.cache:
            return self.m.encode_text(texts)
        missing = sorted(set(texts) - self.texts.keys())
        if missing:
            self.texts.update(zip(missing, self.m.encode_text(missing)))
        return torch.stack([self.texts[t] for t in texts])

    def blank_tokens(self) -> torch.Tensor:
        """The image tokens of an all-zero image: the dropped image, as the release's sampler's unconditional."""
        if self._blank is None:
            self._blank = self.m.image_tokens(torch.zeros(1, 3, self.size, self.size, device=self.m.device))[0]
        return self._blank

    def batch(self, sequences, starts, k, joined: bool, generator: torch.Generator,
              drop_text: torch.Tensor | None = None, drop_image: torch.Tensor | None = None):
        """(latents (B, C, k, h, w), context (B*k, tokens, dim)) of the cuts."""
        moments, tokens, prompts = [], [], []
        for sequence, first in zip(sequences, starts):
            m, t = self._frame_features(sequence, first, k)
            moments.append(m)
            tokens.append(t)
            cut = sequence.prompts[first:first + k]
            prompts.append([" ".join(cut)] * k if joined else cut)
        if drop_text is not None:
            prompts = [[""] * k if drop else p for p, drop in zip(prompts, drop_text.tolist())]
        tokens = torch.stack(tokens)
        if drop_image is not None:
            tokens = torch.where(drop_image.view(-1, 1, 1), self.blank_tokens().expand_as(tokens), tokens)
        flat = torch.cat(moments)
        noise = torch.randn((flat.shape[0], flat.shape[1] // 2, *flat.shape[2:]), generator=generator,
                            device=flat.device)
        latents = self.m.sample_latents(flat, noise)
        latents = latents.reshape(len(sequences), k, *latents.shape[1:]).transpose(1, 2)
        states = self.text([t for p in prompts for t in p])
        return latents, conditions(self.m, prompts, tokens, states)


def cosine_with_warmup(optimizer, warmup: int, total: int, kind: str):
    """The release's schedule (linear warm-up, then half a cosine to 0 at `total`), or constant."""

    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        if kind == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class Trainer(TrainingLoop):
    """ShowHowTo's part of the loop: the U-Net learns (`model`: the generator, prepared by accelerate once
    `run_training` has), with batches, noise and dropped conditions drawn from (seed, step, length); a
    checkpoint is `unet.pt` + `showhowto.json` plus `training/` (the loop's state, and with --ema the raw
    weights and the EMA's)."""

    name = "train showhowto"
    state_folder = TRAINING

    def __init__(self, config: GeneratorTrainConfig, model: ShowHowToModel, source, train: list[DatasetSequence],
                 val: list[DatasetSequence], accelerator):
        super().__init__(config, accelerator)
        self.m, self.model, self.val, self.source = model, model, val, source
        self.batches = Batches(train, config)
        self.encoded = Encoded(model, config.cache_latents)
        self.optimizer = torch.optim.AdamW(self.trainable(), lr=config.lr, weight_decay=config.weight_decay)
        self.scheduler = cosine_with_warmup(self.optimizer, config.warmup, config.steps, config.schedule)
        self.ema = None
        if config.ema:
            from diffusers.training_utils import EMAModel

            self.ema = EMAModel(self.trainable(), decay=config.ema)

    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.m.unet.parameters() if p.requires_grad]

    @property
    def trained(self):
        return self.model

    @property
    def samples_per_step(self) -> int:
        lengths = len(self.batches.lengths(0))
        return self.config.batch_size * self.config.grad_accum * self.accelerator.num_processes * lengths

    def _generator(self, *parts) -> torch.Generator:
        seed = record_seed(self.config.seed, ":".join(map(str, parts)))
        return torch.Generator(device=self.m.device).manual_seed(seed)

    # --- state ---------------------------------------------------------------------------------

    def save_model(self, folder: Path) -> None:
        note = f"vi train showhowto from {self.config.init}"
        if self.ema is None:
            save_checkpoint(self.m, folder, self.source.weights, self.source.config, note)
            return
        # the model files hold the EMA weights; training/ the raw ones to resume
        torch.save(self.m.unet.state_dict(), folder / TRAINING / "raw.pt")
        torch.save(self.ema.state_dict(), folder / TRAINING / "ema.pt")
        with self._ema_weights():
            save_checkpoint(self.m, folder, self.source.weights, self.source.config, note + " (EMA weights)")

    @contextlib.contextmanager
    def _ema_weights(self):
        params = self.trainable()
        self.ema.store(params)
        self.ema.copy_to(params)
        try:
            yield
        finally:
            self.ema.restore(params)

    def load_model(self, checkpoint: Path, state: dict) -> None:
        """The weights came with the checkpoint's unet.pt (EMA ones with --ema: then the raw ones here)."""
        training = checkpoint / TRAINING
        if (training / "raw.pt").is_file():
            self.m.unet.load_state_dict(torch.load(training / "raw.pt", map_location="cpu"))
        if self.ema is not None and (training / "ema.pt").is_file():
            self.ema.load_state_dict(torch.load(training / "ema.pt", map_location="cpu"))

    # --- the work ------------------------------------------------------------------------------

    def _loss(self, sequences, starts, k, noise, drops: bool) -> torch.Tensor:
        config = self.config
        drop_text = drop_image = None
        if drops:
            draws = torch.rand((2, len(sequences)), generator=noise, device=noise.device)
            drop_text, drop_image = draws[0] < config.drop_text, draws[1] < config.drop_image
        latents, context = self.encoded.batch(sequences, starts, k, config.prompts == "joined", noise, drop_text,
                                              drop_image)
        return self.model(latents, context, noise)

    def train_step(self) -> float:
        world, rank, config, model = (self.accelerator.num_processes, self.accelerator.process_index, self.config,
                                      self.model)
        # The U-Net's dropout (0.1, the release's) draws from torch's global generator: seeded per step, a
        # resumed run draws what the uninterrupted one did
        torch.manual_seed(record_seed(config.seed, f"dropout:{self.step}:{rank}"))
        losses = []
        for k in self.batches.lengths(self.step):  # one update per length, as the release
            for micro in range(config.grad_accum):
                sequences, starts = self.batches.draw(self.step, k, micro, config.batch_size * world)
                mine = slice(rank * config.batch_size, (rank + 1) * config.batch_size)
                noise = self._generator("train", self.step, k, micro, rank)
                last = micro == config.grad_accum - 1
                with (contextlib.nullcontext() if last else self.accelerator.no_sync(model)), \
                        self.accelerator.autocast():
                    loss = self._loss(sequences[mine], starts[mine], k, noise, drops=True)
                    self.accelerator.backward(loss / config.grad_accum)
                losses.append(loss.detach())
            if config.max_grad_norm > 0:
                self.accelerator.clip_grad_norm_(self.trainable(), config.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            if self.ema is not None:
                self.ema.step(self.trainable())
        self.scheduler.step()  # once per step, as the release steps it once per iteration over the lengths
        self.step += 1
        return float(self.accelerator.reduce(torch.stack(losses).mean(), "mean"))

    def held_out(self) -> tuple[float, dict] | None:
        """The loss over the held-out sequences (their first max-frames frames), with noise and timesteps
        fixed per sequence: the same draw at every evaluation, so the curve compares."""
        if not self.val:
            return None
        total = torch.zeros(2, device=self.m.device)
        for sequence in self.val[self.accelerator.process_index::self.accelerator.num_processes]:
            k = min(len(sequence.prompts), self.config.max_frames)
            noise = self._generator("val", sequence.key)
            with self.accelerator.autocast():
                loss = self._loss([sequence], [0], k, noise, drops=False)
            total += torch.stack([loss.float(), torch.ones((), device=total.device)])
        total = self.accelerator.reduce(total, "sum")
        return float(total[0] / total[1]), {"sequences": len(self.val)}


class _Loss(torch.nn.Module):
    """What accelerate wraps (DDP): the generator whose forward is the training loss."""

    def __init__(self, model: ShowHowToModel):
        super().__init__()
        self.generator = model

    def forward(self, latents, context, noise):
        return diffusion_loss(self.generator, latents, context, noise)


def run_training(config: GeneratorTrainConfig) -> dict:
    """Read the datasets, load the generator, and train (what `vi train showhowto` does)."""
    config.check()
    sequences = [s for root in config.data for s in read_dataset(root)]
    train, val = split(sequences, config.val_fraction, config.seed)
    val += [s for root in config.val for s in read_dataset(root)]
    if not train:
        raise ValueError("every training sequence is held out: lower --val-fraction")
    accelerator = make_accelerator(config.device, config.mixed_precision)
    checkpoint = claim_run(config, accelerator.is_main_process, complete=f"{TRAINING}/{STATE}")
    accelerator.wait_for_everyone()
    seed_everything(config.seed)
    torch.manual_seed(config.seed)
    source = resolve_source(Path(config.init), config.model_config)
    model = load(resolve_source(checkpoint) if checkpoint is not None else source)
    model.place(accelerator.device)
    model.unet.requires_grad_(True)
    if config.gradient_checkpointing:
        model.unet.set_gradient_checkpointing(True)
    trainer = Trainer(config, model, source, train, val, accelerator)
    if checkpoint is not None:
        trainer.restore(checkpoint)
        stderr.print(f"vi train showhowto: resumed from {checkpoint} (step {trainer.step})", highlight=False)
    stderr.print(f"vi train showhowto: {len(train)} training sequences, {len(val)} held out; "
                 f"{accelerator.num_processes} process(es) on {accelerator.device}, precision "
                 f"{accelerator.mixed_precision}; from {source.describe} (config {model.spec.source})", highlight=False)
    # The scheduler stays unprepared: accelerate would step it once per process.
    wrapped, trainer.optimizer = accelerator.prepare(_Loss(model), trainer.optimizer)
    trainer.model = wrapped
    return trainer.run()
