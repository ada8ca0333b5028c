"""FrameCapEval's two metrics (Table 1 of Xue et al., CVPR 2025), over records the judges have marked.

Progression detection (Prog): the evaluation LLM (`vi judge progression --prompt eval`) answers, for each
adjacent caption pair, A (action progression) or B (no progression); the score is scikit-learn's balanced
accuracy (the mean of the true-positive and true-negative rates) of those answers against the annotated
labels, over all pairs of all sequences of a group.

The paper scores the A/B answers; it does not say what an answer of C ("uncertain") does. Dropping those
pairs would let a captioner whose captions leave the judge unsure score on its easy pairs only, so here:
- `prog` (the headline, the table's Prog) counts C, and a pair the record's `progression` lacks, as wrong:
  the prediction is the opposite of the label (a judge answering C on every pair scores 0, below the 0.5
  of chance, with coverage 0);
- `prog_answered` is the balanced accuracy over the A/B-answered pairs only (the paper's literal reading),
  with `coverage` = answered pairs / labelled pairs, so the two can be told apart;
- a record with no `progression` at all, or none for this captioner, is not scored (counted in
  `prog_missing`), nor is a record without labels (`labels_missing`) or one judged with --prompt pseudo
  (`pseudo_prompt`: its letters mean "visible change", not "action progression").
With several judges, a captioner's answer for a pair is the majority letter of the judges; a tie is C; a
pair whose captions the judges were not given (a frame without a caption) counts as unanswered.

Caption matching (Cap): sequence-level accuracy, a sequence counting only when every frame was matched to
its own caption: `matching[FIELD].verdict == "good"`, or every entry of `matching[FIELD].frames` correct.
`vi judge match` matches the `progression.distinct` frames when a record has them; FrameCapEval matches
every frame, so a record matched over fewer frames than it has is not scored for Cap (it would count a
sequence whose judge kept one distinct frame as perfectly matched) but counted in `matching_subset`: run
`vi judge match` before `vi judge progression` for FrameCapEval.

Groups: the record's `source` (HTC, COIN, Penn&K: Penn Action and Kinetics are one column in the paper),
else the prefix of a FrameCapEval id `<source>/<idx>`, else "unknown"; and "overall". Rows: one per
caption field and captioning model (`captions.model`), so several models' records can be scored together.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from vi.core.config import option
from vi.pipelines.progresscaptioner.frame_sources import framecap_ids
from vi.pipelines.progresscaptioner.judge_progression import letter_to_change, majority

SOURCE_ORDER = ("HTC", "COIN", "Penn&K")  # Table 1's columns, in its order
SOURCE_NAMES = {"htc": "HTC", "howtochange": "HTC", "coin": "COIN", "penn": "Penn&K", "pennaction": "Penn&K",
                "penn_action": "Penn&K", "kinetics": "Penn&K", "k400": "Penn&K", "penn&k": "Penn&K"}
PAPER_TABLE_1 = {  # Cap / Prog per source, for orientation on the table
    "ProgressCaptioner (paper)": {"HTC": (37.3, 73.6), "COIN": (32.3, 66.1), "Penn&K": (31.3, 63.7)},
    "GPT-4o (paper)": {"HTC": (32.4, 64.2), "COIN": (21.3, 58.4), "Penn&K": (18.2, 63.2)},
    "LLaVA-OV-7B (paper)": {"HTC": (7.8, 59.0), "COIN": (5.9, 57.3), "Penn&K": (5.1, 50.8)},
}

DEFAULT_FIELD = "captions"


@dataclass(frozen=True, kw_only=True)
class FramecapConfig:
    """The options of `vi eval framecap`."""

    pred: tuple[Path, ...] = option(
        (), flag="--pred", exists=True, dir_okay=False, show_default=False,
        help="Judged caption records (JSONL); repeat for several models' files. Default: stdin.")
    labels: Path | None = option(
        None, flag="--labels", exists=True, dir_okay=False, show_default=False,
        help="Your progression labels, 1 or 0 per adjacent frame pair (see Reads): the ProgressCaptioner release "
             "ships none, so they come from your own annotation or the paper's authors; default: the records' "
             "progress_labels.")
    captions: tuple[str, ...] = option(
        (DEFAULT_FIELD,), flag="--captions", show_default=False,
        help=f"Caption field(s) to score, one table row each. Default: {DEFAULT_FIELD}.")


def source_name(text: str | None) -> str:
    if not text:
        return "unknown"
    return SOURCE_NAMES.get(text.strip().lower().replace(" ", ""), text.strip())


def record_source(record: dict) -> str:
    if isinstance(record.get("source"), str) and record["source"].strip():
        return source_name(record["source"])
    rid = str(record.get("id", ""))
    head = rid.split("/", 1)[0] if "/" in rid else ""
    return source_name(head) if head.lower().replace(" ", "") in SOURCE_NAMES else "unknown"


# --- ground truth ------------------------------------------------------------------------------

def _label_list(value, where: str) -> list[int]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: labels must be a list of 1 (progression) or 0 (none), one per adjacent "
                         f"frame pair; got {type(value).__name__}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or isinstance(v, int) and v in (0, 1):  # true/false read as 1/0
            out.append(int(v))
        else:
            raise ValueError(f"{where}: label {i + 1} is {v!r}; labels are 1 (progression) or 0 (none)")
    return out


def _release_source(path: Path) -> str | None:
    """coin_valhs_seq.json -> COIN: the release names its sequence files by source."""
    head = path.name.split("_", 1)[0].split(".", 1)[0]
    return source_name(head) if head.lower() in SOURCE_NAMES else None


def _entry_source(entry: object, default: str | None) -> str | None:
    if not isinstance(entry, dict) or "id" in entry:
        return None
    return source_name(entry["source"]) if entry.get("source") else default


LABEL_FIELDS = ("labels", "progress_labels")
NO_RELEASE_LABELS = (
    "the ProgressCaptioner release ships no per-pair progression labels for FrameCapEval (its sequence files "
    "coin_valhs_seq.json and htc_valhs_seq.json hold idx, action_label, n_frames, image_files and query0 only). "
    "--labels needs labels, 1 (progression) or 0 (none) per adjacent frame pair, from your own annotation or "
    "from the paper's authors: JSONL {\"id\": \"COIN/0004\", \"labels\": [1, 0, ...]} with the ids vi frames "
    "--framecap gives, or the sequence file with a 'labels' list added to each entry")


def read_labels(path: Path) -> dict[str, list[int]]:
    """id -> labels, from JSONL `{id, labels}` lines, or from a JSON list in the shape of the release's
    sequence file with a `labels` list added to each entry (`{idx, ..., labels}`, its source from the
    entry's `source` or the file name, the id `<source>/<idx>`, with the video when an idx repeats, as
    `vi frames --framecap` names them: frame_sources.framecap_ids). The release's sequence file as shipped
    holds no labels (NO_RELEASE_LABELS): given one, this refuses at once, saying so."""
    text = path.read_text(encoding="utf-8")
    out: dict[str, list[int]] = {}
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            entries = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None
        default = _release_source(path)
        if not isinstance(entries, list):
            raise ValueError(f"{path}: a release-style labels file is a JSON list")
        if entries and not any(isinstance(e, dict) and any(k in e for k in LABEL_FIELDS) for e in entries):
            raise ValueError(f"--labels {path}: no entry has 'labels': {NO_RELEASE_LABELS}")
        ids_by_source: dict[str, list[str | None]] = {}  # each source's ids over the whole file
        for n, entry in enumerate(entries, 1):
            where = f"{path}: entry {n}"
            if not isinstance(entry, dict) or "idx" not in entry and "id" not in entry:
                raise ValueError(f"{where}: a release-style labels file lists objects with 'idx' (or 'id')")
            if not any(k in entry for k in LABEL_FIELDS):
                raise ValueError(f"{where} (idx {entry.get('idx', entry.get('id'))!r}) has no 'labels': give every "
                                 "entry its labels, 1 or 0 per adjacent frame pair, or drop it")
            labels = entry.get("labels", entry.get("progress_labels"))
            if "id" in entry:
                key = str(entry["id"])
            else:
                src = source_name(entry.get("source")) if entry.get("source") else default
                if src is None:
                    raise ValueError(f"{where}: no 'source' and the file name ({path.name}) names none of "
                                     f"{', '.join(sorted(set(SOURCE_NAMES.values())))}; add a 'source'")
                if src not in ids_by_source:  # an idx repeats only within one source's entries
                    ids_by_source[src] = framecap_ids([e if _entry_source(e, default) == src else None
                                                       for e in entries], src)
                key = ids_by_source[src][n - 1] or f"{src}/{entry['idx']}"
            out[key] = _label_list(labels, f"{where} (id {key})")
        return out
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        if not isinstance(row, dict) or "id" not in row or "labels" not in row:
            raise ValueError(f"{where}: each line is {{\"id\": ..., \"labels\": [1|0 per adjacent pair]}}")
        out[str(row["id"])] = _label_list(row["labels"], f"{where} (id {row['id']})")
    return out


def frame_count(record: dict, captions: dict | None) -> int | None:
    """The sequence's length: its `frames`, else the frames its captions name, else its judged pairs + 1."""
    if isinstance(record.get("frames"), list):
        return len(record["frames"])
    if isinstance(captions, dict) and isinstance(captions.get("items"), list) and captions["items"]:
        return max(int(i["frame"]) for i in captions["items"]) + 1
    progression = record.get("progression")
    if isinstance(progression, dict) and isinstance(progression.get("pairs"), list):
        pairs = progression["pairs"]
        return max(max(p["frames"]) for p in pairs) + 1 if pairs else 1
    return None


