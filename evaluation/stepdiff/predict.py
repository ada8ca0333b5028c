"""Predictions on StepDiff's benchmarks, in the official formats, from any model of a video pair.

A method supplies one function per task and this module does the rest: read and check the
benchmark file (the same checks `vi eval` makes), find the clips' videos, ask the method row
by row, and build the official prediction rows, line for line:
- DiffCap: `generate(reference, candidate, category) -> text`, seeded with
  "The main difference in {category} is that in Video 2," (StepDiff Sec. 4) and rewritten into
  the annotation style by `annotation_style`: {"generated_text": ...};
- DiffMCQ: `score(reference, candidate, caption, category) -> number` for each of the 4
  option pairs (higher: the caption fits the pair better): {"scores": [4]};
- DiffRank: `score(reference, target, category) -> number` for each of the 4 targets (higher:
  more similar to the reference in that category, as the annotations' 5 = most similar).

The question texts below are the ones StepDiff's model is asked (Sec. 3.4, Supp. S4); the
Socratic baseline and a trained model put them to their LLM the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from vi.core import media
from vi.core.config import defaults, option
from vi.core.errors import RecordError
from vi.core.models.catalog import DEFAULT_CLIP, DEFAULT_LLM
from vi.evaluation.stepdiff.metrics import (
    BenchmarkFileError,
    check_diffcap_row,
    check_diffmcq_row,
    check_diffrank_row,
    check_rows,
    file_name,
    parse_clip_id,
    read_jsonl,
)
from vi.pipelines.stepdiff.clips import TIME_TOLERANCE_S, find_video
from vi.pipelines.stepdiff.describe import AUTO

SYSTEM = ("You are a helpful AI assistant that answers questions about a pair of videos. Answer in a single "
          "sentence. Here is the first video: {reference}. Here is the second video: {candidate}.")
DIFFCAP_QUESTION = "What is the main difference in {category} between the two videos?"
DIFFCAP_SEED = "The main difference in {category} is that in Video 2,"
DIFFMCQ_QUESTION = DIFFCAP_QUESTION
DIFFMCQ_SEED = "In Video 2,"
DIFFRANK_QUESTION = "Do these two videos show the same {category}? Answer YES or NO."
CHECKS = {"diffcap": check_diffcap_row, "diffmcq": check_diffmcq_row, "diffrank": check_diffrank_row}

# "..., whereas in Video 1, the person ..." -> "... instead of ...": the annotators wrote
# "<what happens in the candidate> instead of <what happens in the reference>".
_CONTRAST = re.compile(r"\s*,?\s*\b(?:whereas|while|but|compared to|as opposed to|unlike|and)\s+(?:in\s+)?"
                       r"(?:the\s+)?(?:first\s+video|video\s*1)\s*,?\s*(?:(?:the\s+)?person\s+|they\s+|he\s+|she\s+)?",
                       re.IGNORECASE)
_AUXILIARY = re.compile(r"\binstead of (?:is|are|was|were|does|did) ", re.IGNORECASE)
_VIDEO_2_SUBJECT = re.compile(r"^\s*,?\s*(?:in\s+video\s*2\s*,?\s*)?", re.IGNORECASE)


def category_phrase(category: str) -> str:
    """How a category reads inside a question: "Tools/Equipment" -> "tools/equipment"."""
    return category.lower()


def annotation_style(continuation: str) -> str:
    """A generated continuation of DIFFCAP_SEED in the annotations' style: its first sentence,
    the contrast with Video 1 turned into "instead of", with a capital and a full stop."""
    text = " ".join(continuation.split())
    text = _VIDEO_2_SUBJECT.sub("", text)
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].strip()
    sentence = _CONTRAST.sub(" instead of ", sentence, count=1).strip(" ,;")
    sentence = _AUXILIARY.sub("instead of ", sentence)  # "is peeling ... instead of is chopping"
    if not sentence:
        return ""
    sentence = sentence[0].upper() + sentence[1:]
    return sentence if sentence[-1] in ".!?" else sentence + "."


# --- the benchmark file ---------------------------------------------------------------------

@dataclass(frozen=True)
class BenchmarkRow:
    line: int
    row: dict


def read_benchmark(task: str, path: Path, allow_unknown_categories: bool = False) -> list[BenchmarkRow]:
    rows = read_jsonl(path)
    check_rows(path, rows, lambda row: CHECKS[task](row, allow_unknown_categories))
    if not rows:
        raise BenchmarkFileError(f"{file_name(path)}: no rows")
    return [BenchmarkRow(lineno, row) for lineno, row in rows]


def row_clips(task: str, row: dict) -> list[str]:
    if task == "diffcap":
        return [row["reference"], row["candidate"]]
    if task == "diffmcq":
        return [clip for option in row["options"] for clip in option]
    return [row["reference"], *row["targets"]]


def shard_rows(rows: list[BenchmarkRow], index: int, count: int) -> list[BenchmarkRow]:
    """Shard I of N is the I-th of N contiguous blocks of lines, so concatenating the shards'
    prediction files in order gives the prediction file of the whole benchmark."""
    return rows[index * len(rows) // count:(index + 1) * len(rows) // count]


@dataclass(frozen=True)
class ClipVideo:
    """Where a clip's frames are: `path` from `start` to `end` seconds."""

    path: str
    start: float
    end: float


