"""Training data for StepDiff's model: JSONL datasets of three kinds, mixed by a resumable sampler.

A dataset is given as KIND:PATH (PATH `-` is stdin):
- `pair_qa`: `vi pair-qa` records; each of a record's `qa` items is a sample (Vr, Vc, q, a),
  Vr/Vc being `reference.id` / `candidate.id`;
- `caption`: clip records, each a sample (clip, text) with the text from `caption`, else
  `narration` (what is said: StepDiff's single-video pre-training on ASR), else
  `description.step`. An image record (vi encode-videos repeats the image as a video) is the
  paper's image-caption data;
- `interleaved`: clip records grouped by video (`source_id`, else `video`), ordered by `start`,
  every run of `window` (3) consecutive clips with narration a sample: video, text, video, text...
Error records and records without the fields a kind needs are skipped and counted, not fatal.

The mixture samples datasets round-robin (the paper's choice) or by weights, and each dataset
without replacement in a fresh seeded order every epoch. Its whole state is a few counters, so
a checkpoint can hold the exact data position and a resumed run sees the same samples.

Every random choice depends on the seed, a dataset's place on the command line and kind, and the
samples' own ids, never on a path: the same data copied elsewhere, or spelt `./qa.jsonl` instead
of `/abs/qa.jsonl`, trains the same model.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from vi.core.progress import log

KINDS = ("pair_qa", "caption", "interleaved")
INTERLEAVED_WINDOW = 3


@dataclass(frozen=True)
class Sample:
    id: str
    kind: str
    clips: tuple[str, ...]
    texts: tuple[str, ...]  # pair_qa: (question, answer); caption/interleaved: one text per clip
    group: str = ""  # held out together: a pair's questions, a video's interleaved windows (they share clips)


@dataclass
class Dataset:
    name: str  # KIND:PATH as given
    kind: str
    samples: list[Sample]
    skipped: dict[str, int] = field(default_factory=dict)


def parse_spec(spec: str) -> tuple[str, str]:
    kind, sep, path = spec.partition(":")
    if not sep or kind not in KINDS or not path:
        raise ValueError(f"dataset {spec!r}: give KIND:PATH with KIND one of {', '.join(KINDS)} (PATH - is stdin)")
    return kind, path


def _text(value) -> str | None:
    return " ".join(value.split()) or None if isinstance(value, str) else None


def clip_text(record: dict) -> str | None:
    description = record.get("description")
    step = description.get("step") if isinstance(description, dict) else description
    return _text(record.get("caption")) or _text(record.get("narration")) or _text(step)


def _pair_samples(record: dict, skip) -> list[Sample]:
    ref, cand = record.get("reference"), record.get("candidate")
    if not (isinstance(ref, dict) and isinstance(cand, dict) and ref.get("id") and cand.get("id")):
        skip("no reference.id / candidate.id")
        return []
    out = []
    for i, item in enumerate(record.get("qa") or []):
        q = _text(item.get("q") or item.get("question")) if isinstance(item, dict) else None
        a = _text(item.get("a") or item.get("answer")) if isinstance(item, dict) else None
        if q and a:
            out.append(Sample(f"{record['id']}#{i}", "pair_qa", (str(ref["id"]), str(cand["id"])), (q, a),
                              group=str(record["id"])))
        else:
            skip("qa item without q and a")
    if not out and not record.get("qa"):
        skip("no qa")
    return out


def _interleaved(records: list[dict], window: int, skip) -> list[Sample]:
    videos: dict[str, list[dict]] = {}
    for record in records:
        if clip_text(record) is None:
            skip("no narration/caption")
            continue
        video = record.get("source_id") or record.get("video") or record.get("image")
        if video is None:
            skip("no source_id/video to order its clips by")
            continue
        videos.setdefault(str(video), []).append(record)
    out = []
    for video, clips in videos.items():
        clips.sort(key=lambda r: (float(r.get("start") or 0.0), str(r["id"])))
        for first in range(len(clips) - window + 1):
            run = clips[first:first + window]
            out.append(Sample("+".join(str(r["id"]) for r in run), "interleaved",
                              tuple(str(r["id"]) for r in run), tuple(clip_text(r) for r in run), group=video))
    return out


def make_dataset(spec: str, records: Iterable[dict], window: int = INTERLEAVED_WINDOW) -> Dataset:
    kind, _ = parse_spec(spec)
    dataset = Dataset(spec, kind, [])

    def skip(reason: str) -> None:
        dataset.skipped[reason] = dataset.skipped.get(reason, 0) + 1

    usable = []
    for record in records:
        if record.get("errors") or "id" not in record:
            skip("error record")
        else:
            usable.append(record)
    if kind == "pair_qa":
        dataset.samples = [s for r in usable for s in _pair_samples(r, skip)]
    elif kind == "caption":
        for record in usable:
            text = clip_text(record)
            if text is None:
                skip("no caption/narration/description")
            else:
                dataset.samples.append(Sample(str(record["id"]), "caption", (str(record["id"]),), (text,)))
    else:
        dataset.samples = _interleaved(usable, window, skip)
    if dataset.skipped:
        log.warning("%s: %d samples; skipped %s", spec, len(dataset.samples),
                    ", ".join(f"{n} ({why})" for why, n in sorted(dataset.skipped.items())))
    return dataset


def held_out(sample: Sample, fraction: float, seed: int) -> bool:
    """Whether `sample` is in the held-out split: a stable hash of its group (else its id), the same in every
    run; samples that share clips (a pair's questions, a video's overlapping windows) fall on one side."""
    digest = hashlib.sha256(f"{seed}:{sample.group or sample.id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64 < fraction


class Mixture:
    """An endless stream of samples from several datasets; `state()` / `load_state()` is the data
    position a checkpoint keeps."""

    def __init__(self, datasets: list[Dataset], weights: list[float] | None = None, seed: int = 0):
        empty = [d.name for d in datasets if not d.samples]
        if empty:
            raise ValueError(f"no usable samples in {', '.join(empty)}")
        if weights is not None and (len(weights) != len(datasets) or min(weights) < 0 or sum(weights) <= 0):
            raise ValueError(f"--weights: give {len(datasets)} non-negative numbers, one per --data, not all 0")
        self.datasets, self.weights, self.seed = datasets, weights, seed
        self.position = 0  # samples drawn so far
        self.drawn = [0] * len(datasets)  # samples drawn from each dataset so far
        self._orders: dict[tuple[int, int], list[int]] = {}  # (dataset, epoch) -> its order

    def _dataset_at(self, position: int) -> int:
        if self.weights is None:
            return position % len(self.datasets)
        return random.Random(f"{self.seed}:mix:{position}").choices(range(len(self.datasets)), self.weights)[0]

    def _order(self, index: int, epoch: int) -> list[int]:
        if (index, epoch) not in self._orders:
            order = list(range(len(self.datasets[index].samples)))
            # the dataset's place and kind, not its name: KIND:PATH changes with where the data sits
            random.Random(f"{self.seed}:{index}:{self.datasets[index].kind}:{epoch}").shuffle(order)
            self._orders = {k: v for k, v in self._orders.items() if k[0] != index}  # one epoch kept each
            self._orders[(index, epoch)] = order
        return self._orders[(index, epoch)]

    def next(self) -> Sample:
        index = self._dataset_at(self.position)
        dataset, count = self.datasets[index], self.drawn[index]
        epoch, within = divmod(count, len(dataset.samples))
        sample = dataset.samples[self._order(index, epoch)[within]]
        self.position += 1
        self.drawn[index] += 1
        return sample

    def take(self, count: int) -> list[Sample]:
        return [self.next() for _ in range(count)]

    def fingerprints(self) -> list[str]:
        """One hash per dataset of its samples' ids in order: the same name with other contents differs."""
        return [hashlib.sha256("\n".join(s.id for s in d.samples).encode()).hexdigest()[:16] for d in self.datasets]

    def state(self) -> dict:
        return {"position": self.position, "drawn": list(self.drawn), "datasets": [d.name for d in self.datasets],
                "kinds": [d.kind for d in self.datasets], "fingerprints": self.fingerprints(), "weights": self.weights}

    def load_state(self, state: dict) -> None:
        # Kinds and contents must match, not paths: a requeued job may see its data under another scratch path.
        kinds = state.get("kinds") or [str(name).partition(":")[0] for name in state.get("datasets", [])]
        if kinds != [d.kind for d in self.datasets]:
            raise ValueError(f"--resume: the checkpoint was trained on {state.get('datasets')}, not on "
                             f"{[d.name for d in self.datasets]}; give the same --data in the same order")
        old_prints = state.get("fingerprints", [])
        if old_prints != self.fingerprints() and sorted(old_prints) == sorted(self.fingerprints()):
            raise ValueError(f"--resume: the checkpoint read its datasets in another order ({state.get('datasets')}); "
                             "give the same --data in the same order")
        changed = [d.name for d, old, new in zip(self.datasets, old_prints, self.fingerprints()) if old != new]
        if changed or state.get("weights") != self.weights:
            what = f"the samples of {', '.join(changed)} changed" if changed else "--weights changed"
            raise ValueError(f"--resume: {what} since the checkpoint (files rewritten, clips added to a store?), so "
                             "its data position means other samples now; start a new run (--init-from)")
        self.position, self.drawn = int(state["position"]), [int(n) for n in state["drawn"]]


