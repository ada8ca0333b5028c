"""A stand-in for the sentence embedder of vi extract-steps --grounding said, shared by its tests."""

from __future__ import annotations

import zlib

import numpy as np
from vi.pipelines.showhowto.step_citations import content_words


def words_embedder(texts: list[str]) -> np.ndarray:
    """A stand-in sentence embedder: unit-length bags of content words (hashed), so a step's
    similarity to a line is how many of its words the line says."""
    vectors = np.zeros((len(texts), 512))
    for i, text in enumerate(texts):
        for word in content_words(text):
            vectors[i, zlib.crc32(word.encode()) % 512] += 1.0
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)
