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

Run folder: `base/` (the frozen parts, linked or copied once), `checkpoints/step-N/` (a model
folder `vi generate` loads: unet/, image_proj/, showhowto.json naming ../../base; plus
`training/` with the optimizer, scheduler, EMA and step), `log.jsonl`.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from vi.core.progress import log, make_progress, stderr
from vi.core.seeding import record_seed, seed_everything
from vi.core.training import publish_checkpoint, trim_log
from vi.pipelines.showhowto.generator import ShowHowToGenerator
from vi.pipelines.showhowto.generator_data import DatasetSequence, read_dataset
from vi.pipelines.showhowto.generator_model import CONFIG, FROZEN, TRAINED, load_parts, save_parts

CHECKPOINTS, LOG, STATE, TRAINING = "checkpoints", "log.jsonl", "trainer_state.json", "training"
PROMPTS = ("per-frame", "joined")


@dataclass
class GeneratorTrainConfig:
    output: Path
    model: Path  # a generator folder (tiny, converted DynamiCrafter) or a checkpoint of one
    data: list[Path] = field(default_factory=list)
    val: list[Path] = field(default_factory=list)
    val_fraction: float = 0.0
    steps: int = 1000
    batch_size: int = 4  # per process and micro step
    grad_accum: int = 1
    min_frames: int = 2
    max_frames: int = 8  # ShowHowTo: training on <= 8 consecutive steps was best
    lr: float = 1e-5
    weight_decay: float = 1e-2
    warmup_steps: int = 100
    max_grad_norm: float = 1.0
    drop_text: float = 0.05
    drop_image: float = 0.05
    ema: float = 0.0
    prompts: str = "per-frame"
    cache_latents: bool = False
    eval_every: int = 100
    save_every: int = 500
    log_every: int = 10
    keep_checkpoints: int = 3
    resume: bool = False
    overwrite: bool = False
    gradient_checkpointing: bool = False
    device: str = "auto"
    seed: int = 0
    quiet: bool = False

    def as_json(self) -> dict:
        return json.loads(json.dumps(asdict(self), default=str))


def check(config: GeneratorTrainConfig) -> None:
    if not config.data:
        raise ValueError("give at least one --data DIR (the --out folder of vi export showhowto)")
    if not 2 <= config.min_frames <= config.max_frames:
        raise ValueError(f"--min-frames {config.min_frames} --max-frames {config.max_frames}: need "
                         "2 <= min <= max (frame 0 is the input image, so a sequence has a step)")
    if config.prompts not in PROMPTS:
        raise ValueError(f"--prompts must be one of {', '.join(PROMPTS)}, got {config.prompts!r}")
    if not 0 <= config.ema < 1:
        raise ValueError(f"--ema is a decay in [0, 1) (0: off), got {config.ema}")
    if config.resume and config.overwrite:
        raise ValueError("--resume continues the run in --output and --overwrite replaces it: give one")


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
    if (folder / CONFIG).is_file() and not (folder / CHECKPOINTS).is_dir():
        return folder
    found = sorted(p for p in (folder / CHECKPOINTS).glob("step-*") if (p / TRAINING / STATE).is_file())
    return found[-1] if found else None