def record_labels(record: dict, labels: dict[str, list[int]] | None, captions: dict | None) -> list[int] | None:
    """The record's labels (--labels first, then its `progress_labels`), checked against its length."""
    rid = str(record["id"])
    found = None
    if labels is not None:
        found = labels.get(rid)
        if found is None and record.get("idx") is not None:  # a record from the release's JSON
            found = labels.get(f"{record_source(record)}/{record['idx']}")
    if found is None and record.get("progress_labels") is not None:
        found = _label_list(record["progress_labels"], f"record {rid}: progress_labels")
    if found is None:
        return None
    n = frame_count(record, captions)
    if n is not None and len(found) != n - 1:
        raise ValueError(f"record {rid}: {len(found)} progression labels, expected {n - 1} (one per adjacent "
                         f"pair of its {n} frames); fix the labels of {rid}")
    return found


# --- one record --------------------------------------------------------------------------------

def captioner_letter(pair: dict, field_name: str, single: bool) -> str | None:
    """This captioner's letter for a pair: the judges' majority (a tie gives C); the consensus when the
    record judged this captioner alone and kept no per-captioner answers; None when it was not judged."""
    answers = pair.get("answers")
    if isinstance(answers, dict) and field_name in answers:
        judged = answers[field_name]
        if not judged:  # the captioner had no caption for a frame of the pair: not judged
            return None
        return majority(list(judged.values())) or "C"
    if single and "consensus" in pair:
        return pair["consensus"] or "C"  # no consensus: the judges could not agree
    return None


