"""The options of `vi train stepdiff` (train.py runs them), apart from the training code so that the
command's --help, and its options' checks, import no torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vi.core.config import option
from vi.core.models.catalog import SMALL_LLM
from vi.core.training import DATA, MODEL, OPTIM, RunConfig, mixed_precision_option, run_option


@dataclass(kw_only=True)
class TrainConfig(RunConfig):
    """The options of `vi train stepdiff`."""

    data: list[str] = option(default_factory=list, flag="--data", metavar="KIND:PATH",
                             help="A training dataset (see above).", panel=DATA, show_default=False)
    features: list[Path] = option(default_factory=list, file_okay=False, exists=True,
                                  help="A feature store (vi encode-videos --store), besides those the records name.",
                                  panel=DATA)
    weights: str | None = option(None, help="Sampling weights, one per --data, comma-separated (default: "
                                 "round-robin).", panel=DATA)
    val: list[str] = option(default_factory=list, flag="--val", metavar="KIND:PATH", help="A held-out dataset.",
                            panel=DATA)
    val_fraction: float = option(0.0, min=0.0, max=0.9, help="Hold out this fraction of the training samples (a "
                                 "stable hash of their id).", panel=DATA)
    val_samples: int = option(512, min=1, help="Most held-out samples scored at each evaluation.", panel=DATA)
    llm: str = option(SMALL_LLM, help="The frozen LLM: a transformers folder, a cached hub id, a .gguf, or a "
                      "GGUF alias from `vi models` (dequantized once into vi's cache).", panel=MODEL)
    template: str = option("auto", help="auto (the LLM's chat template, else Llama-2's), chat or llama2.",
                           panel=MODEL)
    latents: int = option(32, min=1, help="Tokens per video in the LLM's input.", panel=MODEL)
    layers: int = option(2, min=1, help="Perceiver layers.", panel=MODEL)
    projector_dim: int = option(0, min=0, help="The Perceiver's width (0: the encoder's).", panel=MODEL)
    heads: int = option(8, min=1, help="Perceiver attention heads.", panel=MODEL)
    init_from: Path | None = option(None, exists=True, help="Start from this run's (or checkpoint's) projector, "
                                    "e.g. the interleaved pre-training.", panel=MODEL)
    steps: int = option(1000, min=1, help="Optimizer steps.", panel=OPTIM)
    batch_size: int = option(8, min=1, help="Samples per process and micro step.", panel=OPTIM)
    lr: float = option(1e-4, min=0.0, help="Peak learning rate (AdamW).", panel=OPTIM)  # StepDiff: AdamW, 1e-4
    warmup_steps: int = option(100, min=0, help="Linear warm-up steps, then cosine decay to 0.", panel=OPTIM)
    mixed_precision: str = mixed_precision_option(OPTIM)
    gradient_checkpointing: bool = run_option("gradient_checkpointing", help="Recompute the LLM's activations in "
                                              "the backward pass: less memory for long sequences.")
    seed: int = run_option("seed", help="Seed of the projector's initialisation and the data order.")

    def mixture_weights(self) -> list[float] | None:
        """--weights as numbers (None: round-robin)."""
        if self.weights is None:
            return None
        try:
            return [float(w) for w in self.weights.split(",")]
        except ValueError:
            raise ValueError(f"--weights {self.weights}: give comma-separated numbers, one per --data") from None

    def check(self) -> None:
        super().check()
        if not self.data:
            raise ValueError("give at least one --data KIND:PATH")
        if self.resume and self.init_from is not None:
            raise ValueError("--resume continues this run's own checkpoint; --init-from starts a new run from "
                             "another one: give one")
        self.mixture_weights()  # a typo is refused here, before the data is read
