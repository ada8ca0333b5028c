"""StepDiff's three benchmarks (Nagarajan & Torresani, CVPR 2024), scored as the official
`evaluation/run.py` of facebookresearch/stepdiff scores them, after checking the input.

- DiffCap: pycocoevalcap's BLEU-1 (`Bleu().compute_score(...)[0][0]`), CIDEr-D (`Cider`) and
  ROUGE-L (`Rouge`) on the raw strings, without the PTB tokenizer, each prediction against
  every caption of its row. Official keys 'BLEU', 'CIDEr', 'ROUGE-L' are vi's `bleu_1`,
  `cider_d`, `rouge_l`.
- DiffMCQ: accuracy of numpy's argmax over the 4 option scores (a tie goes to the first).
- DiffRank: scipy's Kendall tau-b between predicted and annotated scores, per row, averaged.

Ground truth and predictions are matched by line order, as the official script does (blank
lines are skipped, so a trailing newline does not shift anything). Every problem with either
file is a `BenchmarkFileError` naming the file and line.

Rows whose predicted (or annotated) scores are all equal have no Kendall tau: scipy returns
NaN, and the official mean is then NaN. vi reports that value as `ktau_official` (null in JSON)
and, as `ktau`, the mean where such a row counts as tau = 0: a constant prediction carries no
ranking information, and 0 is exactly the expected tau of a ranking that carries none (a
random one). Dropping those rows instead would let a model abstain on the rows it finds hard
and be scored only on the rest. The counts of such rows are reported, predicted-constant and
ground-truth-constant separately (a row can be both).

Metrics are also broken down by difference category; CIDEr-D and BLEU are corpus-level
scores, so a category's value is the score of that category's rows as a corpus of their own
(CIDEr-D's document frequencies too: on a category of a single row it is 0).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vi.core.config import option

TASKS = ("diffcap", "diffmcq", "diffrank")
ALLOW_UNKNOWN_HELP = ("Score rows whose category is not one of StepDiff's (they get their own line in the breakdown) "
                      "instead of refusing the file.")


@dataclass(frozen=True, kw_only=True)
class ScoreConfig:
    """The options of `vi eval diffcap|diffmcq|diffrank`: the benchmark file and the predictions."""

    gt: Path = option(flag="--gt", exists=True, dir_okay=False, show_default=False,
                      help="The benchmark file: JSONL in the official format.")
    pred: Path = option(flag="--pred", exists=True, dir_okay=False, show_default=False,
                        help="Predictions: one JSONL line per benchmark line, in the same order.")
    allow_unknown_categories: bool = option(False, flag="--allow-unknown-categories", help=ALLOW_UNKNOWN_HELP)
# The labels of the released DiffRank file. The paper describes five difference categories;
# the release also labels 41 DiffRank rows "Serving / Presentation", so that is known too.
KNOWN_CATEGORIES = ("Ingredients", "Tools/Equipment", "Technique", "Actions", "Visuals",
                    "Serving / Presentation")
CHOICES = 4  # DiffMCQ options and DiffRank targets per row
_CLIP_ID = re.compile(r"^(?P<video>\S+)_(?P<start>\d+(?:\.\d+)?)_(?P<end>\d+(?:\.\d+)?)$")


class BenchmarkFileError(ValueError):
    """A benchmark or prediction file that cannot be scored; the message names file and line."""


class _RowError(Exception):
    """What is wrong with one row; the reader adds the file and line."""


def parse_clip_id(text: str) -> tuple[str, float, float]:
    """`<youtube_id>_<start>_<end>` -> (youtube_id, start, end); the YouTube id may hold `_`."""
    match = _CLIP_ID.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a clip id of the form <youtube_id>_<start>_<end> "
                         "(start and end in seconds, e.g. 'vwDbNixns_4_66.35833_77.7176')")
    start, end = float(match["start"]), float(match["end"])
    if start >= end:
        raise ValueError(f"clip id {text!r} starts at {start:g} s, not before its end at {end:g} s")
    return match["video"], start, end


def file_name(path: Path) -> str:
    return "<stdin>" if str(path) == "-" else str(path)


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank line of FILE (`-`: stdin); else a BenchmarkFileError.

    Lines end at "\\n" only and are decoded one by one (`vi.core.records.decode_lines`), so a
    byte that is not UTF-8 is reported with its line, not as a codec traceback.
    """
    from vi.core.records import decode_lines

    rows = []
    with (open(sys.stdin.fileno(), "rb", closefd=False) if str(path) == "-" else open(path, "rb")) as handle:
        for lineno, text, raw in decode_lines(handle):
            if isinstance(text, UnicodeDecodeError):
                raise BenchmarkFileError(
                    f"{file_name(path)} line {lineno}: not UTF-8 (byte 0x{raw[text.start]:02x} at byte "
                    f"{text.start + 1}); convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)")
            if not text.strip():
                continue
            try:
                value = json.loads(text, strict=False)
            except ValueError as exc:
                raise BenchmarkFileError(f"{file_name(path)} line {lineno}: not JSON ({exc})") from None
            if not isinstance(value, dict):
                raise BenchmarkFileError(f"{file_name(path)} line {lineno}: not a JSON object but {type(value).__name__}")
            rows.append((lineno, value))
    return rows