def predicted_changes(record: dict, field_name: str) -> dict[int, bool | None] | None:
    """First frame of each judged pair -> True (A), False (B), None (C). None when nothing was judged."""
    progression = record.get("progression")
    if not isinstance(progression, dict) or not isinstance(progression.get("pairs"), list):
        return None
    captioners = progression.get("captioners") or []
    if captioners and field_name not in captioners:
        return None
    single = captioners in ([], [field_name])
    out = {}
    for pair in progression["pairs"]:
        letter = captioner_letter(pair, field_name, single)
        if letter is not None:
            out[int(min(pair["frames"]))] = letter_to_change(letter, "eval")
    return out


def matched_sequence(record: dict, field_name: str, n_frames: int | None) -> tuple[bool, bool] | None:
    """(every frame matched to its own caption, matched fewer frames than the sequence has), or None."""
    matching = record.get("matching")
    entry = matching.get(field_name) if isinstance(matching, dict) else None
    if not isinstance(entry, dict):
        return None
    frames = entry.get("frames") or []
    if "verdict" in entry:
        good = entry["verdict"] == "good"
    else:
        good = bool(frames) and all(f.get("correct") for f in frames)
    return good, n_frames is not None and len(frames) < n_frames


# --- scores ------------------------------------------------------------------------------------

