"""What every training run shares, whatever it trains: the run options (`RunConfig`), the run folder
(claimed, overwritten or resumed; checkpoints put in place whole and the newest N kept), the log
(`RunLog`, one format for every trainer), the accelerate set-up, and the step loop of the trainers that
run their own (`TrainingLoop`).

A run folder holds one run: `checkpoints/<prefix>N/` and `log.jsonl`, one JSON line per logged step:
`{"split": "train"|"val", "step", "loss", ...named metrics (lr, samples_per_s, ...)}`. A run started
again into the folder of an earlier one is refused unless it is continued (`--resume`, from the newest
complete checkpoint, the log cut back to that checkpoint's step so it reads as one run) or replaced
(`--overwrite`).

torch and accelerate are imported inside the functions that use them: a command's --help, and the
configs, stay light.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from vi.core.config import check_choice, option
from vi.core.progress import log, make_progress, stderr

CHECKPOINTS, LOG, STATE = "checkpoints", "log.jsonl", "trainer_state.json"
DATA, OPTIM, MODEL, RUN = "Data", "Optimisation", "Model", "Run"  # the --help panels of the train commands


@dataclass(kw_only=True)
class RunConfig:
    """The options every trainer has. A trainer's config extends it with its own fields; a default of its
    own is `with_default(RunConfig, name, value)`, a help text of its own `run_option(name, help=...)`."""

    output: Path = option(help="Run folder: checkpoints and log.jsonl.", flag="--output", short="-o",
                          file_okay=False, show_default=False)
    grad_accum: int = option(1, min=1, help="Micro steps per optimizer step.", panel=OPTIM)
    weight_decay: float = option(0.0, min=0.0, help="AdamW weight decay.", panel=OPTIM)
    max_grad_norm: float = option(1.0, min=0.0, help="Gradient clipping (0: none).", panel=OPTIM)
    gradient_checkpointing: bool = option(False, help="Recompute activations in the backward pass: less memory.",
                                          panel=OPTIM)
    eval_every: int = option(100, min=1, help="Held-out evaluation every N steps.", panel=RUN)
    save_every: int = option(500, min=1, help="Checkpoint every N steps.", panel=RUN)
    log_every: int = option(10, min=1, help="Train loss line every N steps.", panel=RUN)
    keep_checkpoints: int = option(3, min=1, help="Checkpoints kept (the newest).", panel=RUN)
    resume: bool = option(False, flag="--resume", help="Continue from the last checkpoint in --output.", panel=RUN)
    overwrite: bool = option(False, flag="--overwrite", help="Replace the run in --output (its checkpoints and log).",
                             panel=RUN)
    device: str = option("auto", help="auto, cpu or cuda (a launcher gives each process its GPU).", panel=RUN)
    seed: int = option(0, help="Seed of the run's random draws.", panel=RUN)
    quiet: bool = option(False, flag="--quiet", short="-q", help="No progress bar.", panel=RUN)

    def check(self) -> None:
        """Refuse options that contradict each other, before any work (a trainer's own check extends this;
        --device is checked where it is resolved, `on_cpu`)."""
        if self.resume and self.overwrite:
            raise ValueError("--resume continues the run in --output and --overwrite replaces it: give one")

    def as_json(self) -> dict:
        """The config as a checkpoint records it (paths as strings)."""
        return json.loads(json.dumps(asdict(self), default=str))


def run_option(name: str, *, help: str):
    """RunConfig's field `name` with a trainer's own help text (what its seed draws, what its gradient
    checkpointing recomputes); default, spelling, panel and limits kept."""
    base = {f.name: f for f in dataclasses.fields(RunConfig)}[name]
    return dataclasses.field(default=base.default, metadata={**base.metadata, "help": help})


DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "no", "bf16", "fp16")


def mixed_precision_option(panel: str):
    """The --mixed-precision field of a trainer that runs under accelerate (`make_accelerator`)."""
    return option("auto", choices=PRECISIONS, help="auto (bf16, else fp16, on GPU; none on CPU), no, bf16 or fp16.",
                  panel=panel)


# --- devices ---------------------------------------------------------------------------------------

def on_cpu(device: str) -> bool:
    """Whether a run given --device `device` trains on the CPU (auto: on CPU only where there is no GPU)."""
    import torch

    if device not in DEVICES:
        raise ValueError(f"--device for training is auto, cpu or cuda (the process's GPU comes from the "
                         f"launcher), got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no cuda device is available here")
    return device == "cpu" or not torch.cuda.is_available()


def make_accelerator(device: str = "auto", mixed_precision: str = "auto"):
    """accelerate's Accelerator: one process here, or one per GPU under accelerate launch/torchrun.
    auto precision: bf16 on GPUs that have it, else fp16 on GPU; none on CPU."""
    import torch
    from accelerate import Accelerator

    cpu = on_cpu(device)
    if mixed_precision == "auto":
        mixed_precision = "no" if cpu else ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    check_choice("--mixed-precision", mixed_precision, PRECISIONS)
    return Accelerator(cpu=cpu, mixed_precision=mixed_precision)


# --- the run folder --------------------------------------------------------------------------------

def checkpoint_step(checkpoint: Path) -> int:
    """The step a checkpoint folder was saved at, from its name (`step-0000020`, `checkpoint-20`)."""
    return int(checkpoint.name.rsplit("-", 1)[1])


def latest_checkpoint(run: Path, complete: str = STATE, prefix: str = "step-") -> Path | None:
    """The newest complete checkpoint of a run folder: `run/checkpoints/<prefix>N/` holding `complete` (the
    file written last), so a folder a kill left half written is passed over."""
    found = [p for p in (run / CHECKPOINTS).glob(f"{prefix}*") if (p / complete).is_file()]
    return max(found, key=checkpoint_step) if found else None


def publish_checkpoint(partial: Path, final: Path, keep: int) -> None:
    """Rename a fully written checkpoint folder into place, then delete all but the `keep` newest
    `step-*` folders beside it."""
    shutil.rmtree(final, ignore_errors=True)
    partial.replace(final)
    for old in sorted(final.parent.glob("step-*"), key=checkpoint_step)[:-max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)


def claim_run(config: RunConfig, main: bool, *, complete: str = STATE, prefix: str = "step-",
              also_remove: tuple[str, ...] = ()) -> Path | None:
    """Make --output this run's folder; returns the checkpoint to resume from (None: start at step 0).

    Every process checks; only the main one (`main`) changes the folder: the caller waits for everyone
    after. An earlier run (a log or a checkpoint) is refused unless --resume continues it or --overwrite
    removes it (its checkpoints, log and `also_remove`). Resuming cuts the log back to the checkpoint's
    step (without a checkpoint, to nothing): the steps after it are run again. `config` is checked
    (`RunConfig.check`) before."""
    out, run_log = config.output, RunLog(config.output / LOG, main)
    earlier = run_log.path.is_file() or any((out / CHECKPOINTS).glob(f"{prefix}*"))
    if earlier and not (config.resume or config.overwrite):
        raise ValueError(f"{out} holds an earlier run: give --resume to continue it or --overwrite to start again")
    if main and earlier and config.overwrite:
        for name in (CHECKPOINTS, *also_remove):
            shutil.rmtree(out / name, ignore_errors=True)
        run_log.clear()
    if main:
        out.mkdir(parents=True, exist_ok=True)
    checkpoint = latest_checkpoint(out, complete, prefix) if config.resume else None
    if config.resume and checkpoint is None:
        log.warning("--resume: no checkpoint in %s yet; starting from step 0", out)
    if config.resume:
        run_log.trim(checkpoint_step(checkpoint) if checkpoint is not None else -1)
    return checkpoint


class RunLog:
    """A run folder's log.jsonl (see the module's docstring); only the main process writes it."""

    def __init__(self, path: Path, main: bool = True):
        self.path, self.main = path, main

    def write(self, split: str, step: int, loss: float | None, **metrics) -> None:
        """One line; numbers kept to 6 significant digits (a learning rate of 5e-7 stays itself)."""
        if not self.main:
            return
        row = {"split": split, "step": step, **({} if loss is None else {"loss": loss}), **metrics}
        row = {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in row.items()}
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")

    def trim(self, step: int) -> None:
        """Drop the lines after `step`, so a resumed run's log reads as one run."""
        if self.main and self.path.is_file():
            kept = [line for line in self.path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line)["step"] <= step]
            self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")

    def clear(self) -> None:
        if self.main:
            self.path.unlink(missing_ok=True)


