"""A small learnable StepDiff task on synthetic encoder features, for the model's tests.

Six colours; a clip of a colour has tokens near that colour's random prototype. A pair-QA sample
asks which colour the second video is, and the answer is that colour's name: the answer can
only be known from the candidate's tokens, so a projector that lowers the loss reads the video.
Held-out pairs are colour pairs never seen in training (each colour is seen).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

COLOURS = ("red", "green", "blue", "yellow", "black", "white")
QUESTION = "What colour is the second video?"
ENCODER = {"encoder": "synthetic-prototypes", "kind": "test", "dim": 16, "frames": 2, "tokens_per_frame": 4}
TINY_PROJECTOR = ("--latents", "4", "--projector-dim", "32", "--heads", "4")


def _record(a: str, b: str, k: int) -> dict:
    return {"id": f"{a}_{k}__{b}_{k}", "reference": {"id": f"{a}_{k}"}, "candidate": {"id": f"{b}_{k}"},
            "keystep": "show a colour", "qa": [{"type": 1, "q": QUESTION, "a": b}]}


def make_colour_task(folder: Path, copies: int = 3) -> dict[str, Path]:
    """store/ (a feature store), train.jsonl and val.jsonl (vi pair-qa records) under `folder`."""
    import torch
    from vi.core.features import FeatureWriter

    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    prototypes = {c: torch.randn(ENCODER["dim"], generator=generator) * 2 for c in COLOURS}
    shape = (ENCODER["frames"], ENCODER["tokens_per_frame"], ENCODER["dim"])
    tensors = {f"{c}_{k}": prototypes[c] + 0.3 * torch.randn(*shape, generator=generator)
               for c in COLOURS for k in range(copies)}
    FeatureWriter(folder / "store", ENCODER, "float32").write(tensors)
    pairs = list(itertools.permutations(COLOURS, 2))
    train = [_record(a, b, k) for i, (a, b) in enumerate(pairs) for k in range(copies) if i % 5]
    val = [_record(a, b, k) for i, (a, b) in enumerate(pairs) for k in range(copies) if not i % 5]
    for name, records in (("train", train), ("val", val)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return {"store": folder / "store", "train": folder / "train.jsonl", "val": folder / "val.jsonl"}