@dataclass
class Tally:
    """What one (row, group) has seen; `result` turns it into the reported metrics."""

    sequences: int = 0
    good: int = 0
    matched: int = 0
    cap_missing: int = 0
    matching_subset: int = 0
    truth: list[int] = field(default_factory=list)
    predicted: list[bool | None] = field(default_factory=list)  # None: C or no answer for the pair
    pairs_missing: int = 0
    prog_missing: int = 0
    labels_missing: int = 0
    pseudo_prompt: int = 0

    def result(self) -> dict:
        from sklearn.metrics import balanced_accuracy_score

        def bacc(truth, pred):
            if not truth:
                return None
            with warnings.catch_warnings():  # one class only: sklearn warns and scores that class's recall
                warnings.simplefilter("ignore")
                return round(float(balanced_accuracy_score(truth, pred)), 4)

        forced = [int(p) if p is not None else 1 - t for t, p in zip(self.truth, self.predicted)]
        answered = [(t, int(p)) for t, p in zip(self.truth, self.predicted) if p is not None]
        return {
            "sequences": self.sequences,
            "cap": round(self.good / self.matched, 4) if self.matched else None,
            "cap_sequences": self.matched, "cap_missing": self.cap_missing,
            "matching_subset": self.matching_subset,
            "prog": bacc(self.truth, forced),
            "prog_answered": bacc([t for t, _ in answered], [p for _, p in answered]),
            "pairs": len(self.truth), "pairs_answered": len(answered),
            "coverage": round(len(answered) / len(self.truth), 4) if self.truth else None,
            "uncertain": sum(p is None for p in self.predicted) - self.pairs_missing,
            "pairs_missing": self.pairs_missing, "prog_missing": self.prog_missing,
            "labels_missing": self.labels_missing, "pseudo_prompt": self.pseudo_prompt,
            "positives": sum(self.truth),
        }


def row_name(record: dict, field_name: str) -> str:
    captions = record.get(field_name)
    model = captions.get("model") if isinstance(captions, dict) else None
    return str(model) if model else f"(no {field_name}.model)"


def score_record(record: dict, field_name: str, labels: dict[str, list[int]] | None, tally: Tally) -> None:
    captions = record.get(field_name) if isinstance(record.get(field_name), dict) else None
    n = frame_count(record, captions)
    tally.sequences += 1
    matched = matched_sequence(record, field_name, n)
    if matched is None:
        tally.cap_missing += 1
    elif matched[1]:
        tally.matching_subset += 1
    else:
        tally.matched += 1
        tally.good += matched[0]
    truth = record_labels(record, labels, captions)
    progression = record.get("progression")
    if isinstance(progression, dict) and progression.get("prompt") == "pseudo":
        tally.pseudo_prompt += 1
        return
    changes = predicted_changes(record, field_name)
    if changes is None:
        tally.prog_missing += 1
        return
    if truth is None:
        tally.labels_missing += 1
        return
    for i, label in enumerate(truth):
        tally.truth.append(label)
        tally.predicted.append(changes.get(i))
        tally.pairs_missing += i not in changes


def evaluate(records: Iterable[dict], fields: list[str], labels: dict[str, list[int]] | None = None) -> dict:
    """The JSON `vi eval framecap` prints: per row (captioner), per source and overall."""
    tallies: dict[tuple[str, str], dict[str, Tally]] = defaultdict(lambda: defaultdict(Tally))
    counts = Counter()
    seen_ids = set()
    for record in records:
        if record.get("errors"):
            counts["records_with_errors"] += 1
            continue
        counts["records"] += 1
        source = record_source(record)
        seen_ids.add(str(record["id"]))
        if record.get("idx") is not None:
            seen_ids.add(f"{source}/{record['idx']}")
        for field_name in fields:
            if not isinstance(record.get(field_name), dict):
                counts[f"without_{field_name}"] += 1
                continue
            groups = tallies[(field_name, row_name(record, field_name))]
            for group in (source, "overall"):
                score_record(record, field_name, labels, groups[group])
    names = Counter(model for _, model in tallies)
    rows = {}
    for (field_name, model), groups in tallies.items():
        name = model if names[model] == 1 else f"{model} [{field_name}]"
        order = [s for s in SOURCE_ORDER if s in groups] + sorted(set(groups) - set(SOURCE_ORDER) - {"overall"})
        rows[name] = {"field": field_name, "model": model,
                      "per_source": {s: groups[s].result() for s in order},
                      "overall": groups["overall"].result()}
    out = {"task": "framecap", **dict(counts), "rows": rows}
    if labels is not None:
        out["labels_unused"] = len(set(labels) - seen_ids)
    return out


def table_cells(result: dict) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Table 1's shape: (sources, [(row name, [Cap, Prog per source..., Cap, Prog overall])]) in percent."""
    sources = []
    for row in result["rows"].values():
        sources += [s for s in row["per_source"] if s not in sources]
    sources = [s for s in SOURCE_ORDER if s in sources] + [s for s in sources if s not in SOURCE_ORDER]

    def pct(value):
        return "-" if value is None else f"{100 * value:.1f}"

    lines = []
    for name, row in result["rows"].items():
        cells = []
        for s in [*sources, "overall"]:
            metrics = row["overall"] if s == "overall" else row["per_source"].get(s, {})
            cells += [pct(metrics.get("cap")), pct(metrics.get("prog"))]
        lines.append((name, cells))
    return sources, lines
