"""Which device and number format a model runs in: cuda, then mps, then cpu.

torch is imported inside the functions: `vi --help` and `vi probe` should not pay for it.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("auto", "float32", "float16", "bfloat16", "int8")


@dataclass(frozen=True)
class Placement:
    device: str  # "cuda", "cuda:1", "mps", "cpu"
    dtype: str  # one of DTYPES except "auto"

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

    def ctranslate2_compute_type(self) -> str:
        return self.dtype


def best_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def resolve_placement(device: str = "auto", dtype: str = "auto", quantized_ok: bool = False
                      ) -> Placement:
    """Turn `--device`/`--dtype` into a concrete placement.

    auto dtype: bf16 on GPUs that support it, else fp16 on GPU; on CPU int8 for engines that
    quantize (CTranslate2: `quantized_ok`) and fp32 otherwise.
    """
    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    chosen = best_device() if device == "auto" else device
    kind = chosen.split(":")[0]
    if kind not in ("cuda", "mps", "cpu"):
        raise ValueError(f"--device must be auto, cpu, mps, cuda or cuda:N, got {device!r}")
    if kind != "cpu":
        import torch

        available = torch.cuda.is_available() if kind == "cuda" else best_device() == "mps"
        if not available:
            raise ValueError(f"--device {device}: no {kind} device is available here")
    if dtype == "auto":
        if kind == "cuda":
            import torch

            dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        elif kind == "mps":
            dtype = "float16"
        else:
            dtype = "int8" if quantized_ok else "float32"
    return Placement(chosen, dtype)
