"""`vi captioner-data`: judged captions as ProgressCaptioner's SFT and DPO training data (CVPR 2025, Sec. 3).

Input: records through vi caption-frames (one or more caption fields, `captions` / `captions_<name>`), vi judge
progression and vi judge match. A record's frame count picks its stage of the paper:
- 2 frames, a PAIR (Stage I): a captioner's caption pair is chosen (c+) when it passes progression detection
  (`progression.pairs[0].passed[field]` is true: its judged answer is the majority's, and that majority is
  decisive) AND caption matching is right on every frame the judge matched (`matching[field].frames`, each
  `correct`: both frames when the pair changed, frame 0 alone when progression kept only frame 0). It is
  rejected (c-) when either fails.
- 3 to 6 frames, a SEQUENCE (Stage II): chosen when caption matching over the M distinct frames is all right
  (`matching[field].verdict == "good"`), rejected when more than half are wrong (`"rejected"`); `"neither"`
  gives no sample. Progression is not consulted (it already chose the M frames).
- 1 frame or 7 and more: skipped and counted (the paper trains on 2 and 3-6).
SFT: one sample per chosen caption field; DPO: every (chosen, rejected) combination of one record, so a
preference pair always shares its frames (capped by `max_dpo_per_record`, a seeded sample per record).
A caption field that lacks a caption for some frame, has no `items`, or that the judges never saw (not in
`matching`, or not in `passed` of a pair) gives no sample, counted. A (chosen, rejected) with the same text
is no preference and is dropped. Records with `errors` (or `error`) from an earlier stage are skipped and
counted; a record that was not judged (no `matching`; a pair without `progression`) is this stage's failure,
with a message naming the record, the field and what to run.

Duplicates: the same images (by content) with the same completion text are one SFT sample; the same
(images, chosen, rejected) one DPO sample; the first met is kept (so identical records, or two captioners
with the same captions, count once).

Split: by `video` (the record's `video`, else `parent`, else its id without a `/wFIRST-LAST` window suffix),
held out when sha256("{seed}:{video}") falls in the first `heldout_fraction` of the hash range: every window
of a video lands on the same side, and the split does not depend on input order, shards or other videos.

Output, in DIR (TRL's conversational vision format):
- images/<sha1 of the bytes><suffix>: each frame file copied once; samples refer to it relative to DIR;
- sft.jsonl: {id: "<record id>:<field>", video, source, kind: pair|sequence, split: train|heldout,
  images: [...], prompt: [{role: user, content: [{type: image} per frame, {type: text, text}]}],
  completion: [{role: assistant, content: [{type: text, text: "<Frame 1>: ...\\n<Frame 2>: ..."}]}],
  captioner: {field, model}};
- dpo.jsonl: the same keys but completion and captioner, plus chosen and rejected (shaped as completion),
  id "<record id>:<chosen field>><rejected field>" and captioners: {chosen, rejected} (field names).
The prompt text is vi caption-frames' own for --window full (progress_caption, or progress_caption_no_action
without an action), rendered for the record's T frames and action; the completion is in the `<Frame i>: text`
format frame_replies parses. sft.jsonl and dpo.jsonl are rewritten by each run; images are reused.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from vi.core.config import option
from vi.core.errors import RecordError
from vi.core.records import REJECTED, dumps
from vi.core.seeding import record_seed
from vi.pipelines.progresscaptioner.caption_frames import _templates, action_of, messages_for
from vi.pipelines.progresscaptioner.judge_progression import frame_texts, one_line

STAGE = "captioner-data"
PAIR, SEQUENCE = "pair", "sequence"
KINDS = (PAIR, SEQUENCE)
MAX_FRAMES = 6
COLUMNS = ("SFT pairs", "DPO pairs", "SFT sequences", "DPO sequences", "train", "heldout")
MAX_SHOWN_FAILURES = 10


DATASET_PANEL = "Dataset"


def kinds_list(text: str) -> tuple[str, ...]:
    """--kinds pair,sequence as a tuple."""
    return tuple(k.strip() for k in text.split(",") if k.strip())


@dataclass(frozen=True, kw_only=True)
class CaptionerDataConfig:
    """The options of `vi captioner-data`, checked when built (a bad one: exit 2)."""

    heldout_fraction: float = option(0.1, panel=DATASET_PANEL, help=(
        "The share of videos held out (a stable hash of video and --seed; every window of a video on the "
        "same side)."))
    # not a stage (no record stream out), so --seed is its own; listed with the stream's options all the same
    seed: int = option(0, flag="--seed", panel="Record stream (every stage)", help=(
        "Seeds the split and the --max-dpo-per-record sample; same input + same seed = same dataset."))
    max_dpo_per_record: int | None = option(None, min=0, panel=DATASET_PANEL, show_default=False, help=(
        "At most this many DPO pairs per record (a seeded sample); default: every accepted x rejected "
        "combination."))
    kinds: tuple[str, ...] = option(
        KINDS, cli_type=str, cli_default=",".join(KINDS), parse=kinds_list, panel=DATASET_PANEL,
        help=f"Which records to use: {PAIR} (2 frames, Stage I), {SEQUENCE} (3-{MAX_FRAMES} frames, Stage II), "
             "or both.")

    def __post_init__(self) -> None:
        if not 0.0 <= self.heldout_fraction <= 1.0:
            raise ValueError(f"--heldout-fraction must be between 0 and 1, got {self.heldout_fraction}")
        if self.max_dpo_per_record is not None and self.max_dpo_per_record < 0:
            raise ValueError(f"--max-dpo-per-record must be 0 or more, got {self.max_dpo_per_record}")
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown or not self.kinds:
            raise ValueError(f"--kinds takes {' and/or '.join(KINDS)} (comma-separated), got {','.join(self.kinds)!r}")


# --- a record's facts ---------------------------------------------------------------------------------------

def kind_of(count: int) -> str | None:
    return PAIR if count == 2 else SEQUENCE if 3 <= count <= MAX_FRAMES else None


def video_of(record: dict) -> str:
    for key in ("video", "parent"):
        if isinstance(record.get(key), (str, int)) and str(record[key]):
            return str(record[key])
    return re.sub(r"/w\d+(?:-\d+)?$", "", str(record["id"]))  # vi frames --select window: "<parent>/wA-B"


def split_of(video: str, config: CaptionerDataConfig) -> str:
    digest = hashlib.sha256(f"{config.seed}:{video}".encode("utf-8", "surrogatepass")).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") < config.heldout_fraction * 2**64 else "train"


# caption_frames.messages_for renders from a CaptionConfig, which would look up a captioning model; it reads
# only .templates, so a stand-in holding the packaged --window full templates renders the very same prompt.
_TEMPLATES = SimpleNamespace(templates=None)


def prompt_text(action: str | None, count: int) -> str:
    """vi caption-frames' --window full prompt for `count` frames (the images precede it)."""
    if _TEMPLATES.templates is None:
        _TEMPLATES.templates = _templates(None)
    return messages_for(_TEMPLATES, action, count)[-1]["content"]