# --- one row of each file, checked ------------------------------------------------------

def _field(row: dict, name: str) -> Any:
    if name not in row:
        raise _RowError(f"missing field {name!r} (the row has {', '.join(map(repr, row)) or 'no fields'})")
    return row[name]


def _string(row: dict, name: str) -> str:
    value = _field(row, name)
    if not isinstance(value, str):
        raise _RowError(f"{name!r} must be a string, not {json.dumps(value)}")
    return value


def _clip(value: Any, name: str) -> str:
    try:
        parse_clip_id(value)
    except ValueError as exc:
        raise _RowError(f"{name}: {exc}") from None
    return value


def _list(row: dict, name: str, length: int | None = None) -> list:
    value = _field(row, name)
    if not isinstance(value, list):
        raise _RowError(f"{name!r} must be a list, not {json.dumps(value)}")
    if length is not None and len(value) != length:
        raise _RowError(f"{name!r} has {len(value)} entries; StepDiff rows have exactly {length}")
    return value


def _scores(row: dict, name: str = "scores") -> list:
    values = _list(row, name, CHOICES)
    for k, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _RowError(f"{name}[{k}] is {json.dumps(value)}, not a number")
        if math.isnan(value):
            raise _RowError(f"{name}[{k}] is NaN; give every option a number")
    return values


def _category(row: dict, allow_unknown: bool) -> str:
    category = _string(row, "category")
    if category not in KNOWN_CATEGORIES and not allow_unknown:
        raise _RowError(f"unknown category {category!r} (StepDiff's are {', '.join(KNOWN_CATEGORIES)}); "
                        "pass --allow-unknown-categories to score it anyway")
    return category


def check_diffcap_row(row: dict, allow_unknown: bool = False) -> tuple[str, list[str]]:
    """(category, captions) of a DiffCap row {reference, candidate, category, text}."""
    _clip(_field(row, "reference"), "reference")
    _clip(_field(row, "candidate"), "candidate")
    category = _category(row, allow_unknown)
    captions = _list(row, "text")
    if not captions or not all(isinstance(c, str) for c in captions):
        raise _RowError(f"'text' must be a non-empty list of captions (strings), not {json.dumps(captions)}")
    return category, captions


def check_diffmcq_row(row: dict, allow_unknown: bool = False) -> tuple[str, int]:
    """(category, index of the answer among the options) of a DiffMCQ row."""
    _string(row, "difference")
    category = _category(row, allow_unknown)
    options = _list(row, "options", CHOICES)
    for k, pair in enumerate(options):
        if not isinstance(pair, list) or len(pair) != 2:
            raise _RowError(f"options[{k}] must be a pair [reference, candidate], not {json.dumps(pair)}")
        for j, clip in enumerate(pair):
            _clip(clip, f"options[{k}][{j}]")
    answer = _field(row, "answer")
    if answer not in options:
        raise _RowError(f"'answer' {json.dumps(answer)} is not one of the options")
    return category, options.index(answer)


def check_diffrank_row(row: dict, allow_unknown: bool = False) -> tuple[str, list]:
    """(category, annotated scores) of a DiffRank row {reference, targets, category, scores}."""
    _clip(_field(row, "reference"), "reference")
    for k, target in enumerate(_list(row, "targets", CHOICES)):
        _clip(target, f"targets[{k}]")
    return _category(row, allow_unknown), _scores(row)


def check_caption_prediction(row: dict) -> str:
    return _string(row, "generated_text")


def check_scores_prediction(row: dict) -> list:
    return _scores(row)


def check_rows(path: Path, rows: list[tuple[int, dict]], check: Callable[[dict], Any]) -> list:
    out = []
    for lineno, row in rows:
        try:
            out.append(check(row))
        except _RowError as exc:
            raise BenchmarkFileError(f"{file_name(path)} line {lineno}: {exc}") from None
    return out


# --- the metrics, exactly as the official script computes them ---------------------------

def diffcap_metrics(captions: Sequence[list[str]], predictions: Sequence[str]) -> dict[str, float]:
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    hypothesis = {str(i): [text] for i, text in enumerate(predictions)}
    reference = {str(i): list(refs) for i, refs in enumerate(captions)}
    return {  # verbose=0: the official call prints BLEU's lengths to stdout; the score is the same
        "bleu_1": float(Bleu().compute_score(reference, hypothesis, verbose=0)[0][0]),
        "cider_d": float(Cider().compute_score(reference, hypothesis)[0]),
        "rouge_l": float(Rouge().compute_score(reference, hypothesis)[0]),
    }


