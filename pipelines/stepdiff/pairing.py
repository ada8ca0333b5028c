"""`vi pair`: pairs of clips that show the same keystep in two different videos (StepDiff).

StepDiff describes how a candidate clip differs from a reference clip of the same keystep.
This module makes those pairs from clip records (`vi clips`). It needs every clip at once,
since a keystep's clips can come from anywhere in the input.

- **Same keystep.** `match="exact"` groups clips whose keysteps are equal after case folding
  and whitespace collapsing: right for label sets such as HT-Step's. `match="embedding"` is
  for free-form step texts (`vi extract-steps`). Each distinct keystep is embedded once and
  clustered by greedy leader clustering. The keysteps go in order of clip count (most first,
  ties by text); each joins the most similar existing leader when the cosine is >= threshold,
  otherwise it becomes a leader itself. Unlike connected components, this never chains A~B~C
  into one group when A and C are far apart, and for a given input it is deterministic.
- **Different videos.** Two clips pair only when their `source_id`s differ, and their `video`
  paths too when both have one.
- **Order.** StepDiff's roles are asymmetric. By default (`order="unordered"`) two clips make
  one pair. Which one is the reference is a seeded coin flip per pair, from (seed, both ids),
  so the role does not follow id order. `order="ordered"` makes (A, B) and (B, A) two pairs.
- **Sampling.** With `max_pairs_per_keystep`, a group's candidate pairs are visited in a
  random order drawn from `record_rng(seed, keystep)`, and the first N kept. A keystep's
  pairs thus depend on its own clips and the seed only: not on other keysteps, nor on shards.
- **Near duplicates.** With `dedupe_threshold`, a pair is skipped when the descriptions of
  its two clips are more similar than that (cosine). Such a pair is the same scene twice and
  leaves no difference to describe. A clip's description is `description.step` or a
  `description` string when present, else its keystep and narration.

Clips that carry errors are not paired; they pass through unchanged, so nothing is lost.
A clip without a keystep is not paired either: it passes through with an error added.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vi.core.config import check_choices, option
from vi.core.devices import resolve_placement
from vi.core.models import text_embedding
from vi.core.models.catalog import DEFAULT_TEXT_EMBEDDING
from vi.core.models.resolve import resolve
from vi.core.progress import log
from vi.core.records import REJECTED, Record, has_errors, with_error
from vi.core.seeding import record_rng

if TYPE_CHECKING:  # numpy only where keysteps are embedded: vi pair --match exact goes without
    import numpy as np

STAGE = "pair"
MATCHES = ("exact", "embedding")
ORDERS = ("unordered", "ordered")
Embed = Callable[[list[str]], "np.ndarray"]  # texts -> unit vectors, one row each


@dataclass(frozen=True, kw_only=True)
class PairConfig:
    """The options of `vi pair`, checked when built: a bad one fails before any record (exit 2), a
    missing embedding model too (exit 5)."""

    match: str = option("exact", choices=MATCHES, help=(
        "exact: keysteps equal after case folding and whitespace (labels such as HT-Step's); "
        "embedding: free-form step texts grouped by sentence-embedding cosine >= --threshold "
        "(greedy leader clustering, most frequent keystep first)."))
    # MiniLM-L6 scores "chop the onion" / "dice the onion" 0.78 and either against
    # "boil water" below 0.15: 0.75 keeps such paraphrases together.
    threshold: float = option(0.75, help="With --match embedding: the cosine similarity at which two keysteps "
                                         "are the same.")
    max_pairs_per_keystep: int | None = option(None, help=(
        "Keep at most N pairs per keystep, sampled with a generator seeded by (--seed, keystep); "
        "default: every pair."))
    order: str = option("unordered", choices=ORDERS, help=(
        "unordered: two clips make one pair, the reference chosen by a seeded coin flip; "
        "ordered: (A, B) and (B, A) are two pairs."))
    dedupe_threshold: float | None = option(None, help=(
        "Skip a pair whose two clips' descriptions (description.step, description, else keystep "
        "and narration) have a cosine similarity above T: the same scene twice."))
    model: str = option(DEFAULT_TEXT_EMBEDDING, help=(
        "Sentence-embedding model for --match embedding and --dedupe-threshold: an alias from "
        "`vi models`, a sentence-transformers folder or a cached hub id."))
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0

    def __post_init__(self) -> None:
        check_choices(self)
        if not -1 <= self.threshold <= 1 or not -1 <= (self.dedupe_threshold or 0) <= 1:
            raise ValueError("--threshold and --dedupe-threshold are cosine similarities, in [-1, 1]")
        if self.max_pairs_per_keystep is not None and self.max_pairs_per_keystep < 1:
            raise ValueError("--max-pairs-per-keystep must be at least 1")
        if self.needs_embedder:  # a bad option is exit 2 and a missing model exit 5, before any record
            resolve_placement(self.device, self.dtype)
            resolve(self.model, "text-embedding")

    @property
    def needs_embedder(self) -> bool:
        return self.match == "embedding" or self.dedupe_threshold is not None

    def embed(self, texts: list[str]) -> np.ndarray:
        embedder = text_embedding.load_text_embedder(self.model, resolve_placement(self.device, self.dtype))
        return embedder.encode(texts)


@dataclass
class PairCounts:
    clips: int = 0
    keysteps: int = 0  # distinct, after normalising
    groups: int = 0
    pairs: int = 0
    alone: int = 0  # usable clips with no partner from another video
    near_duplicates: int = 0
    passed_through: int = 0  # error clips and clips without a keystep


def normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def description(clip: Record) -> str:
    described = clip.get("description")
    if isinstance(described, dict) and isinstance(described.get("step"), str):
        return described["step"]
    if isinstance(described, str) and described.strip():
        return described
    return " ".join(t for t in (clip["keystep"], clip.get("narration")) if isinstance(t, str) and t)


def split_clips(records: Iterable[Record]) -> tuple[list[Record], list[Record]]:
    """(clips to pair, records to pass through). A repeated id keeps its first record."""
    usable, passing, seen, repeated = [], [], set(), []
    for record in records:
        if has_errors(record):
            passing.append(record)
        elif str(record["id"]) in seen:
            repeated.append(str(record["id"]))
        elif not isinstance(record.get("keystep"), str) or not record["keystep"].strip():
            failed = with_error(record, STAGE, "missing_field", f"clip {record['id']} has no 'keystep' text, "
                                "so it cannot be paired; benchmark clips get one from vi clips --keysteps FILE")
            passing.append({**failed, REJECTED: True})
        else:
            seen.add(str(record["id"]))
            usable.append(record)
    if repeated:
        log.warning("%d clip ids appear more than once; the first record of each is used: %s",
                    len(repeated), ", ".join(repeated[:5]))
    return usable, passing


def leader_clusters(vectors: np.ndarray, threshold: float) -> list[int]:
    """For each row of `vectors` (unit length, in the order given), the row of its cluster's leader."""
    import numpy as np

    leaders: list[int] = []
    assigned = []
    for i in range(len(vectors)):
        if leaders:
            similarity = vectors[leaders] @ vectors[i]
            best = int(np.argmax(similarity))
            if similarity[best] >= threshold:
                assigned.append(leaders[best])
                continue
        leaders.append(i)
        assigned.append(i)
    return assigned


