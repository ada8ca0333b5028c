"""Vision models, each loaded once per process: open_clip image-text models and the ImageNet
classifier EfficientNet-Lite0.

A CLIP reference is resolved to local files first (`resolve_clip`, cheap, no torch model
built), so a missing model is a ModelNotAvailable before any record, naming what to fetch:
- a catalogue alias (`dfn5b-clip-vit-h-14`): its hub repo, from the local HF cache only;
- `hf-hub:org/name` (or `org/name`): a repo with open_clip_config.json in the local cache;
- `NAME:TAG`: an open_clip architecture and pretrained tag (`ViT-B-32:openai`), whose weights
  file must already be in the HF cache (or open_clip's ~/.cache/clip for URL-only tags);
- a local folder holding open_clip_config.json and a checkpoint;
- a local checkpoint file, with `arch` naming its architecture: an open_clip model name or a
  model config .json file (registered with open_clip under the file's stem).
Downloads happen only where the user allowed them (VI_ALLOW_DOWNLOAD=1, see `sources`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vi.core.devices import Placement
from vi.core.errors import ModelNotAvailable, SetupError
from vi.core.models.cache import load_once
from vi.core.models.catalog import CATALOG, DEFAULT_IMAGE_CLASSIFIER, local_weights
from vi.core.models.sources import downloads_allowed, hub_snapshot

OPEN_CLIP_CONFIG = "open_clip_config.json"
CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
IMAGENET_ARCH = DEFAULT_IMAGE_CLASSIFIER  # the catalogue's alias is the package's architecture name
IMAGENET_INPUT = 224  # EfficientNet-Lite0's training resolution


@dataclass(frozen=True)
class ClipSource:
    """What open_clip is asked to build: `model_name` (a name or a `local-dir:`/`hf-hub:` id)
    and, for a bare name, the checkpoint `pretrained` plus the settings its tag implies."""

    label: str  # what the user named: messages and the output's `alignment.model`
    model_name: str
    pretrained: str | None = None
    quick_gelu: bool = False
    preprocess: tuple[tuple[str, Any], ...] = ()  # a pretrained tag's image preprocessing
    arch_file: str | None = None  # a model config .json to register before building


@dataclass
class ClipModel:
    model: Any  # open_clip CLIP / CustomTextCLIP, in eval mode on the placement's device
    tokenizer: Any
    preprocess: dict  # open_clip's final PreprocessCfg dict: size, mean, std, resize_mode, ...
    source: ClipSource


def _has_checkpoint(folder: Path) -> bool:
    return any(p.suffix in CHECKPOINT_SUFFIXES for p in folder.iterdir() if p.is_file())


def _tag_source(label: str, arch: str, tag: str, weights: str) -> ClipSource:
    import open_clip

    cfg = open_clip.get_pretrained_cfg(arch, tag)
    keys = ("mean", "std", "interpolation", "resize_mode")
    return ClipSource(label, arch, weights, bool(cfg.get("quick_gelu", False)),
                      tuple((k, cfg[k]) for k in keys if cfg.get(k) is not None))


def _from_folder(label: str, folder: Path) -> ClipSource:
    spec = CATALOG.get(label)
    if spec is not None and spec.open_clip_tag:  # open_clip's own config for the tag: architecture and preprocessing
        for name in ("open_clip_model.safetensors", "open_clip_pytorch_model.bin"):
            if (folder / name).is_file():
                return _tag_source(label, *spec.open_clip_tag, str(folder / name))
    if (folder / OPEN_CLIP_CONFIG).is_file() and _has_checkpoint(folder):
        return ClipSource(label, f"local-dir:{folder}")
    raise ModelNotAvailable(
        f"CLIP model {label!r}: {folder} is not an open_clip model folder (it needs "
        f"{OPEN_CLIP_CONFIG} and a checkpoint such as open_clip_model.safetensors); for a bare "
        "checkpoint file pass it with --clip-arch NAME")


def _arch(arch: str) -> tuple[str, str | None]:
    """(open_clip model name, config file to register) for `--clip-arch`."""
    import open_clip

    path = Path(arch).expanduser()
    if arch.endswith(".json") and path.is_file():
        open_clip.add_model_config(path)
        return path.stem, str(path.resolve())
    if arch in open_clip.list_models():
        return arch, None
    raise ValueError(f"--clip-arch {arch!r} is neither an open_clip model name (see "
                     "open_clip.list_models(), e.g. ViT-B-32) nor a model config .json file")


def _cached_weights(cfg: dict) -> tuple[str | None, str]:
    """(local weights file of a pretrained tag or None, the command that fetches it)."""
    from huggingface_hub import try_to_load_from_cache
    from open_clip.constants import HF_SAFE_WEIGHTS_NAME, HF_WEIGHTS_NAME

    if cfg.get("hf_hub"):
        # open_clip's form: 'org/name/' (its default file) or 'org/name/file.bin'
        repo, filename = os.path.split(cfg["hf_hub"])
        filename = filename or HF_WEIGHTS_NAME
        names = [filename]
        if filename == HF_WEIGHTS_NAME:
            names.insert(0, HF_SAFE_WEIGHTS_NAME)
        elif filename.endswith((".bin", ".pth")):
            names.insert(0, filename[:-4] + ".safetensors")
        for name in names:
            found = try_to_load_from_cache(repo, name)
            if isinstance(found, str):
                return found, ""
        return None, f"hf download {repo}"
    url = cfg.get("url", "")
    local = Path("~/.cache/clip").expanduser() / os.path.basename(url)
    return (str(local) if local.is_file() else None), f"curl -L -o {local} {url}"


def _named_tag(ref: str) -> ClipSource | None:
    import open_clip

    arch, _, tag = ref.rpartition(":")
    if not arch or arch not in open_clip.list_models():
        return None
    cfg = open_clip.get_pretrained_cfg(arch, tag)
    if not cfg:
        tags = ", ".join(open_clip.list_pretrained_tags_by_model(arch)) or "none"
        raise ValueError(f"--model {ref}: open_clip has no pretrained tag {tag!r} for {arch} "
                         f"(its tags: {tags})")
    weights, fetch = _cached_weights(cfg)
    if weights is None:
        if downloads_allowed():  # open_clip fetches the tag's weights itself
            return _tag_source(ref, arch, tag, tag)
        raise ModelNotAvailable(f"CLIP model {ref!r}: its weights are not in the local cache; on a "
                                f"machine with internet run `{fetch}` and copy the cache here")
    return _tag_source(ref, arch, tag, weights)


def resolve_clip(ref: str, arch: str | None = None) -> ClipSource:
    """The local files behind a CLIP reference (see the module docstring); raises at once."""
    if ref in CATALOG:
        return _from_folder(ref, local_weights(ref, role="clip"))
    path = Path(ref).expanduser()
    if path.is_dir():
        return _from_folder(ref, path)
    if path.is_file():
        if arch is None:
            raise ValueError(f"--model {ref} is a checkpoint file: say which architecture it is "
                             "with --clip-arch (an open_clip model name or a model config .json)")
        name, arch_file = _arch(arch)
        return ClipSource(ref, name, str(path.resolve()), arch_file=arch_file)
    repo = ref.removeprefix("hf-hub:")
    if ref.startswith("hf-hub:") or _HUB_ID.match(ref):
        snapshot = hub_snapshot(repo)
        if snapshot is not None:
            return _from_folder(ref, snapshot)
        if downloads_allowed():
            return ClipSource(ref, f"hf-hub:{repo}")
        raise ModelNotAvailable(f"CLIP model {ref!r}: {repo} is not in the local Hugging Face cache; "
                                f"on a machine with internet run `hf download {repo}` and copy the "
                                "cache here, or set VI_ALLOW_DOWNLOAD=1 where the hub is reachable")
    named = _named_tag(ref)
    if named is not None:
        return named
    raise ModelNotAvailable(f"unknown CLIP model {ref!r}: not an alias from `vi models`, an existing "
                            "path, hf-hub:org/name, nor an open_clip NAME:TAG such as ViT-B-32:openai")


def _build_clip(source: ClipSource, placement: Placement) -> ClipModel:
    import open_clip
    from open_clip.model import get_model_preprocess_cfg

    if source.arch_file:  # registered in this process too: resolution may have run elsewhere
        open_clip.add_model_config(source.arch_file)
    try:
        model = open_clip.create_model(
            source.model_name, pretrained=source.pretrained, device=placement.device,
            force_quick_gelu=source.quick_gelu, force_preprocess_cfg=dict(source.preprocess),
            pretrained_text=False, require_pretrained=True)
        tokenizer = open_clip.get_tokenizer(source.model_name)
    except Exception as exc:  # a wrong --clip-arch, a truncated file: nothing a record can fix
        raise SetupError(f"CLIP model {source.label!r} did not load: {type(exc).__name__}: {exc}"
                         ) from exc
    model.eval()
    return ClipModel(model, tokenizer, dict(get_model_preprocess_cfg(model)), source)


def load_clip(source: ClipSource, placement: Placement) -> ClipModel:
    return load_once(("clip", source, placement), lambda: _build_clip(source, placement))


# --- the ImageNet classifier --------------------------------------------------------------

@dataclass
class ImageNetClassifier:
    """EfficientNet-Lite0; input RGB 224x224 scaled as (x - 127) / 128, as it was trained."""

    model: Any
    categories: tuple[str, ...]  # the 1000 ImageNet-1k class names, in logit order
    input_size: int = IMAGENET_INPUT


def locate_imagenet_classifier(ref: str = IMAGENET_ARCH) -> Path:
    """The weights file (a lukemelas-style EfficientNet-Lite0 state dict) `ref` names."""
    from importlib.util import find_spec

    path = local_weights(ref, role="image-classifier")
    if find_spec("efficientnet_lite_pytorch") is None:
        raise ModelNotAvailable(f"image classifier {ref!r} needs the package efficientnet-lite-pytorch, "
                                "which is not installed; make install (or: pip install 'vi[models]')")
    if not path.is_file():
        raise ModelNotAvailable(f"image classifier {ref!r}: {path} is not a weights file; give an "
                                "EfficientNet-Lite0 state dict (.pth)")
    return path


def _build_imagenet(weights: Path, placement: Placement) -> ImageNetClassifier:
    from efficientnet_lite_pytorch import EfficientNet
    from torchvision.models._meta import _IMAGENET_CATEGORIES

    try:  # a str, not a Path: anything else makes the package download its own weights
        model = EfficientNet.from_pretrained(IMAGENET_ARCH, weights_path=str(weights))
    except Exception as exc:
        raise SetupError(f"image classifier {weights} did not load: {type(exc).__name__}: {exc}") from exc
    model.to(placement.device).eval()
    return ImageNetClassifier(model, tuple(_IMAGENET_CATEGORIES))


def load_imagenet_classifier(weights: Path, placement: Placement) -> ImageNetClassifier:
    return load_once(("imagenet-classifier", str(weights), placement),
                     lambda: _build_imagenet(weights, placement))
