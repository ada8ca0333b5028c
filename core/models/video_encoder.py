"""StepDiff's frozen video encoders, as references: `--encoder` resolved to an EncoderSpec (what to
build, checked, nothing loaded). The encoders themselves are built in pipelines/stepdiff.

- open_clip:REF: a CLIP image tower (an alias from `vi models`, a folder or checkpoint with
  clip_arch, hf-hub:org/name, or NAME:TAG), its frames' tokens pooled;
- efficientnet-lite0: the embedded ImageNet classifier's features (offline);
- hf:FOLDER_OR_HUB_ID: a transformers video model (a folder, or a hub id in the local cache).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from vi.core.errors import ModelNotAvailable
from vi.core.models import vision
from vi.core.models.catalog import DEFAULT_IMAGE_CLASSIFIER
from vi.core.models.sources import hub_snapshot

OPEN_CLIP, EFFICIENTNET, HF = "open_clip", vision.IMAGENET_ARCH, "hf"


@dataclass(frozen=True)
class EncoderSpec:
    """What `--encoder` resolved to, before anything is built. `ref` is the canonical name (paths made
    absolute), the one stored in `info` and in each record's `features.encoder`."""

    ref: str
    kind: str  # open_clip | efficientnet-lite0 | hf
    frames: int
    clip_arch: str | None = None
    clip: vision.ClipSource | None = None
    weights: Path | None = None  # EfficientNet-Lite0's state dict
    folder: Path | None = None  # the transformers model folder

    @property
    def identity(self) -> dict:
        """What a feature store must agree on before its tensors can be mixed with this encoder's."""
        return {"encoder": self.ref, "kind": self.kind, "clip_arch": self.clip_arch, "frames": self.frames}


PROCESSOR_FILE = "preprocessor_config.json"
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def _absolute(ref: str) -> str:
    path = Path(ref).expanduser()
    return str(path.resolve()) if path.exists() else ref


def resolve_video_encoder(ref: str, clip_arch: str | None = None, frames: int = 8) -> EncoderSpec:
    """`--encoder` to an EncoderSpec; bad values raise ValueError, a missing model ModelNotAvailable."""
    if frames < 1:
        raise ValueError(f"--frames must be at least 1, got {frames}")
    kind, _, name = ref.partition(":")
    if clip_arch is not None and kind != OPEN_CLIP:
        raise ValueError("--clip-arch goes with --encoder open_clip:CHECKPOINT_FILE")
    if ref == EFFICIENTNET:
        return EncoderSpec(ref, EFFICIENTNET, frames, weights=vision.locate_imagenet_classifier(DEFAULT_IMAGE_CLASSIFIER))
    if kind == OPEN_CLIP and name:
        arch = _absolute(clip_arch) if clip_arch else None
        source = vision.resolve_clip(_absolute(name), arch)
        return EncoderSpec(f"{OPEN_CLIP}:{_absolute(name)}", OPEN_CLIP, frames, arch, clip=source)
    if kind == HF and name:
        folder = _hf_folder(ref, name)
        if not (folder / "config.json").is_file() or not (folder / PROCESSOR_FILE).is_file():
            raise ModelNotAvailable(f"video encoder {ref!r}: {folder} is not a transformers model folder with "
                                    f"config.json and {PROCESSOR_FILE}; download the whole repository")
        expected = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("num_frames")
        if isinstance(expected, int) and expected != frames:  # its position embeddings fix the count
            raise ValueError(f"--encoder {ref} takes {expected} frames per clip (its config's num_frames); "
                             f"give --frames {expected}")
        return EncoderSpec(f"{HF}:{_absolute(name)}", HF, frames, folder=folder)
    raise ModelNotAvailable(f"unknown video encoder {ref!r}: give open_clip:REF (a CLIP alias from `vi models`, "
                            f"a folder or checkpoint, hf-hub:org/name, or NAME:TAG), {EFFICIENTNET}, or "
                            "hf:FOLDER_OR_HUB_ID (a transformers video model)")



def _hf_folder(ref: str, name: str) -> Path:
    """A folder as given, or a hub id's snapshot in the local cache: nothing here downloads."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve()
    folder = hub_snapshot(name) if _HUB_ID.match(name) else None
    if folder is None:
        raise ModelNotAvailable(f"video encoder {ref!r}: {name} is neither a folder nor a hub id in the local "
                                f"Hugging Face cache; on a machine with internet run `hf download {name}` and "
                                "copy the cache here (or give the model's folder)")
    return folder