def group_keysteps(clips: list[Record], config: PairConfig, embed: Embed | None
                   ) -> tuple[dict[str, str], dict[str, str], dict[str, np.ndarray]]:
    """For each normalised keystep: the key of its group, its spelling, and (when matching by
    embedding) its vector; each distinct keystep is embedded once."""
    counts = Counter(normalise(c["keystep"]) for c in clips)
    spelling: dict[str, str] = {}
    for clip in clips:  # one spelling per normalised keystep, whatever the input order
        key, text = normalise(clip["keystep"]), " ".join(clip["keystep"].split())
        spelling[key] = min(spelling.get(key, text), text)
    keys = sorted(counts, key=lambda k: (-counts[k], k))
    if config.match == "exact" or not keys:
        return {k: k for k in keys}, spelling, {}
    vectors = embed([spelling[k] for k in keys])
    leaders = leader_clusters(vectors, config.threshold)
    return {k: keys[leader] for k, leader in zip(keys, leaders)}, spelling, dict(zip(keys, vectors))


def random_order(total: int, rng) -> Iterator[int]:
    """0..total-1 in a uniformly random order, drawn lazily (a sparse Fisher-Yates shuffle):
    taking the first N costs O(N) memory, not O(total)."""
    moved: dict[int, int] = {}
    for i in range(total):
        j = rng.randrange(i, total)
        yield moved.get(j, j)
        moved[j] = moved.pop(i, i)


