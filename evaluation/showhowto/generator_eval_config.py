"""The options of `vi eval showhowto` (generator_eval.py scores them), apart from the numpy and PIL code so
that the command's --help imports neither, and the paper's Table 1 figures its table is printed beside."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Optional

from vi.core.config import option

METHODS = ("generated", "copy", "random", "source")
# Table 1, ShowHowTo test set: (step faithfulness, scene consistency, task faithfulness).
PAPER_TABLE_1 = {"ShowHowTo": (0.52, 0.34, 0.42), "copy of input": (0.19, 0.62, 0.39),
                 "random": (0.19, 0.00, 0.01), "source sequences": (0.50, 1.00, 0.56)}
Method = Enum("Method", [(name, name) for name in METHODS[1:]], type=str)  # --method's choices: the baselines


@dataclass(frozen=True, kw_only=True)
class GeneratorEvalConfig:
    """The options of `vi eval showhowto`: the test set, what is scored on it, and the models scoring it."""

    dataset: Path = option(exists=True, file_okay=False, show_default=False,
                           help="The test set: a folder written by vi export showhowto.")
    generated: Path | None = option(None, exists=True, dir_okay=False, show_default=False,
                                    help="vi generate's records (JSONL) for the test set's sequences.")
    method: str | None = option(  # None: score --generated
        None, cli_type=Optional[Method], parse=lambda method: None if method is None else Method(method).value,
        show_default=False, help="Score a baseline instead of --generated.")
    clip: str = option("auto", help=(
        "Image-text model of step and task faithfulness: auto (dfn5b-clip-vit-h-14 when cached, "
        "else imagenet-labels), imagenet-labels, or a CLIP model as vi align-frames --model takes "
        "it (alias, hf-hub:org/name, NAME:TAG, open_clip folder, checkpoint with --clip-arch)."))
    clip_arch: str | None = option(None, help=(
        "The architecture of a --clip checkpoint file: an open_clip model name or a model config .json."))
    dino: str = option("auto", help=(
        "Image model of scene consistency: auto (facebook/dinov2-base when cached, else "
        "efficientnet-lite0), efficientnet-lite0 (pooled features), a DINOv2 hub repo in the "
        "local cache, or a folder with a transformers DINOv2 model and its image processor."))
    device: str = option("auto", help="auto, cpu, cuda or cuda:N.")
    batch_size: int = option(32, min=1, help="Images (or texts) per model call.")
    seed: int = option(0, help="Seed of --method random's draws.")