class Trainer:
    def __init__(self, config: GeneratorTrainConfig, generator: ShowHowToGenerator, train: list[DatasetSequence],
                 val: list[DatasetSequence], accelerator):
        from transformers import get_constant_schedule_with_warmup

        self.config, self.g, self.val, self.accelerator = config, generator, val, accelerator
        self.batches = Batches(train, config)
        self.encoded = Encoded(generator, config.cache_latents, generator.config.image_size)
        self.optimizer = torch.optim.AdamW(generator.trainable(), lr=config.lr, weight_decay=config.weight_decay)
        self.scheduler = get_constant_schedule_with_warmup(self.optimizer, config.warmup_steps)
        self.ema = None
        if config.ema:
            from diffusers.training_utils import EMAModel

            self.ema = EMAModel(generator.trainable(), decay=config.ema)
        self.step, self.window = 0, [0.0, 0]
        self.log_path = config.output / LOG
        self.empty: dict[int, torch.Tensor] = {}  # k -> the empty prompts' states (the dropped text)

    def _empty(self, k: int) -> torch.Tensor:
        if k not in self.empty:
            self.empty[k] = self.g.encode_prompts([[""] * k])
        return self.empty[k]

    def _generator(self, *parts) -> torch.Generator:
        return torch.Generator(device=self.g.device).manual_seed(record_seed(self.config.seed, ":".join(map(str, parts))))

    # --- state ---------------------------------------------------------------------------------

    def save(self) -> None:
        self.accelerator.wait_for_everyone()
        if not self.accelerator.is_main_process:
            return
        root = self.config.output / CHECKPOINTS
        final = root / f"step-{self.step:07d}"
        partial = root / f".{final.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        training = partial / TRAINING
        training.mkdir(parents=True)
        parts = replace(self.g.parts, config=replace(self.g.config, base="../../base"))
        if self.ema is not None:  # the model folder holds the EMA weights; training/ the raw ones to resume
            torch.save(self._trainable_state(), training / "raw.pt")
            torch.save(self.ema.state_dict(), training / "ema.pt")
            with self._ema_weights():
                save_parts(parts, partial, TRAINED)
        else:
            save_parts(parts, partial, TRAINED)
        torch.save(self.optimizer.state_dict(), training / "optimizer.pt")
        torch.save(self.scheduler.state_dict(), training / "scheduler.pt")
        (training / STATE).write_text(json.dumps({"step": self.step, "window": self.window,
                                                  "config": self.config.as_json()}, indent=1) + "\n")
        publish_checkpoint(partial, final, self.config.keep_checkpoints)

    def _trainable_state(self) -> dict:
        return {"unet": self.g.unet.state_dict(), "image_proj": self.g.image_proj.state_dict()}

    def _ema_weights(self):
        ema, params = self.ema, self.g.trainable()

        class Swap:
            def __enter__(self):
                ema.store(params)
                ema.copy_to(params)

            def __exit__(self, *exc):
                ema.restore(params)
        return Swap()

    def restore(self, checkpoint: Path) -> None:
        training = checkpoint / TRAINING
        state = json.loads((training / STATE).read_text())
        if (training / "raw.pt").is_file():
            raw = torch.load(training / "raw.pt", map_location="cpu")
            self.g.unet.load_state_dict(raw["unet"])
            self.g.image_proj.load_state_dict(raw["image_proj"])
        if self.ema is not None and (training / "ema.pt").is_file():
            self.ema.load_state_dict(torch.load(training / "ema.pt", map_location="cpu"))
        self.optimizer.load_state_dict(torch.load(training / "optimizer.pt", map_location="cpu"))
        self.scheduler.load_state_dict(torch.load(training / "scheduler.pt", map_location="cpu"))
        self.step, self.window = int(state["step"]), list(state.get("window", [0.0, 0]))
        if self.accelerator.is_main_process:  # one run, one log
            trim_log(self.log_path, self.step)

    def write_log(self, entry: dict) -> None:
        if self.accelerator.is_main_process:
            with open(self.log_path, "a") as handle:
                handle.write(json.dumps(entry) + "\n")

    # --- the work ------------------------------------------------------------------------------

    def train_step(self, model) -> float:
        world, rank, config = self.accelerator.num_processes, self.accelerator.process_index, self.config
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

    @torch.no_grad()
    def held_out_loss(self, model) -> float | None:
        """The loss over the held-out sequences (their first max-frames frames), with noise and timesteps
        fixed per sequence: the same draw at every evaluation, so the curve compares."""
        if not self.val:
            return None
        model.eval()
        total = torch.zeros(2, device=self.g.device)
        for sequence in self.val[self.accelerator.process_index::self.accelerator.num_processes]:
            k = min(len(sequence.prompts), self.config.max_frames)
            noise = self._generator("val", sequence.key)
            latents, embeds, text = self.encoded.batch([sequence], [0], k, self.config.prompts == "joined", noise)
            no = torch.zeros(1, dtype=torch.bool, device=latents.device)
            with self.accelerator.autocast():
                loss = model(latents, embeds, text, self._empty(k), no, no, noise)
            total += torch.stack([loss.float(), torch.ones((), device=total.device)])
        total = self.accelerator.reduce(total, "sum")
        model.train()
        return float(total[0] / total[1])

    def run(self, model) -> dict:
        config = self.config
        if self.step == 0:
            self._evaluate(model)
        model.train()
        started, timed = time.perf_counter(), 0
        with make_progress(config.quiet or not self.accelerator.is_main_process) as progress:
            bar = progress.add_task("train showhowto", total=config.steps, completed=self.step)
            while self.step < config.steps:
                loss = self.train_step(model)
                if not math.isfinite(loss):
                    raise RuntimeError(f"step {self.step}: the training loss is {loss}; lower --lr")
                self.window = [self.window[0] + loss, self.window[1] + 1]
                timed += 1
                progress.update(bar, advance=1, description=f"train showhowto loss {loss:.4f}")
                if self.step % config.log_every == 0 or self.step == config.steps:
                    seconds = time.perf_counter() - started
                    samples = config.batch_size * config.grad_accum * self.accelerator.num_processes
                    self.write_log({"split": "train", "step": self.step,
                                    "loss": round(self.window[0] / self.window[1], 6),
                                    "lr": self.scheduler.get_last_lr()[0],
                                    "samples_per_s": round(timed * samples / seconds, 3)})
                    started, timed, self.window = time.perf_counter(), 0, [0.0, 0]
                if self.step % config.eval_every == 0 or self.step == config.steps:
                    self._evaluate(model)
                if self.step % config.save_every == 0 or self.step == config.steps:
                    self.save()
        return {"step": self.step, "output": str(config.output),
                "checkpoint": str(latest_checkpoint(config.output))}

    def _evaluate(self, model) -> None:
        loss = self.held_out_loss(model)
        if loss is not None:
            self.write_log({"split": "val", "step": self.step, "loss": round(loss, 6), "sequences": len(self.val)})
            if self.accelerator.is_main_process:
                stderr.print(f"vi train showhowto: step {self.step}: held-out loss {loss:.4f}", highlight=False)


