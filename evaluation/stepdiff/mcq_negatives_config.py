"""The options of `vi eval mcq-negatives` (mcq_negatives.py builds the instances), apart from the numpy
code so that every `vi eval` command's --help, and a scoring run, imports no numpy."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from vi.core.config import option
from vi.evaluation.stepdiff.metrics import ALLOW_UNKNOWN_HELP

VARIANTS = ("v1", "v2", "v3")
Variant = Enum("Variant", [(v, v) for v in VARIANTS], type=str)  # --variant's choices
SIMILAR_CAPTION = 0.8
AUTO = "auto"  # --text-model: mpnet-base when installed, else minilm-l6


@dataclass(frozen=True, kw_only=True)
class NegativesConfig:
    """The options of `vi eval mcq-negatives`."""

    input: Path = option(Path("-"), flag="--input", short="-i", help="DiffCap-style annotations (JSONL); - for stdin.")
    variant: Variant = option(Variant.v1, flag="--variant", help="How negatives are chosen (see above).")
    clip_features: Path | None = option(None, flag="--clip-features", exists=True, dir_okay=False,
                                        help="Visual embedding of every clip (needed by v1, v2).")
    text_model: str = option(AUTO, flag="--text-model", help=(
        "Sentence embedder for caption similarity: auto (mpnet-base when installed, else minilm-l6), an alias "
        "from `vi models`, or a sentence-transformers folder."))
    threshold: float = option(SIMILAR_CAPTION, flag="--threshold", min=-1.0, max=1.0, help=(
        "Refuse a negative with a same-category caption whose cosine similarity to the question is above this."))
    seed: int = option(0, flag="--seed", help="Seed of v3's draws and of the option order.")
    device: str = option("auto", flag="--device", help="Where the text embedder runs: auto, cpu, cuda...")
    allow_unknown_categories: bool = option(False, flag="--allow-unknown-categories", help=ALLOW_UNKNOWN_HELP)
