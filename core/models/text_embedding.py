"""Sentence embeddings from a sentence-transformers folder, as sentence-transformers makes them.

A catalogue alias (`minilm-l6`, `mpnet-base`), a local sentence-transformers folder, or a hub
id in the local cache. The folder's own configuration decides the pooling (`1_Pooling`) and
the maximum sequence length (`sentence_bert_config.json`); the transformer runs through
transformers' AutoModel, which is all sentence-transformers does for these models, without
importing its training stack. Embeddings are always L2-normalised, so a dot product is a
cosine similarity, which is what every caller in vi compares.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.devices import Placement
from vi.core.errors import ModelNotAvailable
from vi.core.models.cache import load_once
from vi.core.models.catalog import local_weights

if TYPE_CHECKING:
    import numpy as np

ROLE = "text-embedding"
POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")


@dataclass(frozen=True)
class EmbedderFiles:
    folder: Path
    pooling: str  # one of POOLING_MODES
    max_length: int


def locate(ref: str | Path) -> EmbedderFiles:
    """The folder `ref` names and how to pool it; ModelNotAvailable if it is not a model folder."""
    found = local_weights(ref, role=ROLE)
    folder = found.parent if found.is_file() else found
    if not (folder / "config.json").is_file():
        raise ModelNotAvailable(f"text-embedding model {str(ref)!r}: {folder} has no config.json; "
                                "give a sentence-transformers folder (or an alias from `vi models`)")
    pooling = "mean_tokens"  # sentence-transformers' default when a folder says nothing
    pooling_config = folder / "1_Pooling" / "config.json"
    if pooling_config.is_file():
        flags = json.loads(pooling_config.read_text())
        chosen = [mode for mode in POOLING_MODES if flags.get(f"pooling_mode_{mode}")]
        if len(chosen) != 1:
            raise ModelNotAvailable(f"text-embedding model {str(ref)!r}: {pooling_config} asks for "
                                    f"pooling {chosen or 'none'}; vi supports exactly one of "
                                    f"{', '.join(POOLING_MODES)}")
        pooling = chosen[0]
    max_length = 512
    st_config = folder / "sentence_bert_config.json"
    if st_config.is_file():
        max_length = int(json.loads(st_config.read_text()).get("max_seq_length") or max_length)
    return EmbedderFiles(folder, pooling, max_length)


class TextEmbedder:
    """`encode(texts)` -> (len(texts), dim) float32, unit length. Load with `load_text_embedder`."""

    def __init__(self, files: EmbedderFiles, placement: Placement):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.files = files
        self.placement = placement
        self.tokenizer = AutoTokenizer.from_pretrained(str(files.folder), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(files.folder), local_files_only=True)
        self.model.to(placement.device).eval()
        self.max_length = min(files.max_length, self.tokenizer.model_max_length)
        self._torch = torch

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        import numpy as np

        torch = self._torch
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        out = []
        half = self.placement.torch_dtype() in (torch.float16, torch.bfloat16)
        with torch.inference_mode(), torch.autocast(self.placement.kind, dtype=self.placement.torch_dtype(),
                                                    enabled=half):
            for start in range(0, len(texts), batch_size):
                batch = self.tokenizer(list(texts[start:start + batch_size]), padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt").to(self.placement.device)
                tokens = self.model(**batch).last_hidden_state.float()
                pooled = pool(tokens, batch["attention_mask"], self.files.pooling)
                out.append(torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy())
        return np.concatenate(out).astype(np.float32, copy=False)


def pool(tokens, mask, mode: str):
    """sentence-transformers' Pooling module, for one mode."""
    if mode == "cls_token":
        return tokens[:, 0]
    weights = mask.unsqueeze(-1).to(tokens.dtype)
    if mode == "max_tokens":
        return tokens.masked_fill(weights == 0, -1e9).max(dim=1).values
    summed = (tokens * weights).sum(dim=1)
    counts = weights.sum(dim=1).clamp(min=1e-9)
    return summed / (counts.sqrt() if mode == "mean_sqrt_len_tokens" else counts)


def load_text_embedder(ref: str | Path, placement: Placement) -> TextEmbedder:
    """The embedder `ref` names, loaded once per process per (folder, placement)."""
    files = locate(ref)
    return load_once(("text-embedding", files, placement), lambda: TextEmbedder(files, placement))
