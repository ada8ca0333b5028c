"""Word stems for the stages that compare texts by the words they share (StepDiff's QA filter, ShowHowTo's
preview and recap reading): Porter's, from nltk (already a dependency for sentence splitting), imported on
first use."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _porter():
    from nltk.stem import PorterStemmer

    return PorterStemmer()


@lru_cache(maxsize=65536)  # a stage stems the same few hundred words again and again
def stem(word: str) -> str:
    """The Porter stem of a lower-case word, a possessive 's dropped first ("sanded", "sanding" and "sand"
    share one)."""
    return _porter().stem(word.removesuffix("'s"))