def _video_span(path: str, spans: dict[str, float]) -> float:
    """Seconds of frames in `path` (asked once per file); a file without frames is an error."""
    if path not in spans:
        media.check_readable(path)
        if not media.probe(path).has_video:
            raise RecordError("no_video_stream", f"{path} has no video stream")
        spans[path] = media.video_span(path)
    return spans[path]


def _clip_video(video_root: Path, clip: str, video_id: str, start: float, end: float, spans: dict[str, float],
                tolerance: float) -> ClipVideo:
    own = find_video(video_root, clip)
    if Path(own).is_file():
        return ClipVideo(own, 0.0, _video_span(own, spans))
    path = find_video(video_root, video_id)
    span = _video_span(path, spans)
    if end > span + tolerance or start >= span:
        raise RecordError("clip_outside_video", f"clip {clip} ({start:g}-{end:g} s) is not inside {path}, whose "
                          f"frames end at {span:.2f} s")
    return ClipVideo(path, start, min(end, span))


def clip_videos(task: str, rows: list[BenchmarkRow], video_root: Path, source: str,
                tolerance: float = TIME_TOLERANCE_S) -> dict[str, ClipVideo]:
    """The video of every clip the rows name: `<root>/<clip id>.<ext>` when the clip was cut
    to its own file (all of it is the clip), else `<root>/<youtube id>.<ext>` from start to end.
    Every missing video and clip outside its video is found before any model runs."""
    found: dict[str, ClipVideo] = {}
    problems: list[str] = []
    spans: dict[str, float] = {}
    for item in rows:
        for clip in row_clips(task, item.row):
            if clip in found:
                continue
            video_id, start, end = parse_clip_id(clip)
            try:
                found[clip] = _clip_video(video_root, clip, video_id, start, end, spans, tolerance)
            except RecordError as exc:
                problems.append(f"{source} line {item.line}: {exc.message}")
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise BenchmarkFileError(f"{len(problems)} clips cannot be read from --video-root {video_root}: "
                                 + "; ".join(problems[:5]) + more + ". A clip is <root>/<youtube_id>.mp4 "
                                 "cut at the id's times, or its own file <root>/<clip id>.mp4")
    return found


# --- the three tasks --------------------------------------------------------------------------

CaptionFn = Callable[[str, str, str], str]
OptionScoreFn = Callable[[str, str, str, str], float]
TargetScoreFn = Callable[[str, str, str], float]


def predict_rows(task: str, rows: list[BenchmarkRow], method, source: str = "the benchmark") -> Iterator[dict]:
    """One official prediction row per benchmark row, in order. `method` has `caption`
    (DiffCap), `option_score` (DiffMCQ) or `target_score` (DiffRank); one that scores a row's
    four options (targets) in one batch has `option_scores(row)` (`target_scores(row)`), used
    instead. A row the method cannot answer (a prompt longer than the LLM's context) stops the
    run, naming the line: a missing line would shift every prediction after it."""
    for item in rows:
        try:
            yield _predict_row(task, item.row, method)
        except RecordError as exc:
            raise BenchmarkFileError(f"{source} line {item.line}: {exc.message}") from None


