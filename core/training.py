"""Training runs' shared plumbing: the accelerate set-up, checkpoint folders put in place whole, and a
log cut back to a resumed step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch


def make_accelerator(device: str = "auto", mixed_precision: str = "auto"):
    """accelerate's Accelerator: one process here, or one per GPU under accelerate launch/torchrun.
    auto precision: bf16 on GPUs that have it, else fp16 on GPU; none on CPU."""
    from accelerate import Accelerator

    cpu = device == "cpu" or not torch.cuda.is_available()
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no cuda device is available here")
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"--device for training is auto, cpu or cuda (the process's GPU comes from the "
                         f"launcher), got {device!r}")
    if mixed_precision == "auto":
        mixed_precision = "no" if cpu else ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    if mixed_precision not in ("no", "bf16", "fp16"):
        raise ValueError(f"--mixed-precision must be auto, no, bf16 or fp16, got {mixed_precision!r}")
    return Accelerator(cpu=cpu, mixed_precision=mixed_precision)


def publish_checkpoint(partial: Path, final: Path, keep: int) -> None:
    """Rename a fully written checkpoint folder into place, then delete all but the `keep` newest
    `step-*` folders beside it (names sort by step)."""
    shutil.rmtree(final, ignore_errors=True)
    partial.replace(final)
    for old in sorted(final.parent.glob("step-*"))[:-max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)


def trim_log(path: Path, step: int) -> None:
    """Drop the JSONL log lines after `step`, so a resumed run's log reads as one run."""
    if path.is_file():
        kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
        path.write_text("".join(line + "\n" for line in kept))
