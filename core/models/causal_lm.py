"""Causal language models as PyTorch modules (transformers), loaded once per process and frozen.

Where llama.cpp (`core.models.llm`) runs a GGUF model as a black box, a model whose input
embeddings are spliced with other tokens (a video-conditioned LLM) needs the network itself.
A reference is, in this order:
- an alias from `vi models` of a GGUF chat model (smollm2-135m, qwen2.5-coder-1.5b): transformers
  dequantizes the GGUF into a float model (`gguf_file=`). That takes seconds per load (19 s for
  SmolLM2), so the result is converted once into vi's cache as a transformers folder and loaded
  from there afterwards (0.2 s);
- a .gguf file (the same, without the cache: the file may change);
- a folder transformers can load (config.json + weights), or a hub id in the local cache.
Nothing downloads: a hub id missing from the cache is a ModelNotAvailable naming what to fetch.
"""

from __future__ import annotations

import fcntl
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vi.core.devices import Placement
from vi.core.errors import ModelNotAvailable, SetupError
from vi.core.models.cache import load_once
from vi.core.models.catalog import CATALOG, local_weights
from vi.core.models.sources import cache_dir

CONVERTED_SUFFIX = "-transformers"  # the cache folder of an alias's converted GGUF


@dataclass(frozen=True)
class CausalLMSource:
    label: str  # what the user named: messages and checkpoints record it
    folder: str  # what from_pretrained reads
    gguf_file: str | None = None  # a GGUF file inside `folder`, dequantized on load
    cache_as: str | None = None  # convert once into this cache folder (aliases only)


@dataclass
class CausalLM:
    model: Any  # a transformers *ForCausalLM, eval mode, requires_grad off, on the placement
    tokenizer: Any  # a fast tokenizer (offsets are needed to cut answers from text)
    source: CausalLMSource
    placement: Placement

    @property
    def hidden_size(self) -> int:
        return int(self.model.get_input_embeddings().embedding_dim)


def resolve_causal_lm(ref: str) -> CausalLMSource:
    """Where the weights `ref` names are, checked without building anything."""
    spec = CATALOG.get(ref)
    if spec is not None and spec.role != "llm":
        raise ModelNotAvailable(f"model {ref!r} is a {spec.role} model, not a language model")
    path = local_weights(ref)  # alias, path, or cached hub id; raises with what to fetch
    if path.is_file() and path.suffix == ".gguf":
        return CausalLMSource(ref, str(path.parent), path.name,
                              cache_as=ref + CONVERTED_SUFFIX if spec is not None else None)
    if path.is_dir() and (path / "config.json").is_file():
        return CausalLMSource(ref, str(path))
    if path.is_dir():
        found = sorted(path.rglob("*.gguf"))
        if len(found) == 1:
            return CausalLMSource(ref, str(found[0].parent), found[0].name)
    raise ModelNotAvailable(f"model {ref!r}: {path} is neither a transformers model folder (config.json and "
                            "weights) nor a .gguf file")


def _converted(source: CausalLMSource) -> Path:
    """The transformers folder of an alias's GGUF, converted into vi's cache once (under a lock,
    so array tasks sharing a node convert once and reuse)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = cache_dir() / str(source.cache_as)
    done = target / "config.json"
    if done.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file():
            return target
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        tokenizer = AutoTokenizer.from_pretrained(source.folder, gguf_file=source.gguf_file)
        model = AutoModelForCausalLM.from_pretrained(source.folder, gguf_file=source.gguf_file)
        tokenizer.save_pretrained(partial)
        model.save_pretrained(partial)  # config.json last-but-not-least: `done` means complete
        shutil.rmtree(target, ignore_errors=True)
        partial.replace(target)
    return target


def _build(source: CausalLMSource, placement: Placement) -> CausalLM:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        if source.cache_as:
            folder, extra = str(_converted(source)), {}
        else:
            folder, extra = source.folder, ({"gguf_file": source.gguf_file} if source.gguf_file else {})
        tokenizer = AutoTokenizer.from_pretrained(folder, **extra)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=placement.torch_dtype(), **extra)
    except (OSError, ValueError, ImportError) as exc:
        raise SetupError(f"language model {source.label!r} did not load: {type(exc).__name__}: {exc}") from exc
    if not getattr(tokenizer, "is_fast", False):
        raise SetupError(f"language model {source.label!r}: its tokenizer is not a fast tokenizer, which vi "
                         "needs to cut answers out of text by character offsets")
    model.requires_grad_(False)
    model.eval()
    return CausalLM(model.to(placement.device), tokenizer, source, placement)


def load_causal_lm(source: CausalLMSource, placement: Placement) -> CausalLM:
    return load_once(("causal-lm", source, placement), lambda: _build(source, placement))
