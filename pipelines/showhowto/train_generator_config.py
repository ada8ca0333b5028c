"""The options of `vi train showhowto` (train_generator.py runs them), apart from the training code so
that the command's --help imports no torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vi.core.config import check_choices, option, with_default
from vi.core.training import DATA, MODEL, OPTIM, RUN, RunConfig, mixed_precision_option, run_option

PROMPTS = ("per-frame", "joined")
LENGTHS = ("all", "random")
SCHEDULES = ("cosine", "constant")


@dataclass(kw_only=True)
class GeneratorTrainConfig(RunConfig):
    """The options of `vi train showhowto` (defaults: the release's train.py)."""

    data: list[Path] = option(default_factory=list, flag="--data", exists=True, file_okay=False,
                              help="A vi export showhowto folder (repeatable).", panel=DATA, show_default=False)
    init: Path = option(hidden_aliases=("--model",), show_default=False, panel=MODEL, help=(
        "The weights to start from: a release file (DynamiCrafter's dynamicrafter_256_v1.ckpt, as the paper; "
        "showhowto_2to8steps.pt) or its name in vi models (dynamicrafter-256), or a vi train showhowto "
        "checkpoint or run."))
    model_config: Path | None = option(None, exists=True, dir_okay=False, panel=MODEL, help=(
        "Its lvdm config (YAML) when not the release's 256 one; default: NAME.yaml beside NAME.pt, else "
        "built in."))
    val: list[Path] = option(default_factory=list, flag="--val", exists=True, file_okay=False,
                             help="A held-out dataset folder.", panel=DATA)
    val_fraction: float = option(0.0, min=0.0, max=0.9, help="Hold out this fraction of the videos (a stable hash).",
                                 panel=DATA)
    min_frames: int = option(2, min=2, help="Shortest cut (the input frame and one step).", panel=DATA)
    max_frames: int = option(8, min=2, hidden_aliases=("--max-seq-len",), panel=DATA,
                             help="Longest cut (the release's --max_seq_len).")
    lengths: str = option("all", choices=LENGTHS, panel=DATA, help=(
        "all: every length min..max at each step, one update per length (the release); random: one length "
        "drawn per step."))
    prompts: str = option("per-frame", choices=PROMPTS, panel=MODEL, help=(
        "per-frame (each frame its own prompt, the paper's model) or joined (every frame the cut's prompts joined: "
        "the ablation)."))
    cache_latents: bool = option(False, flag="--cache-latents", help="Run the frozen encoders once per frame and "
                                 "prompt and keep their outputs in memory.", panel=DATA)
    steps: int = option(1000, min=1, help="Steps (each one update per length with --lengths all).", panel=OPTIM)
    batch_size: int = option(1, min=1, help="Sequences per process, length and micro step (the release: 1 per "
                             "GPU).", panel=OPTIM)
    lr: float = option(2e-5, min=0.0, help="AdamW learning rate (peak).", panel=OPTIM)
    schedule: str = option("cosine", choices=SCHEDULES, panel=OPTIM, help=(
        "cosine (to 0 at the last step, the release) or constant, after the warm-up."))
    warmup_steps: int | None = option(None, min=0, panel=OPTIM, help=(
        "Linear warm-up steps (default: --steps / 200, the release's one epoch of 200)."))
    weight_decay: float = with_default(RunConfig, "weight_decay", 1e-2)
    drop_text: float = option(0.0, min=0.0, max=1.0, help="Probability of training without the prompts.",
                              panel=OPTIM)
    drop_image: float = option(0.0, min=0.0, max=1.0, help="Probability of training without the scene's image "
                               "tokens.", panel=OPTIM)
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
        check_choices(self)
        if not 0 <= self.ema < 1:
            raise ValueError(f"--ema is a decay in [0, 1) (0: off), got {self.ema}")
        from vi.pipelines.showhowto.generator_model import resolve_source  # torch: only once options are checked

        try:  # a catalogue name not fetched yet: ModelNotAvailable (exit 5) with where to get it
            resolve_source(Path(self.init), self.model_config)
        except FileNotFoundError as exc:
            raise ValueError(f"--init {self.init}: {exc}") from None

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else self.steps // 200