# --- the step loop ---------------------------------------------------------------------------------

class TrainingLoop:
    """The loop of a trainer that runs its own (StepDiff's projector, ShowHowTo's generator).

    The loop: a held-out evaluation at step 0, then optimizer steps up to `config.steps`; a train line
    (the mean loss since the last one, lr, samples/s) every --log-every steps, a held-out evaluation every
    --eval-every and a checkpoint every --save-every, and all three at the last step. A checkpoint holds
    the trainer's model (`save_model`), and in `state_folder` the optimizer, scheduler, fp16 loss scale
    and trainer_state.json (step, the train-loss window since the last line, the config and
    `extra_state`): written whole to a hidden folder and renamed, so a kill never leaves half of one.

    A trainer sets `optimizer` and `scheduler`, and gives `trained` (the module that learns, prepared),
    `samples_per_step`, `train_step` (one optimizer step, advancing `step`; the loss), `held_out`
    (the held-out loss and named counts, or None without held-out data), and what its checkpoint holds
    (`save_model`, `load_model`, `extra_state`). `config` has `steps` besides RunConfig's fields.
    """

    name = "train"  # the command, for the progress bar and messages: "train stepdiff"
    state_folder = ""  # where in a checkpoint the training state sits ("": beside the model)

    def __init__(self, config: RunConfig, accelerator):
        self.config, self.accelerator = config, accelerator
        self.optimizer = self.scheduler = None
        self.step = 0
        self.window = [0.0, 0]  # train loss summed over the steps since the last log line, and their count
        self.log = RunLog(config.output / LOG, accelerator.is_main_process)

    # --- what a trainer gives --------------------------------------------------------------------

    @property
    def trained(self):
        raise NotImplementedError

    @property
    def samples_per_step(self) -> int:
        raise NotImplementedError

    def train_step(self) -> float:
        raise NotImplementedError

    def held_out(self) -> tuple[float, dict] | None:
        raise NotImplementedError

    def save_model(self, folder: Path) -> None:
        raise NotImplementedError

    def load_model(self, checkpoint: Path, state: dict) -> None:
        """Restore the trainer's own part of a checkpoint (its weights, its data position...)."""

    def extra_state(self) -> dict:
        return {}

    def train_metrics(self) -> dict:
        return {}

    # --- checkpoints -----------------------------------------------------------------------------

    def save(self) -> None:
        import torch

        self.accelerator.wait_for_everyone()
        if not self.accelerator.is_main_process:
            return
        root = self.config.output / CHECKPOINTS
        final = root / f"step-{self.step:07d}"
        partial = root / f".{final.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        state = partial / self.state_folder
        state.mkdir(parents=True)
        self.save_model(partial)
        torch.save(self.optimizer.state_dict(), state / "optimizer.pt")
        torch.save(self.scheduler.state_dict(), state / "scheduler.pt")
        if getattr(self.accelerator, "scaler", None) is not None:  # fp16: the loss scale and its history
            torch.save(self.accelerator.scaler.state_dict(), state / "scaler.pt")
        (state / STATE).write_text(json.dumps({"step": self.step, **self.extra_state(), "window": self.window,
                                               "config": self.config.as_json()}, indent=1) + "\n")
        publish_checkpoint(partial, final, self.config.keep_checkpoints)

    def restore(self, checkpoint: Path) -> None:
        """Continue from `checkpoint`: the model, optimizer, scheduler, loss scale, step and data position."""
        import torch

        folder = checkpoint / self.state_folder
        state = json.loads((folder / STATE).read_text())
        self.load_model(checkpoint, state)
        self.optimizer.load_state_dict(torch.load(folder / "optimizer.pt", map_location="cpu"))
        self.scheduler.load_state_dict(torch.load(folder / "scheduler.pt", map_location="cpu"))
        scaler = getattr(self.accelerator, "scaler", None)
        if scaler is not None and (folder / "scaler.pt").is_file():
            scaler.load_state_dict(torch.load(folder / "scaler.pt", map_location="cpu"))
        self.step, self.window = int(state["step"]), list(state.get("window", [0.0, 0]))

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> dict:
        config = self.config
        if self.step == 0:
            self.evaluate()
        self.trained.train()
        started, timed = time.perf_counter(), 0
        with make_progress(config.quiet or not self.accelerator.is_main_process) as progress:
            bar = progress.add_task(self.name, total=config.steps, completed=self.step)
            while self.step < config.steps:
                loss = self.train_step()
                if not math.isfinite(loss):
                    raise RuntimeError(f"step {self.step}: the training loss is {loss}; lower --lr")
                self.window = [self.window[0] + loss, self.window[1] + 1]
                timed += 1
                progress.update(bar, advance=1, description=f"{self.name} loss {loss:.4f}")
                last = self.step == config.steps
                if self.step % config.log_every == 0 or last:
                    seconds = time.perf_counter() - started
                    self.log.write("train", self.step, self.window[0] / self.window[1],
                                   lr=self.scheduler.get_last_lr()[0],
                                   samples_per_s=round(timed * self.samples_per_step / seconds, 3),
                                   **self.train_metrics())
                    started, timed, self.window = time.perf_counter(), 0, [0.0, 0]
                if self.step % config.eval_every == 0 or last:
                    self.evaluate()
                if self.step % config.save_every == 0 or last:
                    self.save()
        checkpoint = latest_checkpoint(config.output, str(Path(self.state_folder) / STATE))
        return {"step": self.step, "output": str(config.output), "checkpoint": str(checkpoint)}

    def evaluate(self) -> None:
        import torch

        self.trained.eval()
        try:
            with torch.no_grad():
                result = self.held_out()
        finally:
            self.trained.train()
        if result is None:
            return
        loss, counts = result
        self.log.write("val", self.step, loss, **counts)
        if self.accelerator.is_main_process:
            stderr.print(f"vi {self.name}: step {self.step}: held-out loss {loss:.4f}", highlight=False)

