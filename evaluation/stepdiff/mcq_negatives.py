"""DiffMCQ instances from DiffCap-style annotations, the way StepDiff's Supp. S5 builds them.

One instance per caption: every caption of an annotated (reference, candidate, category) row
is its own question (`difference`), whose answer is the annotated pair. Each caption is a
separate description of the difference, so each is a separate test of recognising it. Three
negative pairs join the answer, chosen by the variant:
- v1: the other annotated pairs, nearest first by the L2 distance between the pair's mean
  visual embedding (mean of its two clips' unit-normalised CLIP embeddings) and the answer's;
  taken in that order if they share no clip with the answer;
- v2: as v1, but a negative may share one clip with the answer (never both: that is the answer);
- v3: the answer's reference, paired with clips drawn at random from every annotated clip
  except the answer's two.
In every variant a pair is refused if it has a caption in the instance's category whose
sentence-embedding cosine similarity to the instance's caption is above the threshold (0.8,
StepDiff's MPNet): such a pair may show the same difference, which would make two options right.
Pairs are unordered: (a, b) and (b, a) are the same two videos.

Randomness (v3's draws, the order of the options) comes from a generator per instance,
derived from (seed, instance key) with `record_rng`, so an instance does not depend on where
it is in the file (only v1/v2's exact distance ties go by file order, and a negative pair
keeps the orientation it was first annotated in). Output rows are official DiffMCQ rows:
{difference, category, options, answer}.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from vi.core.seeding import record_rng
from vi.evaluation.stepdiff.mcq_negatives_config import SIMILAR_CAPTION, VARIANTS
from vi.evaluation.stepdiff.metrics import BenchmarkFileError, check_diffcap_row, check_rows, read_jsonl

NEGATIVES = 3

Pair = tuple[str, str]
TextEmbedder = Callable[[list[str]], np.ndarray]  # texts -> (len(texts), dim)


@dataclass(frozen=True)
class Annotation:
    """One DiffCap-style row: {reference, candidate, category, text: [captions]}."""

    reference: str
    candidate: str
    category: str
    captions: tuple[str, ...]
    line: int = 0

    @property
    def pair(self) -> Pair:
        return self.reference, self.candidate


def read_annotations(path: Path, allow_unknown_categories: bool = False) -> list[Annotation]:
    rows = read_jsonl(path)
    checked = check_rows(path, rows, lambda row: check_diffcap_row(row, allow_unknown_categories))
    return [Annotation(row["reference"], row["candidate"], category, tuple(captions), lineno)
            for (lineno, row), (category, captions) in zip(rows, checked)]


def _npz_features(path: Path) -> tuple[list[str], list[np.ndarray], list[str]]:
    with np.load(path, allow_pickle=False) as data:
        if "id" not in data or "embedding" not in data:
            raise BenchmarkFileError(f"{path}: an NPZ of clip features needs arrays 'id' and 'embedding' "
                                     f"(it has {', '.join(data.files) or 'none'})")
        ids, matrix = [str(i) for i in data["id"]], np.asarray(data["embedding"], np.float64)
    if matrix.ndim != 2 or len(ids) != len(matrix):
        raise BenchmarkFileError(f"{path}: 'embedding' must be ({len(ids)}, dim), one row per id, "
                                 f"not {matrix.shape}")
    return ids, list(matrix), [f"{path} entry {i}" for i in range(len(ids))]


def _jsonl_features(path: Path) -> tuple[list[str], list[np.ndarray], list[str]]:
    ids, vectors, places = [], [], []
    for lineno, row in read_jsonl(path):
        place = f"{path} line {lineno}"
        if not isinstance(row.get("id"), str) or not isinstance(row.get("embedding"), list):
            raise BenchmarkFileError(f'{place}: a clip feature is {{"id": str, "embedding": [numbers]}}')
        try:
            vectors.append(np.asarray(row["embedding"], np.float64))
        except (TypeError, ValueError):
            raise BenchmarkFileError(f"{place}: 'embedding' is not a list of numbers") from None
        ids.append(row["id"])
        places.append(place)
    return ids, vectors, places


def read_clip_features(path: Path) -> dict[str, np.ndarray]:
    """{clip id: embedding} from JSONL ({id, embedding} per line) or NPZ (arrays `id`, `embedding`)."""
    ids, vectors, places = (_npz_features if path.suffix == ".npz" else _jsonl_features)(path)
    features: dict[str, np.ndarray] = {}
    for clip, vector, place in zip(ids, vectors, places):
        dim = len(vectors[0])
        if vector.ndim != 1 or len(vector) != dim or not np.isfinite(vector).all() or not vector.any():
            raise BenchmarkFileError(f"{place}: the embedding of {clip!r} is not a finite, non-zero vector "
                                     f"of the same length as the first ({dim})")
        if clip in features:
            raise BenchmarkFileError(f"{place}: clip {clip!r} has a second embedding")
        features[clip] = vector
    return features


def unit(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, np.float64)
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


def same_pair(a: Pair, b: Pair) -> bool:
    return set(a) == set(b)


def shares_clip(a: Pair, b: Pair) -> bool:
    return bool(set(a) & set(b))


def pair_embeddings(pairs: Sequence[Pair], clip_features: dict[str, np.ndarray]) -> np.ndarray:
    """(len(pairs), dim): each pair's mean of its two clips' unit-normalised embeddings."""
    return np.stack([unit(np.stack([clip_features[a], clip_features[b]])).mean(0) for a, b in pairs])


def by_visual_distance(positive: int, vectors: np.ndarray) -> list[int]:
    """Indices of the other pairs, nearest to pair `positive` first (ties: file order)."""
    distances = np.linalg.norm(vectors - vectors[positive], axis=1)
    return [int(i) for i in np.argsort(distances, kind="stable") if i != positive]


@dataclass
class CaptionIndex:
    """Unit caption embeddings: of each caption, and of each (unordered pair, category)."""

    captions: dict[str, np.ndarray]
    by_pair: dict[tuple[frozenset, str], np.ndarray]
    threshold: float = SIMILAR_CAPTION

    @classmethod
    def build(cls, annotations: Sequence[Annotation], embed_texts: TextEmbedder,
              threshold: float = SIMILAR_CAPTION) -> CaptionIndex:
        texts = list(dict.fromkeys(c for a in annotations for c in a.captions))  # each embedded once
        captions = dict(zip(texts, unit(embed_texts(texts)))) if texts else {}
        grouped: dict[tuple[frozenset, str], list[np.ndarray]] = {}
        for a in annotations:
            grouped.setdefault((frozenset(a.pair), a.category), []).extend(captions[c] for c in a.captions)
        return cls(captions, {key: np.stack(v) for key, v in grouped.items()}, threshold)

    def too_similar(self, pair: Pair, category: str, caption: str) -> bool:
        """Whether `pair` has a caption in `category` above the threshold to `caption`."""
        theirs = self.by_pair.get((frozenset(pair), category))
        return theirs is not None and bool((theirs @ self.captions[caption] > self.threshold).any())


def distinct_pairs(annotations: Sequence[Annotation]) -> list[Pair]:
    """Every annotated pair once, unordered, in file order."""
    first: dict[frozenset, Pair] = {}
    for annotation in annotations:
        first.setdefault(frozenset(annotation.pair), annotation.pair)
    return list(first.values())


def visual_negatives(positive: Pair, ranked: Sequence[Pair], rejects: Callable[[Pair], bool],
                     share_clips: bool, count: int = NEGATIVES) -> list[Pair]:
    """v1 (share_clips=False) and v2: the first `count` of `ranked` that are allowed."""
    chosen: list[Pair] = []
    for pair in ranked:
        if len(chosen) == count:
            break
        if same_pair(pair, positive) or (not share_clips and shares_clip(pair, positive)) or rejects(pair):
            continue
        chosen.append(pair)
    return chosen


def random_negatives(positive: Pair, clips: Sequence[str], rng, rejects: Callable[[Pair], bool],
                     count: int = NEGATIVES) -> list[Pair]:
    """v3: (the positive's reference, a random clip), the clip never one of the positive's."""
    pool = [clip for clip in clips if clip not in positive]
    rng.shuffle(pool)
    chosen: list[Pair] = []
    for clip in pool:
        if len(chosen) == count:
            break
        if not rejects((positive[0], clip)):
            chosen.append((positive[0], clip))
    return chosen


def instance_key(annotation: Annotation, caption_index: int) -> str:
    return f"{annotation.reference}|{annotation.candidate}|{annotation.category}|{caption_index}"


def build_instances(annotations: Sequence[Annotation], variant: str, embed_texts: TextEmbedder,
                    clip_features: dict[str, np.ndarray] | None = None, seed: int = 0,
                    threshold: float = SIMILAR_CAPTION, count: int = NEGATIVES,
                    source: str = "annotations") -> tuple[list[dict], list[str]]:
    """(DiffMCQ rows, one message per caption that could not get `count` negatives)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    pairs = distinct_pairs(annotations)
    clips = sorted({clip for pair in pairs for clip in pair})  # sorted: v3's draws ignore the file's order
    vectors = None
    if variant != "v3":
        if clip_features is None:
            raise ValueError(f"variant {variant} ranks pairs by their visual embeddings: give --clip-features")
        missing = [(a.line, clip) for a in annotations for clip in a.pair if clip not in clip_features]
        if missing:
            line, clip = missing[0]
            raise BenchmarkFileError(f"{source} line {line}: clip {clip!r} has no visual embedding in the "
                                     f"clip features ({len({c for _, c in missing})} clips lack one)")
        vectors = pair_embeddings(pairs, clip_features)
    index = CaptionIndex.build(annotations, embed_texts, threshold)
    position = {frozenset(pair): i for i, pair in enumerate(pairs)}

    rows, short = [], []
    for annotation in annotations:
        positive = annotation.pair
        ranked = None
        if vectors is not None:
            ranked = [pairs[i] for i in by_visual_distance(position[frozenset(positive)], vectors)]
        for k, caption in enumerate(annotation.captions):
            rng = record_rng(seed, instance_key(annotation, k))
            rejects = functools.partial(index.too_similar, category=annotation.category, caption=caption)
            if ranked is None:
                negatives = random_negatives(positive, clips, rng, rejects, count)
            else:
                negatives = visual_negatives(positive, ranked, rejects, variant == "v2", count)
            if len(negatives) < count:
                short.append(f"{source} line {annotation.line} caption {k}: only {len(negatives)} of {count} "
                             f"negatives ({variant})")
                continue
            options = [list(positive), *map(list, negatives)]
            rng.shuffle(options)
            rows.append({"difference": caption, "category": annotation.category, "options": options,
                         "answer": list(positive)})
    return rows, short