def completion_text(texts: list[str]) -> str:
    return "\n".join(f"<Frame {i}>: {one_line(t)}" for i, t in enumerate(texts, 1))


def turn(role: str, text: str) -> list[dict]:
    return [{"role": role, "content": [{"type": "text", "text": text}]}]


def upstream_error(record: dict) -> bool:
    return bool(record.get("errors")) or "error" in record


def caption_field_names(record: dict) -> list[str]:
    return [k for k, v in record.items() if (k == "captions" or k.startswith("captions_")) and isinstance(v, dict)]


def _not_judged(record: dict, name: str, stage: str) -> RecordError:
    return RecordError("not_judged", f"record {record['id']}: no '{name}' field: this record was not run through "
                       f"vi judge {stage}; run vi judge progression, then vi judge match, on the captioned "
                       "records first")


def judge_fields(record: dict, kind: str, count: int, notes: Counter) -> dict[str, tuple[str, list[str]]]:
    """{caption field: ("chosen" | "rejected", its T captions)} by the rules of the module docstring; the
    fields that give no sample are counted in `notes`."""
    matching = record.get("matching")
    if not isinstance(matching, dict):
        raise _not_judged(record, "matching", "match")
    passed = None
    if kind == PAIR:
        pairs = (record.get("progression") or {}).get("pairs") if isinstance(record.get("progression"), dict) else None
        if not isinstance(pairs, list):
            raise _not_judged(record, "progression", "progression")
        passed = pairs[0].get("passed") if pairs and isinstance(pairs[0], dict) else None
        passed = passed if isinstance(passed, dict) else {}  # a pair nobody judged: every field "not judged"
    out = {}
    for name in caption_field_names(record):
        if not isinstance(record[name].get("items"), list):
            notes["caption field without items"] += 1
            continue
        texts = frame_texts(record, name)
        if any(f not in texts for f in range(count)):
            notes["caption field missing a frame"] += 1
            continue
        judged = matching.get(name)
        if not isinstance(judged, dict) or (passed is not None and not isinstance(passed.get(name), bool)):
            notes["caption field not judged"] += 1
            continue
        if kind == PAIR:
            entries = judged.get("frames") or []
            right = bool(entries) and all(isinstance(e, dict) and e.get("correct") is True for e in entries)
            label = "chosen" if passed[name] and right else "rejected"
        else:
            label = {"good": "chosen", "rejected": "rejected"}.get(judged.get("verdict"))
            if label is None:
                notes["sequence verdict neither"] += 1
                continue
        out[name] = (label, [texts[f] for f in range(count)])
    return out


