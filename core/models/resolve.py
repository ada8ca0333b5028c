"""One way to find a model: `resolve(ref, role)` -> what that role's loader needs.

`ref` is a catalogue alias (`vi models`), a local path, a hub id `org/name` in the local
Hugging Face cache, or a prefixed form where the role takes one. Each role checks what its
loader will need (a GGUF file, a transformers folder with a chat template, open_clip's
config...) without building anything, so a missing or unusable model stops a command before any
record. A missing model is a ModelNotAvailable (a SetupError, exit 5) naming the reference, what
to fetch and `vi models`; a malformed reference (a bad prefix or option) is a ValueError (exit
2). Nothing here downloads: hub ids are looked up in the local cache only (HF_HUB_OFFLINE or
not), unless the user allowed downloads (VI_ALLOW_DOWNLOAD=1 and HF_HUB_OFFLINE unset, see
`sources`).

    role               ref                                              returns
    asr                alias, CTranslate2 folder, hub id, or a          Path (the model folder)
                       faster-whisper size name (large-v2)
    alignment          alias, folder, hub id (a wav2vec2 CTC model)     Path
    llm                REF or llama.cpp:REF (a GGUF)                    Path (the .gguf file)
                       transformers:REF                                 CausalLMSource
                       openai:MODEL@URL (not contacted: check_llm does) LLMSpec
    causal-lm          [transformers:]REF (GGUF alias, folder, hub id)  CausalLMSource
    text-embedding     alias, sentence-transformers folder, hub id      EmbedderFiles
    image-classifier   alias (efficientnet-lite0), .pth file            Path (the state dict)
    clip               [open_clip:]alias, folder, checkpoint (arch=),   ClipSource
                       hf-hub:ID, open_clip NAME:TAG (ViT-B-32:openai)
    dino               alias, folder, hub id or hf-hub:ID               DinoSource
    vlm                [transformers:]alias, folder or hub id           HFModelFiles
    detector           alias, folder or hub id                          HFModelFiles
    video-encoder      open_clip:REF, efficientnet-lite0, hf:REF        EncoderSpec
                       (clip_arch=, frames=)
    generator          a file, or its catalogue name (then in vi's cache)  Path

Each role's checks live with its loader (vision.py, dino.py, vlm.py, ...), imported on first
use, so `vi models` and a command's --help import none of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from vi.core.errors import ModelNotAvailable, SetupError
from vi.core.models.catalog import get_spec, local_weights
from vi.core.models.sources import hub_path

if TYPE_CHECKING:
    from vi.core.models.causal_lm import CausalLMSource
    from vi.core.models.chat_backend import LLMSpec
    from vi.core.models.dino import DinoSource
    from vi.core.models.text_embedding import EmbedderFiles
    from vi.core.models.video_encoder import EncoderSpec
    from vi.core.models.vision import ClipSource
    from vi.core.models.vlm import HFModelFiles

TRANSFORMERS = "transformers:"  # the prefix that names a model transformers runs
OPEN_CLIP = "open_clip:"  # the prefix that names a model open_clip builds


def _asr(ref: str) -> Path:
    """A vi alias, a path, a hub id, or a faster-whisper size name ("large-v2", "small.en").

    Size names are what whisperx users type; they map to the Systran CTranslate2 repos and,
    like every hub model here, are used from the local cache only.
    """
    from faster_whisper.utils import _MODELS

    if ref in _MODELS and get_spec(ref) is None and not os.path.exists(ref):
        return hub_path(_MODELS[ref], ref)
    path = local_weights(ref, role="asr")
    if not (path / "model.bin").is_file():  # a file, or a folder of another format
        raise SetupError(f"--model {ref}: {path} is not a CTranslate2 Whisper model (a folder "
                         "holding model.bin, config.json and the tokenizer); give an alias from "
                         "`vi models`, such a folder, or a hub id in your cache")
    return path


def _alignment(ref: str) -> Path:
    return local_weights(ref, role="alignment")


def _llm(ref: str) -> Path | CausalLMSource | LLMSpec:
    from vi.core.models.chat_backend import LLMSpec

    spec = LLMSpec.parse(ref)
    if spec.backend == "openai":
        return spec
    if spec.backend == "transformers":
        return _causal_lm(spec.model)
    from vi.core.models.llm import gguf_path

    return gguf_path(spec.model)


def _causal_lm(ref: str) -> CausalLMSource:
    from vi.core.models.causal_lm import resolve_causal_lm

    return resolve_causal_lm(ref.removeprefix(TRANSFORMERS))


def _text_embedding(ref: str) -> EmbedderFiles:
    from vi.core.models.text_embedding import locate

    return locate(ref)


def _image_classifier(ref: str) -> Path:
    from vi.core.models.vision import locate_imagenet_classifier

    return locate_imagenet_classifier(ref)


def _clip(ref: str, arch: str | None = None) -> ClipSource:
    from vi.core.models.vision import resolve_clip

    return resolve_clip(ref.removeprefix(OPEN_CLIP), arch)


def _dino(ref: str) -> DinoSource:
    from vi.core.models.dino import resolve_dino

    return resolve_dino(ref)


def _vlm(ref: str) -> HFModelFiles:
    from vi.core.models.vlm import locate_vlm

    return locate_vlm(ref.removeprefix(TRANSFORMERS))


def _detector(ref: str) -> HFModelFiles:
    from vi.core.models.vlm import locate_detector

    return locate_detector(ref)


def _generator(ref: str) -> Path:
    """A generator's weights file: a path, or a catalogue name whose file is in vi's cache."""
    from vi.core.models.catalog import get_spec

    spec = get_spec(ref)
    if spec is not None and spec.role == "generator" and not Path(ref).exists():
        return spec.source.locate(spec.alias)
    return Path(ref)


def _video_encoder(ref: str, clip_arch: str | None = None, frames: int = 8) -> EncoderSpec:
    from vi.core.models.video_encoder import resolve_video_encoder

    return resolve_video_encoder(ref, clip_arch, frames)


ROLES: dict[str, Callable[..., Any]] = {
    "asr": _asr, "alignment": _alignment, "llm": _llm, "causal-lm": _causal_lm,
    "text-embedding": _text_embedding, "image-classifier": _image_classifier, "clip": _clip,
    "dino": _dino, "vlm": _vlm, "detector": _detector, "video-encoder": _video_encoder, "generator": _generator,
}


@overload
def resolve(ref: str | Path, role: Literal["asr", "alignment", "image-classifier"]) -> Path: ...
@overload
def resolve(ref: str | Path, role: Literal["llm"]) -> Path | CausalLMSource | LLMSpec: ...
@overload
def resolve(ref: str | Path, role: Literal["causal-lm"]) -> CausalLMSource: ...
@overload
def resolve(ref: str | Path, role: Literal["text-embedding"]) -> EmbedderFiles: ...
@overload
def resolve(ref: str | Path, role: Literal["clip"], *, arch: str | None = None) -> ClipSource: ...
@overload
def resolve(ref: str | Path, role: Literal["dino"]) -> DinoSource: ...
@overload
def resolve(ref: str | Path, role: Literal["vlm", "detector"]) -> HFModelFiles: ...
@overload
def resolve(ref: str | Path, role: str, **options: Any) -> Any: ...


def resolve(ref: str | Path, role: str, **options: Any) -> Any:
    """What the loader of `role` needs for the model `ref` names (see the module's docstring),
    checked now; `options` are the role's own (clip: arch; video-encoder: clip_arch, frames)."""
    resolver = ROLES.get(role)
    if resolver is None:
        raise ValueError(f"no model role {role!r}; the roles are {', '.join(ROLES)}")
    try:
        return resolver(str(ref), **options)
    except ModelNotAvailable as exc:
        if "vi models" in str(exc):
            raise
        raise ModelNotAvailable(f"{exc} (`vi models` lists the models vi knows and what gets each)") from None
