"""DINOv2 image features (transformers' Dinov2Model), loaded once per process.

A reference is resolved to a local folder first (`resolve_dino`, cheap, no torch model built), so a
missing model is a ModelNotAvailable before any work, naming what to fetch:
- an alias from `vi models` (dinov2-base), from the local HF cache;
- a local folder holding a transformers DINOv2 model (config.json + weights) and its
  preprocessor_config.json (what `save_pretrained` of the model and its image processor write);
- a hub repo id (`facebook/dinov2-base`, or `hf-hub:org/name`), from the local HF cache only unless
  the user allowed downloads (VI_ALLOW_DOWNLOAD=1 and HF_HUB_OFFLINE unset, see `sources`).

`image_features` gives one vector per image: the pooled output (the layer-normed CLS token), the
feature DINOv2's authors use for retrieval.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vi.core.devices import Placement
from vi.core.errors import ModelNotAvailable, SetupError
from vi.core.models.cache import load_once
from vi.core.models.catalog import CATALOG, DEFAULT_DINO, local_weights
from vi.core.models.sources import downloads_allowed, hub_snapshot

_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
_NEEDS = ("config.json", "preprocessor_config.json")


@dataclass(frozen=True)
class DinoSource:
    label: str  # what the user named: messages and outputs
    folder: Path


@dataclass
class DinoModel:
    model: Any  # transformers Dinov2Model, eval mode, on the placement's device
    processor: Any  # its image processor (resize, centre crop, normalise)
    source: DinoSource
    placement: Placement


def _from_folder(label: str, folder: Path) -> DinoSource:
    missing = [name for name in _NEEDS if not (folder / name).is_file()]
    if missing:
        raise ModelNotAvailable(f"DINOv2 model {label!r}: {folder} lacks {' and '.join(missing)}; give a folder "
                                "written by save_pretrained of a Dinov2Model and its image processor, or a hub "
                                f"repo such as {DEFAULT_DINO} in the local cache")
    return DinoSource(label, folder)


def resolve_dino(ref: str = DEFAULT_DINO) -> DinoSource:
    """The local folder behind a DINOv2 reference; raises ModelNotAvailable at once."""
    if ref in CATALOG:
        return _from_folder(ref, local_weights(ref, role="dino"))
    path = Path(ref).expanduser()
    if path.is_dir():
        return _from_folder(ref, path)
    repo = ref.removeprefix("hf-hub:")
    if not (ref.startswith("hf-hub:") or _HUB_ID.match(ref)):
        raise ModelNotAvailable(f"DINOv2 model {ref!r}: neither an alias from `vi models`, an existing folder "
                                f"nor a hub repo id such as {DEFAULT_DINO}")
    snapshot = hub_snapshot(repo)
    if snapshot is None and downloads_allowed():
        from huggingface_hub import snapshot_download

        snapshot = Path(snapshot_download(repo))
    if snapshot is None:
        raise ModelNotAvailable(f"DINOv2 model {ref!r}: {repo} is not in the local Hugging Face cache; on a "
                                f"machine with internet run `hf download {repo}` and copy the cache here, or set "
                                "VI_ALLOW_DOWNLOAD=1 where the hub is reachable")
    return _from_folder(ref, snapshot)


def dino_available(ref: str = DEFAULT_DINO) -> bool:
    try:
        resolve_dino(ref)
    except ModelNotAvailable:
        return False
    return True


def _build(source: DinoSource, placement: Placement) -> DinoModel:
    from transformers import AutoImageProcessor, AutoModel

    try:
        model = AutoModel.from_pretrained(source.folder, local_files_only=True)
        # the slow (PIL) processor: the one the model was trained and published with
        processor = AutoImageProcessor.from_pretrained(source.folder, local_files_only=True, use_fast=False)
    except Exception as exc:  # a truncated file, another architecture: nothing an input can fix
        raise SetupError(f"DINOv2 model {source.label!r} did not load: {type(exc).__name__}: {exc}") from exc
    return DinoModel(model.to(placement.device).eval(), processor, source, placement)


def load_dino(source: DinoSource, placement: Placement) -> DinoModel:
    return load_once(("dino", source, placement), lambda: _build(source, placement))


def image_features(dino: DinoModel, images: list, batch_size: int = 32):
    """(N, D) float32 numpy: the pooled feature of each PIL image (not normalised)."""
    import numpy as np
    import torch

    dtype = dino.placement.torch_dtype()
    autocast = torch.autocast(dino.placement.kind, dtype=dtype, enabled=dtype in (torch.float16, torch.bfloat16))
    out = []
    with torch.inference_mode(), autocast:
        for start in range(0, len(images), batch_size):
            batch = [image.convert("RGB") for image in images[start:start + batch_size]]
            pixels = dino.processor(images=batch, return_tensors="pt")["pixel_values"]
            output = dino.model(pixel_values=pixels.to(dino.placement.device))
            out.append(output.pooler_output.float().cpu().numpy())
    size = dino.model.config.hidden_size
    return np.concatenate(out) if out else np.zeros((0, size), np.float32)