def _predict_row(task: str, row: dict, method) -> dict:
    if task == "diffcap":
        return {"generated_text": method.caption(row["reference"], row["candidate"], row["category"])}
    if task == "diffmcq":
        if hasattr(method, "option_scores"):  # the row's four options at once (one batch)
            return {"scores": [float(s) for s in method.option_scores(row)]}
        return {"scores": [float(method.option_score(ref, cand, row["difference"], row["category"]))
                           for ref, cand in row["options"]]}
    if hasattr(method, "target_scores"):
        return {"scores": [float(s) for s in method.target_scores(row)]}
    return {"scores": [float(method.target_score(row["reference"], target, row["category"]))
                       for target in row["targets"]]}


# --- vi predict's options -----------------------------------------------------------------------

class Task(str, Enum):
    diffcap = "diffcap"
    diffmcq = "diffmcq"
    diffrank = "diffrank"


class Method(str, Enum):
    vlembed = "vlembed"
    socratic = "socratic"
    stepdiff = "stepdiff"


class Pair(str, Enum):
    both = "both"
    reference = "reference"
    candidate = "candidate"


METHOD_PANEL, VLEMBED_PANEL, SOCRATIC_PANEL, STEPDIFF_PANEL = "Method", "VLEmbed", "Socratic", "StepDiff model"