# --- reading the command line's datasets and their features -----------------------------------

def stores_named(records: list[dict]) -> list[str]:
    """Feature stores the records point at (`features.store` of a clip, or of a pair's clips)."""
    found: list[str] = []
    for record in records:
        for holder in (record, record.get("reference"), record.get("candidate")):
            features = holder.get("features") if isinstance(holder, dict) else None
            store = features.get("store") if isinstance(features, dict) else None
            if isinstance(store, str) and store not in found:
                found.append(store)
    return found


def read_datasets(specs: list[str], stage: str) -> tuple[list[Dataset], list[str]]:
    """(datasets, the feature stores their records name). At most one spec reads stdin."""
    from pathlib import Path

    from vi.core.records import read_records

    if sum(parse_spec(s)[1] == "-" for s in specs) > 1:
        raise ValueError("only one dataset can be read from stdin (-)")
    datasets, stores = [], []
    for spec in specs:
        _, path = parse_spec(spec)
        if path != "-" and not Path(path).is_file():
            raise ValueError(f"dataset {spec!r}: {path} is not a file")
        records = list(read_records(None if path == "-" else Path(path), stage))
        stores += [s for s in stores_named(records) if s not in stores]
        datasets.append(make_dataset(spec, records))
    return datasets, stores


def drop_unencoded(datasets: list[Dataset], has_clip) -> list[Dataset]:
    """The datasets without samples whose clips have no features (a clip that failed to encode
    is an error record upstream): counted and warned about, not fatal."""
    out = []
    for dataset in datasets:
        encoded = [all(has_clip(c) for c in s.clips) for s in dataset.samples]
        keep = [s for s, ok in zip(dataset.samples, encoded) if ok]
        dropped = [s for s, ok in zip(dataset.samples, encoded) if not ok]
        if dropped:
            missing = next(c for c in dropped[0].clips if not has_clip(c))
            log.warning("%s: %d of %d samples dropped: their clips are in no feature store (e.g. %s); encode "
                        "them with vi encode-videos", dataset.name, len(dropped), len(dataset.samples), missing)
        out.append(Dataset(dataset.name, dataset.kind, keep, dataset.skipped))
    return out