def diffmcq_metrics(answers: Sequence[int], scores: Sequence[list]) -> dict[str, float | int]:
    """The official script's numpy argmax over np.array(scores) (the first of tied maxima wins), in plain
    Python while every int score is within 2**53: there an int is exactly a float, so comparing floats
    compares what numpy compares, and `vi eval diffmcq` starts without numpy. Past it numpy's own dtype
    rules decide, and a NaN is numpy's maximum where Python's max skips it, so numpy does."""
    if any((isinstance(v, int) and abs(v) > 2**53) or v != v for row in scores for v in row):
        import numpy as np

        matrix = np.array(scores)
        predictions = matrix.argmax(1).tolist()
        tied = ((matrix == matrix.max(1, keepdims=True)).sum(1) > 1).tolist()
    else:
        rows = [[float(v) for v in row] for row in scores]
        predictions = [row.index(max(row)) for row in rows]
        tied = [row.count(max(row)) > 1 for row in rows]
    return {"accuracy": sum(p == a for p, a in zip(predictions, answers)) / len(answers), "tied_top_rows": sum(tied)}


def kendall_taus(predicted: Sequence[list], annotated: Sequence[list]) -> list[float]:
    """scipy's tau-b per row, NaN where either side is constant (the official per-row values)."""
    from scipy.stats import kendalltau

    return [kendalltau(p, g).correlation for p, g in zip(predicted, annotated)]


def diffrank_metrics(annotated: Sequence[list], predicted: Sequence[list],
                     taus: Sequence[float] | None = None) -> dict[str, float | int | None]:
    """`taus`: the rows' `kendall_taus`, when already computed."""
    import numpy as np

    taus = kendall_taus(predicted, annotated) if taus is None else taus
    official = float(np.mean(taus))
    return {
        "ktau": float(np.mean([0.0 if math.isnan(t) else t for t in taus])),
        "ktau_official": None if math.isnan(official) else official,  # JSON has no NaN
        "constant_pred_rows": sum(len(set(p)) == 1 for p in predicted),
        "constant_gt_rows": sum(len(set(g)) == 1 for g in annotated),
    }


_CHECKS = {"diffcap": (check_diffcap_row, check_caption_prediction, diffcap_metrics),
           "diffmcq": (check_diffmcq_row, check_scores_prediction, diffmcq_metrics),
           "diffrank": (check_diffrank_row, check_scores_prediction, diffrank_metrics)}


def category_order(categories: Sequence[str]) -> list[str]:
    """StepDiff's categories in their usual order, then any others (allowed unknowns) sorted."""
    present = set(categories)
    return [c for c in KNOWN_CATEGORIES if c in present] + sorted(present - set(KNOWN_CATEGORIES))


def score_rows(task: str, categories: Sequence[str], truths: Sequence, predictions: Sequence) -> dict:
    """The task's metrics over all rows, then per category: {"rows", metrics..., "per_category"}."""
    metrics = _CHECKS[task][2]
    columns = [truths, predictions]
    if task == "diffrank":  # scipy's tau takes 0.5 ms a row: once per row, not once per breakdown
        columns.append(kendall_taus(predictions, truths))

    def score(keep: list[int]) -> dict:
        return {"rows": len(keep), **metrics(*([column[i] for i in keep] for column in columns))}

    result = {"task": task, **score(list(range(len(truths))))}
    result["per_category"] = {category: score([i for i, c in enumerate(categories) if c == category])
                              for category in category_order(categories)}
    return result


def evaluate_files(task: str, gt_path: Path, pred_path: Path, allow_unknown_categories: bool = False) -> dict:
    """Check both files, then score them: the result `vi eval TASK` prints."""
    if task not in _CHECKS:
        raise ValueError(f"unknown StepDiff task {task!r}; one of {', '.join(TASKS)}")
    check_gt, check_pred, _ = _CHECKS[task]
    gt_rows = read_jsonl(gt_path)
    if not gt_rows:
        raise BenchmarkFileError(f"{gt_path}: no rows to score")
    truth = check_rows(gt_path, gt_rows, lambda row: check_gt(row, allow_unknown_categories))
    pred_rows = read_jsonl(pred_path)
    if len(pred_rows) != len(gt_rows):
        raise BenchmarkFileError(
            f"{pred_path} has {len(pred_rows)} predictions but {gt_path} has {len(gt_rows)} rows; "
            "predictions are matched to rows by line order, so the counts must be equal")
    predictions = check_rows(pred_path, pred_rows, check_pred)
    categories = [category for category, _ in truth]
    return score_rows(task, categories, [value for _, value in truth], predictions)