def frame_files(record: dict) -> list[str]:
    frames = record["frames"]
    paths = [f.get("path") if isinstance(f, dict) else f for f in frames]
    for i, path in enumerate(paths):
        if not isinstance(path, str) or not path:
            raise RecordError("missing_field", f"record {record['id']}: frames[{i}] has no 'path'; vi frames "
                              "writes one per frame")
    return paths


# --- the dataset ----------------------------------------------------------------------------------------------

@dataclass
class Summary:
    records: int = 0
    used: int = 0  # records that gave at least one sample
    sft: int = 0
    dpo: int = 0
    images: int = 0  # image files this run referenced
    failed: int = 0
    skipped: Counter = field(default_factory=Counter)  # records, by reason
    labels: Counter = field(default_factory=Counter)  # caption fields judged, "<kind> chosen|rejected"
    notes: Counter = field(default_factory=Counter)  # caption fields and pairs that gave no sample, by reason
    duplicates: Counter = field(default_factory=Counter)  # sft / dpo samples dropped as duplicates
    by_source: dict[str, Counter] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def fail(self, record_id: object, message: str) -> None:
        self.failed += 1
        if len(self.failures) < MAX_SHOWN_FAILURES:
            self.failures.append(f"{record_id}: {message}")

    def count(self, source: str, column: str) -> None:
        self.by_source.setdefault(source, Counter())[column] += 1

    def as_json(self, out: Path) -> dict:
        return {"stage": STAGE, "out": str(out), "records": self.records, "used": self.used, "sft": self.sft,
                "dpo": self.dpo, "images": self.images, "failed": self.failed, "skipped": dict(self.skipped),
                "labels": dict(self.labels), "notes": dict(self.notes), "duplicates": dict(self.duplicates),
                "by_source": {s: {c: n[c] for c in COLUMNS} for s, n in sorted(self.by_source.items())}}


class DatasetWriter:
    """DIR/images (content-addressed), DIR/sft.jsonl and DIR/dpo.jsonl; duplicates dropped as they come."""

    def __init__(self, out: Path):
        self.out = Path(out)
        (self.out / "images").mkdir(parents=True, exist_ok=True)
        self.files = {name: open(self.out / f".{name}.jsonl.tmp", "wb") for name in ("sft", "dpo")}
        self.copied: dict[str, str] = {}  # source path -> path relative to out
        self.seen: set[tuple] = set()

    def image(self, record_id: object, path: str) -> str:
        if path not in self.copied:
            try:
                data = Path(path).read_bytes()
            except OSError as exc:
                raise RecordError("unreadable_media", f"record {record_id}: frame {path} cannot be read "
                                  f"({exc.strerror or exc}); re-run vi frames, or fix the path") from None
            suffix = Path(path).suffix.lower().replace(".jpeg", ".jpg") or ".jpg"
            relative = f"images/{hashlib.sha1(data).hexdigest()}{suffix}"
            target = self.out / relative
            if not target.exists():  # written whole, then renamed: a kill never leaves half an image
                tmp = target.with_name(target.name + ".tmp")
                tmp.write_bytes(data)
                os.replace(tmp, target)
            self.copied[path] = relative
        return self.copied[path]

    def add(self, name: str, sample: dict, key: tuple) -> bool:
        """Write the sample unless one with the same key (images and texts) was written; True if written."""
        if (name, key) in self.seen:
            return False
        self.seen.add((name, key))
        self.files[name].write(dumps(sample))
        return True

    def close(self, keep: bool = True) -> None:
        """Put the new sft/dpo files in place (keep), or drop them and leave the last run's (a crash)."""
        for name, handle in self.files.items():
            handle.close()
            if keep:
                os.replace(handle.name, self.out / f"{name}.jsonl")
            else:
                os.unlink(handle.name)