def _claim_output(config: GeneratorTrainConfig, main: bool) -> Path | None:
    """A run folder holds one run: continued (--resume, returns its checkpoint) or replaced (--overwrite)."""
    earlier = (config.output / LOG).is_file() or any((config.output / CHECKPOINTS).glob("step-*"))
    if earlier and not (config.resume or config.overwrite):
        raise ValueError(f"{config.output} holds an earlier run: give --resume to continue it or --overwrite to "
                         "start again")
    if earlier and config.overwrite and main:
        for name in (CHECKPOINTS, "base"):
            shutil.rmtree(config.output / name, ignore_errors=True)
        (config.output / LOG).unlink(missing_ok=True)
    config.output.mkdir(parents=True, exist_ok=True)
    checkpoint = latest_checkpoint(config.output) if config.resume else None
    if config.resume and checkpoint is None:
        log.warning("--resume: no checkpoint in %s yet; starting from step 0", config.output)
    return checkpoint


def run_training(config: GeneratorTrainConfig, mixed_precision: str = "auto") -> dict:
    """Read the datasets, build the generator, and train (what `vi train showhowto` does)."""
    from vi.core.training import make_accelerator

    check(config)
    sequences = [s for root in config.data for s in read_dataset(root)]
    train, val = split(sequences, config.val_fraction, config.seed)
    val += [s for root in config.val for s in read_dataset(root)]
    if not train:
        raise ValueError("every training sequence is held out: lower --val-fraction")
    accelerator = make_accelerator(config.device, mixed_precision)
    checkpoint = _claim_output(config, accelerator.is_main_process)
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
    model, trainer.optimizer = accelerator.prepare(generator, trainer.optimizer)
    return trainer.run(model)