def _video(clip: Record) -> object:
    return clip.get("source_id") if clip.get("source_id") is not None else clip.get("video")


def _same_video(a: Record, b: Record) -> bool:
    return _video(a) == _video(b) or (bool(a.get("video")) and a.get("video") == b.get("video"))


Similarity = Callable[[Record, Record], float]


def _group_pairs(key: str, label: str, members: list[Record], config: PairConfig,
                 keystep_similarity: Similarity | None, description_similarity: Similarity | None,
                 counts: PairCounts) -> list[Record]:
    """The pairs of one keystep group (`members` sorted by id), in the order of their two members."""
    n, cap = len(members), config.max_pairs_per_keystep
    candidates = range(n * n) if cap is None else random_order(n * n, record_rng(config.seed, key))
    kept: list[tuple[int, Record]] = []
    for k in candidates:
        i, j = divmod(k, n)
        if i == j or (config.order == "unordered" and i > j) or _same_video(members[i], members[j]):
            continue
        reference, candidate = members[i], members[j]
        flip = record_rng(config.seed, f"{reference['id']}__{candidate['id']}").random() < 0.5
        if config.order == "unordered" and flip:
            reference, candidate = candidate, reference
        pair = {"id": f"{reference['id']}__{candidate['id']}", "reference": reference,
                "candidate": candidate, "keystep": label}
        if keystep_similarity is not None:
            pair["similarity"] = round(keystep_similarity(reference, candidate), 4)
        if description_similarity is not None:
            pair["description_similarity"] = round(description_similarity(reference, candidate), 4)
            if pair["description_similarity"] > config.dedupe_threshold:
                counts.near_duplicates += 1
                continue
        kept.append((k, pair))
        if cap is not None and len(kept) >= cap:
            break
    return [pair for _, pair in sorted(kept, key=lambda kp: kp[0])]


def _cosine(texts: list[str], embed: Embed) -> Callable[[str, str], float]:
    """Cosine similarity between any two of `texts`, each embedded once."""
    distinct = sorted(set(texts))
    vectors = embed(distinct)
    row = {text: i for i, text in enumerate(distinct)}
    return lambda a, b: float(vectors[row[a]] @ vectors[row[b]])


def plan_pairs(clips: list[Record], config: PairConfig, embed: Embed | None = None
               ) -> tuple[list[Record], PairCounts]:
    """Every pair record: groups in keystep order, and within a group by the ids of its two clips."""
    counts = PairCounts(clips=len(clips))
    embed = embed or (config.embed if config.needs_embedder else None)
    group_of, spelling, keystep_vectors = group_keysteps(clips, config, embed)
    groups: dict[str, list[Record]] = defaultdict(list)
    for clip in clips:
        groups[group_of[normalise(clip["keystep"])]].append(clip)
    counts.keysteps, counts.groups = len(group_of), len(groups)
    keystep_similarity = description_similarity = None
    if keystep_vectors:
        keystep_similarity = lambda a, b: float(
            keystep_vectors[normalise(a["keystep"])] @ keystep_vectors[normalise(b["keystep"])])
    if config.dedupe_threshold is not None and clips:
        bare = sum(1 for c in clips if not c.get("description") and not c.get("narration"))
        if bare:
            log.warning("--dedupe-threshold: %d clips have neither a description nor narration; their "
                        "description is the keystep alone, so two of them look identical", bare)
        described = _cosine([description(c) for c in clips], embed)
        description_similarity = lambda a, b: described(description(a), description(b))
    pairs: list[Record] = []
    for key in sorted(groups, key=lambda k: (spelling[k], k)):
        members = sorted(groups[key], key=lambda c: str(c["id"]))
        if len({_video(c) for c in members}) < 2:
            counts.alone += len(members)
            continue
        pairs += _group_pairs(key, spelling[key], members, config, keystep_similarity,
                              description_similarity, counts)
    counts.pairs = len(pairs)
    return pairs, counts