@dataclass(frozen=True, kw_only=True)
class PredictConfig:
    """What `vi predict` predicts, and the options of its methods: each method reads its own panel's
    (METHOD_OPTIONS), and `check` refuses one given to a method that would ignore it."""

    task: Task = option(argument=True, help="Which benchmark: diffcap, diffmcq or diffrank.")
    gt: Path = option(flag="--gt", exists=True, dir_okay=False, show_default=False,
                      help="The benchmark file (JSONL, official format).")
    method: Method = option(Method.socratic, panel=METHOD_PANEL, help="The baseline, or stepdiff: a trained model.")
    video_root: Path | None = option(None, file_okay=False, exists=True,
                                     help="Folder of the clips' videos (see Clips above).")
    allow_unknown_categories: bool = option(False, flag="--allow-unknown-categories",
                                            help="Accept categories that are not StepDiff's.")
    clip_model: str = option(DEFAULT_CLIP, panel=VLEMBED_PANEL, help=(
        "open_clip model: an alias from `vi models`, a folder, hf-hub:ID, NAME:TAG, or a checkpoint with --clip-arch."))
    clip_arch: str | None = option(None, panel=VLEMBED_PANEL, help="The architecture of a --clip-model checkpoint file.")
    pair: Pair = option(Pair.both, panel=VLEMBED_PANEL, help=(
        "DiffMCQ pair embedding: both (mean of the two clips), reference (Vr only) or candidate (Vc only)."))
    frames: int = option(8, min=1, panel=VLEMBED_PANEL, help="Frames per clip, sampled uniformly.")
    batch_size: int = option(64, min=1, panel=VLEMBED_PANEL, help="Frames per model call.")
    clip_features: Path | None = option(None, exists=True, dir_okay=False, panel=VLEMBED_PANEL, help=(
        "Clip embeddings saved earlier (NPZ id+embedding, or JSONL); clips missing from it are encoded from "
        "--video-root."))
    save_clip_features: Path | None = option(None, panel=VLEMBED_PANEL, help=(
        "Save the clip embeddings (NPZ), for a later run or vi eval mcq-negatives --clip-features."))
    descriptions: Path | None = option(None, exists=True, dir_okay=False, panel=SOCRATIC_PANEL,
                                       help="vi describe records of the clips (id = clip id).")
    save_descriptions: Path | None = option(None, panel=SOCRATIC_PANEL,
                                            help="Save the descriptions made here (JSONL {id, description}).")
    vlm: str = option(AUTO, panel=SOCRATIC_PANEL, help=(
        "Vision-language model that describes clips from --video-root (as vi describe --vlm)."))
    llm: str = option(DEFAULT_LLM, panel=SOCRATIC_PANEL,
                      help="GGUF chat model that answers (an alias from `vi models`, a .gguf).")
    n_ctx: int = option(2048, panel=SOCRATIC_PANEL, help="The LLM's context, in tokens.")
    max_new_tokens: int = option(64, min=8, panel=METHOD_PANEL,
                                 help="Longest DiffCap continuation, in tokens (socratic, stepdiff).")
    checkpoint: Path | None = option(None, exists=True, file_okay=False, panel=STEPDIFF_PANEL, help=(
        "The trained model: a run folder of vi train stepdiff (its newest checkpoint) or one checkpoints/step-N "
        "folder."))
    features: tuple[Path, ...] = option((), metavar="DIR", exists=True, file_okay=False, panel=STEPDIFF_PANEL, help=(
        "A feature store of the clips (vi encode-videos --store, ids = clip ids), repeatable; clips it lacks are "
        "encoded from --video-root."))
    seed: int = option(0, help="Seed of every random choice.")
    device: str = option("auto", help="auto, cpu, cuda, cuda:N or mps.")
    dtype: str = option("auto", help="auto, float32, float16 or bfloat16 (torch models).")

    def given(self, name: str) -> bool:
        """Option `name` was set to something other than its default."""
        return getattr(self, name) not in (defaults(PredictConfig)[name], [], ())

    def check(self) -> None:
        """What the method needs is given, and nothing it would ignore (a ValueError naming the options)."""
        method, task = self.method, self.task
        if method is Method.stepdiff and self.checkpoint is None:
            raise ValueError("stepdiff needs the trained model: give --checkpoint (a vi train stepdiff run folder or "
                             "one of its checkpoints)")
        if method is Method.stepdiff and self.video_root is None and not self.features:
            raise ValueError("stepdiff needs the clips' encoder tokens: give --features (vi encode-videos stores) or "
                             "--video-root to encode the clips here")
        if method is Method.vlembed and task is Task.diffcap:
            raise ValueError("vlembed scores pairs against text; it writes no captions: use --method socratic "
                             "for diffcap")
        if method is Method.vlembed and self.video_root is None and self.clip_features is None:
            raise ValueError("vlembed needs the clips: give --video-root (or --clip-features from an earlier run)")
        if method is Method.socratic and self.video_root is None and self.descriptions is None:
            raise ValueError("socratic needs a sentence per clip: give --descriptions (vi describe's output) or "
                             "--video-root to describe the clips here")
        given = [_flag(n) for n, methods in METHOD_OPTIONS.items() if method not in methods and self.given(n)]
        if given:
            raise ValueError(f"{', '.join(given)}: not read by --method {method.value}")
        if self.given("pair") and task is not Task.diffmcq:
            raise ValueError("--pair chooses VLEmbed's DiffMCQ pair embedding; it does not apply to " + task.value)
        if method is Method.socratic and self.descriptions is not None:
            if self.video_root is not None:
                raise ValueError("--descriptions and --video-root are two sources of the clips' sentences: give one")
            for name in ("save_descriptions", "vlm"):
                if self.given(name):
                    raise ValueError(f"{_flag(name)} is about describing clips from --video-root; with --descriptions "
                                     "no clip is described here")


# The options that only some methods read: given where nothing reads them, they are refused rather than
# silently ignored.
_V, _S, _M = {Method.vlembed}, {Method.socratic}, {Method.stepdiff}
METHOD_OPTIONS = {
    "clip_model": _V, "clip_arch": _V, "pair": _V, "frames": _V, "batch_size": _V, "clip_features": _V,
    "save_clip_features": _V, "descriptions": _S, "save_descriptions": _S, "vlm": _S, "llm": _S, "n_ctx": _S,
    "max_new_tokens": _S | _M, "checkpoint": _M, "features": _M,
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