def dpo_combinations(record_id: object, combos: list[tuple[str, str]], config: CaptionerDataConfig
                     ) -> list[tuple[str, str]]:
    """Every (chosen, rejected) combination, or a seeded sample of max_dpo_per_record, in combination order."""
    cap = config.max_dpo_per_record
    if cap is not None and len(combos) > cap:
        keep = set(random.Random(record_seed(config.seed, record_id)).sample(range(len(combos)), cap))
        combos = [c for k, c in enumerate(combos) if k in keep]
    return combos


def add_record(record: dict, config: CaptionerDataConfig, writer: DatasetWriter, summary: Summary) -> None:
    """A record's SFT and DPO samples into the writer; raises RecordError for a record this stage cannot use."""
    frames = record.get("frames")
    if not isinstance(frames, list):
        raise RecordError("missing_field", f"record {record['id']}: no 'frames' list; vi frames writes it")
    kind = kind_of(len(frames))
    if kind is None:
        summary.skipped[f"{len(frames)} frames (2 to {MAX_FRAMES} are used)"] += 1
        return
    if kind not in config.kinds:
        summary.skipped[f"{kind} (not in --kinds)"] += 1
        return
    fields = judge_fields(record, kind, len(frames), summary.notes)
    chosen = [n for n, (label, _) in fields.items() if label == "chosen"]
    rejected = [n for n, (label, _) in fields.items() if label == "rejected"]
    summary.labels.update(f"{kind} {label}" for label, _ in fields.values())
    if not chosen:
        return
    images = [writer.image(record["id"], p) for p in frame_files(record)]
    video, source = video_of(record), str(record.get("source") or "unknown")
    common = {"video": video, "source": source, "kind": kind, "split": split_of(video, config), "images": images,
              "prompt": [{"role": "user", "content": [{"type": "image"} for _ in images]
                          + [{"type": "text", "text": prompt_text(action_of(record), len(images))}]}]}
    text = {n: completion_text(fields[n][1]) for n in fields}
    combos = [(c, r) for c in chosen for r in rejected if text[c] != text[r]]  # the same text: no preference
    if len(chosen) * len(rejected) > len(combos):
        summary.notes["chosen and rejected captions identical"] += len(chosen) * len(rejected) - len(combos)
    wrote = False
    for name in chosen:
        sample = {"id": f"{record['id']}:{name}", **common, "completion": turn("assistant", text[name]),
                  "captioner": {"field": name, "model": record[name].get("model")}}
        wrote |= keep(writer, summary, "sft", sample, (tuple(images), text[name]))
    for good, bad in dpo_combinations(record["id"], combos, config):
        sample = {"id": f"{record['id']}:{good}>{bad}", **common, "chosen": turn("assistant", text[good]),
                  "rejected": turn("assistant", text[bad]), "captioners": {"chosen": good, "rejected": bad}}
        wrote |= keep(writer, summary, "dpo", sample, (tuple(images), text[good], text[bad]))
    summary.used += wrote


def keep(writer: "DatasetWriter", summary: "Summary", which: str, sample: dict, key: tuple) -> bool:
    """Write `sample` to `which` (sft | dpo) unless `key` was written before; count it either way."""
    if not writer.add(which, sample, key):
        summary.duplicates[which] += 1
        return False
    setattr(summary, which, getattr(summary, which) + 1)
    summary.count(sample["source"], f"{which.upper()} {sample['kind']}s")
    summary.count(sample["source"], sample["split"])
    return True


def build_dataset(records, out: Path, config: CaptionerDataConfig, on_record=None) -> Summary:
    """Read judged records, write the dataset to `out`; one record's failure is counted, never fatal."""
    summary = Summary()
    writer = DatasetWriter(out)
    done = False
    try:
        for record in records:
            summary.records += 1
            if REJECTED in record:  # a line the reader could not parse: this stage's input failure
                summary.fail(record["id"], record["errors"][-1]["message"])
            elif upstream_error(record):
                summary.skipped["error record from an earlier stage"] += 1
            else:
                try:
                    add_record(record, config, writer, summary)
                except RecordError as exc:
                    summary.fail(record["id"], exc.message)
            if on_record is not None:
                on_record()
        done = True
    finally:
        writer.close(keep=done)
    summary.images = len(set(writer.copied.values()))
    return summary
