"""Which device and number format a model runs in: cuda, then mps, then cpu.

Each engine is asked about its own devices: CTranslate2 can say how many GPUs it sees in
milliseconds, while importing torch to ask costs seconds and ~500 MB, which a stage that
runs on CTranslate2 (or a run whose records need no model) should not pay.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vi.core.config import check_choice

DTYPES = ("auto", "float32", "float16", "bfloat16", "int8")
# The devices each inference engine can run on. CTranslate2 (faster-whisper, whisperx's
# decoder) has CUDA and CPU backends only: Apple's mps is a torch backend.
ENGINE_DEVICES = {"torch": ("cuda", "mps", "cpu"), "ctranslate2": ("cuda", "cpu")}


@dataclass(frozen=True)
class Placement:
    device: str  # "cuda", "cuda:1", "mps", "cpu": give torch this whole string
    dtype: str  # one of DTYPES except "auto"; also a valid CTranslate2 compute_type

    @property
    def kind(self) -> str:
        return self.device.split(":")[0]

    @property
    def index(self) -> int:
        return int(self.device.split(":")[1]) if ":" in self.device else 0

    def torch_dtype(self):
        import torch

        if self.dtype == "int8":  # int8 is a CTranslate2 format; torch models stay float
            return torch.float32 if self.kind == "cpu" else torch.float16
        return getattr(torch, self.dtype)


def usable_cpus(cap: int = 8) -> int:
    """The cores this process may run on, at most `cap`: a Slurm task or a container pinned to some
    cores sees them through its CPU affinity, where os.cpu_count() would give the whole node's."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        count = os.cpu_count() or 1
    return max(1, min(cap, count))


def cuda_device_count(engine: str = "torch") -> int:
    if engine == "ctranslate2":
        import ctranslate2

        return ctranslate2.get_cuda_device_count()
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _cuda_bf16(engine: str) -> bool:
    if engine == "ctranslate2":
        import ctranslate2

        return "bfloat16" in ctranslate2.get_supported_compute_types("cuda")
    import torch

    return torch.cuda.is_bf16_supported()


def best_device(engine: str = "torch") -> str:
    """The fastest device `engine` sees here."""
    if cuda_device_count(engine):
        return "cuda"
    if engine == "torch":
        import torch

        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
    return "cpu"


def _auto_device(engine: str) -> str:
    device = best_device(engine)
    # An engine without the best device's backend (CTranslate2 on a Mac) runs on the CPU.
    return device if device in ENGINE_DEVICES[engine] else "cpu"


def _check_device(device: str, engine: str) -> None:
    """Refuse a device this engine cannot use, or that this machine does not have."""
    kind, colon, index = device.partition(":")
    if kind not in ENGINE_DEVICES["torch"] or (colon and (kind != "cuda" or not index.isdigit())):
        raise ValueError(f"--device must be auto, cpu, mps, cuda or cuda:N, got {device!r}")
    if kind not in ENGINE_DEVICES[engine]:
        name = {"torch": "torch", "ctranslate2": "CTranslate2"}[engine]
        raise ValueError(f"--device {device}: this stage's models run on {name}, which has no "
                         f"{kind} backend; use {' or '.join(ENGINE_DEVICES[engine])}")
    if kind == "cpu":
        return
    if kind == "mps":
        if best_device("torch") != "mps":
            raise ValueError(f"--device {device}: no mps device is available here")
        return
    count = cuda_device_count(engine)
    if count == 0:
        raise ValueError(f"--device {device}: no cuda device is available here")
    if int(index or 0) >= count:
        raise ValueError(f"--device {device}: this machine has {count} cuda device(s), "
                         f"cuda:0 to cuda:{count - 1}")


def _auto_dtype(kind: str, engine: str) -> str:
    if kind == "cuda":
        return "bfloat16" if _cuda_bf16(engine) else "float16"
    if kind == "mps":
        return "float16"
    return "int8" if engine == "ctranslate2" else "float32"  # CTranslate2 quantizes on CPU


def resolve_placement(device: str = "auto", dtype: str = "auto", engine: str = "torch"
                      ) -> Placement:
    """Turn `--device`/`--dtype` into a concrete placement for `engine` (torch | ctranslate2).

    auto device: cuda, then mps (torch only), then cpu. auto dtype: bf16 on GPUs that
    support it, else fp16 on GPU; on CPU int8 for CTranslate2 and fp32 for torch.
    A value that cannot work here is a ValueError naming the option (a usage error).
    """
    if engine not in ENGINE_DEVICES:
        raise ValueError(f"unknown engine {engine!r}: one of {', '.join(ENGINE_DEVICES)}")
    check_choice("--dtype", dtype, DTYPES)
    chosen = _auto_device(engine) if device == "auto" else device
    _check_device(chosen, engine)
    if dtype == "auto":
        dtype = _auto_dtype(chosen.split(":")[0], engine)
    return Placement(chosen, dtype)


def passive_openmp() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless the user set it, for a process where llama.cpp's and torch's OpenMP
    threads meet: threads that spin after their work starve the other library's (on 2 busy cores, 8 tokens
    of SmolLM2 beside torch took 26 s instead of 0.3 s). OpenMP reads it when a library loads its runtime,
    so call this before torch or llama.cpp is imported."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
