"""Sentence-level segments from timed words.

Step extraction cites segment times, so a segment must be about one sentence. whisperx's
batched decoding returns one segment per VAD chunk (up to 30 s); these functions re-cut the
words at sentence ends, and at long pauses, which end an utterance even without punctuation.
"""

from __future__ import annotations

import re

SENTENCE_END = re.compile(r"[.!?。！？…]+[\"')\]”’]*$")
# Tokens that end in a full stop without ending a sentence.
ABBREVIATIONS = {"mr.", "mrs.", "ms.", "dr.", "prof.", "st.", "vs.", "etc.", "e.g.", "i.e.",
                 "approx.", "no.", "fig.", "jr.", "sr.", "oz.", "lb.", "tbsp.", "tsp."}
MAX_PAUSE_S = 2.0


def ends_sentence(word: str) -> bool:
    token = word.strip().lower()
    if not SENTENCE_END.search(token) or token in ABBREVIATIONS:
        return False
    return not re.fullmatch(r"(?:[a-z]\.)+", token)  # initials such as "u.s."


def split_sentences(words: list[dict], max_pause: float = MAX_PAUSE_S) -> list[dict]:
    """Group words {word, start, end, score} into segments {start, end, text, words}."""
    segments: list[dict] = []
    current: list[dict] = []

    def close() -> None:
        if current:
            segments.append({
                "start": current[0]["start"],
                "end": current[-1]["end"],
                "text": " ".join(w["word"] for w in current),
                "words": list(current),
            })
            current.clear()

    for word in words:
        if current and word["start"] - current[-1]["end"] > max_pause:
            close()
        current.append(word)
        if ends_sentence(word["word"]):
            close()
    close()
    return segments
