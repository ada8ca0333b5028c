"""`vi describe`: a one-sentence description of each clip, from what is seen and said (StepDiff, Sec. 3.2).

Three parts, then an LLM that consolidates them into `description.step` (the paper's prompt, package data):
- action: a vision-language model (VLM) captions `num_frames` frames sampled uniformly in the clip (the
  centre of each of that many equal parts), given as one video where the model's processor takes videos,
  else as images, with the paper's ACTION_PROMPT;
- objects: the same VLM lists the objects on the clip's centre frame (OBJECTS_PROMPT), one per line, parsed
  into a name and attributes. With a zero-shot detector, a name is kept where the detector grounds it: its
  score is the probability of its best box when that reaches the box threshold (the detector's own
  post-processing default unless given), else 0, and it must be above `min_score` (0: the paper's "a score
  above zero"). Without a detector the names are kept as listed, with score null;
- narration: the clip's `narration` (vi clips carries what is said during the clip).

Offline, where no VLM is at hand, there is no action caption and the objects are EfficientNet-Lite0's top-k
ImageNet classes on the centre frame (the names vi align-frames uses), scored by their softmax probability.
`description.sources` says where each part came from. A missing part is shown to the LLM as "(not
available)"; a clip with no part at all is an error record, as is a clip without a readable video or with
times outside it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.records import finite_number
from vi.core import media
from vi.core.config import internal, option, with_default
from vi.core.devices import Placement, passive_openmp, resolve_placement
from vi.core.errors import ModelNotAvailable, RecordError
from vi.core.models import vision, vlm
from vi.core.models.catalog import DEFAULT_IMAGE_CLASSIFIER, DEFAULT_LLM
from vi.core.models.chat import LLM_HELP, LLM_PANEL, ChatBackend, LLMConfig, check_llm
from vi.core.models.resolve import resolve
from vi.core.models.vlm import KNOWN_DETECTORS, KNOWN_VLMS  # by name: `vlm` is also a field below
from vi.core.progress import log
from vi.core.seeding import record_seed
from vi.core.stream import RecordStage
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt
from vi.pipelines.stepdiff.clips import TIME_TOLERANCE_S, VideoLengths
from vi.pipelines.common.frame_scorers import IMAGENET_RESIZE, LABEL_SCORER, TOP_K, fit, label_names, to_tensor

if TYPE_CHECKING:
    import numpy as np

STAGE = "describe"
ACTION_PROMPT = "In one short sentence, describe what the person is doing?"
OBJECTS_PROMPT = ("Give a very short list of all objects that are visible and their attributes, one per line. "
                  "Only list objects being used, NOT in the background.")
IMAGENET_OBJECTS = f"{LABEL_SCORER}:{vision.IMAGENET_ARCH}"
NOT_AVAILABLE = "(not available)"
NONE, AUTO = "none", "auto"
MAX_OBJECTS = 20  # lines of an object list that are grounded; a model that loops writes hundreds
MAX_NAME_CHARS = 60
_BULLET = re.compile(r"^\s*(?:[-*\u2022]+|\d+[.)]|[a-z][.)](?=\s))\s*")


@dataclass(frozen=True, kw_only=True)
class DescribeConfig(LLMConfig):
    """The options of `vi describe`, checked when built: a bad one fails before any record (exit 2), a
    missing model too (exit 5). The models load on the first record that needs them."""

    vlm: str = option(AUTO, help=(
        "Vision-language model for the action caption (8 frames) and the object list (centre frame): "
        "a local folder or a hub id in the local cache that transformers' AutoModelForImageTextToText "
        f"loads (LLaVA-OneVision, Qwen2-VL, ...); auto: the first cached of {', '.join(KNOWN_VLMS)}; "
        "none: no action caption, objects from EfficientNet-Lite0's ImageNet labels (offline)."))
    detector: str = option(AUTO, help=(
        "Zero-shot detector that checks the objects the VLM lists (OWL-ViT, OWLv2, Grounding DINO): a "
        f"folder or a cached hub id; auto: the first cached of {', '.join(KNOWN_DETECTORS)}, else none; "
        "none: keep the listed objects unchecked."))
    # --model would be ambiguous beside --vlm: describe's LLM is --llm only, without LLMConfig's old spelling
    llm: str = option(DEFAULT_LLM, flag="--llm", panel=LLM_PANEL, help=LLM_HELP)
    prompt: Path | None = option(None, help=(
        "Your own consolidation prompt (see the packaged prompt_templates/describe_consolidate.txt); it "
        "must use ${narration}, ${action_caption} and ${object_caption}."))
    num_frames: int = option(8, help="Frames the VLM sees for the action caption, sampled uniformly inside the clip.")
    max_new_tokens: int = option(128, help="Longest VLM reply, in tokens.")  # of each VLM reply
    min_score: float = option(0.0, help=(
        "A listed object is kept when its detector score is above this. The score is the probability "
        "of the object's best box, or 0 where no box reaches --box-threshold; offline, it is the "
        "ImageNet class probability."))
    box_threshold: float | None = option(None, help=(
        "Box probability from which the detector counts a box (default: the detector's own "
        "post-processing default, 0.1 for OWL-ViT/OWLv2, 0.25 for Grounding DINO)."))
    top_k: int = option(TOP_K, help="ImageNet classes listed as objects, offline.")
    step_max_tokens: int = option(96, help="Longest description, in tokens.")  # of the consolidated sentence
    n_ctx: int = with_default(LLMConfig, "n_ctx", 2048)
    dtype: str = "auto"
    placement: Placement = internal(init=False)
    vlm_files: vlm.HFModelFiles | None = internal(init=False)
    detector_files: vlm.HFModelFiles | None = internal(init=False)
    classifier: Path | None = internal(init=False)
    template: ChatPrompt = internal(init=False)
    lengths: VideoLengths = field(init=False, compare=False, repr=False)  # not an option: init=False

    def __post_init__(self) -> None:
        passive_openmp()  # torch (EfficientNet, the VLM, the detector) and llama.cpp share this process
        if self.num_frames < 1 or self.max_new_tokens < 1 or self.top_k < 1:
            raise ValueError("--num-frames, --max-new-tokens and --top-k must be at least 1")
        if self.step_max_tokens < 16 or self.step_max_tokens >= self.n_ctx // 2:
            raise ValueError(f"--step-max-tokens must be between 16 and half of --n-ctx ({self.n_ctx // 2}), "
                             f"got {self.step_max_tokens}")
        if not math.isfinite(self.min_score) or (self.box_threshold is not None and not 0 <= self.box_threshold <= 1):
            raise ValueError("--min-score must be a number and --box-threshold a probability between 0 and 1")
        chosen_vlm = choose_vlm(self.vlm)
        derived = {
            "placement": resolve_placement(self.device, self.dtype, engine="torch"),
            "template": load_prompt("describe_consolidate", self.prompt,
                                    needs=("narration", "action_caption", "object_caption")),
            "vlm_files": chosen_vlm,
            "detector_files": choose_detector(self.detector, self.vlm, chosen_vlm),
            "classifier": resolve(DEFAULT_IMAGE_CLASSIFIER, "image-classifier") if chosen_vlm is None else None,
            "lengths": VideoLengths(),
        }
        check_llm(self.llm_settings)  # a bad --device or --llm, a missing model or server: before any record
        for name, value in derived.items():
            object.__setattr__(self, name, value)  # a frozen dataclass: set once, here

    @property
    def sources(self) -> dict[str, str | None]:
        """What each part of a description comes from, as written to `description.sources`."""
        if self.vlm_files is None:
            return {"action": None, "objects": IMAGENET_OBJECTS, "step": self.llm}
        objects = self.vlm_files.label + (f"+{self.detector_files.label}" if self.detector_files else "")
        return {"action": self.vlm_files.label, "objects": objects, "step": self.llm}

    def load_vlm(self) -> vlm.VisionLanguageModel:
        return vlm.load_vlm(self.vlm_files, self.placement)

    def load_detector(self) -> vlm.ZeroShotDetector:
        return vlm.load_detector(self.detector_files, self.placement)

    def load_classifier(self) -> vision.ImageNetClassifier:
        return vision.load_imagenet_classifier(self.classifier, self.placement)


def choose_vlm(ref: str) -> vlm.HFModelFiles | None:
    if ref == NONE:
        return None
    if ref != AUTO:
        return resolve(ref, "vlm")
    found = vlm.cached_vlm()
    if found is None:
        log.info("describe: --vlm auto found no vision-language model in the local hub cache, so there is no "
                 "action caption and the objects are EfficientNet-Lite0's ImageNet labels (`hf download %s` "
                 "on a connected machine, then --vlm auto uses it; --vlm none silences this)", vlm.KNOWN_VLMS[0])
    else:
        log.info("describe: --vlm auto uses %s from the local hub cache", found.label)
    return found


def choose_detector(ref: str, vlm_ref: str, vlm_files: vlm.HFModelFiles | None) -> vlm.HFModelFiles | None:
    if ref == NONE:
        return None
    if vlm_files is None:
        if ref == AUTO:
            return None
        if vlm_ref == NONE:
            raise ValueError(f"--detector {ref} grounds the objects a vision-language model lists; with "
                             "--vlm none the objects are ImageNet labels: give --vlm too, or --detector none")
        raise ModelNotAvailable(f"--detector {ref} needs a vision-language model, and --vlm auto found none in "
                                f"the local hub cache; on a connected machine run `hf download {vlm.KNOWN_VLMS[0]}`")
    if ref != AUTO:
        return resolve(ref, "detector")
    found = vlm.cached_detector()
    if found is None:
        log.info("describe: --detector auto found no zero-shot detector in the local hub cache, so the objects "
                 "the VLM lists are kept unchecked (`hf download %s` on a connected machine; --detector none "
                 "silences this)", vlm.KNOWN_DETECTORS[0])
    else:
        log.info("describe: --detector auto uses %s from the local hub cache", found.label)
    return found


# --- the clip and its frames ------------------------------------------------------------------

def sample_times(start: float, end: float, count: int) -> list[float]:
    """The centres of `count` equal parts of [start, end]: uniform, and never a boundary frame."""
    step = (end - start) / count
    return [start + (i + 0.5) * step for i in range(count)]


def _time(record: dict, name: str) -> float:
    value = record.get(name)
    if finite_number(value) is None:
        raise RecordError("missing_field", f"clip {record['id']}: '{name}' is {value!r}, not a time in seconds; "
                          "vi describe reads the clip records vi clips writes")
    return float(value)


def clip_span(record: dict, lengths: VideoLengths) -> tuple[str, float, float]:
    """(video, start, end) of a clip whose video is readable and whose times lie inside it."""
    video = record.get("video")
    if not isinstance(video, str) or not video:
        raise RecordError("missing_field", f"clip {record['id']}: no 'video' path; vi clips writes it "
                          "(give --video-root for benchmark clips)")
    start, end = _time(record, "start"), _time(record, "end")
    if not 0 <= start < end:
        raise RecordError("bad_interval", f"clip {record['id']}: 'start' {start} s must be >= 0 and before "
                          f"'end' {end} s")
    media.check_readable(video)
    duration = record.get("video_duration")
    known = isinstance(duration, (int, float)) and not isinstance(duration, bool) and duration > 0
    duration = float(duration) if known else lengths(video)
    if start >= duration:
        raise RecordError("clip_outside_video", f"clip {record['id']}: 'start' is {start} s, after the end of "
                          f"{video} ({duration:.2f} s); wrong video file, or wrong times?")
    if end > duration + TIME_TOLERANCE_S:
        raise RecordError("clip_outside_video", f"clip {record['id']}: 'end' is {end} s, after the end of "
                          f"{video} ({duration:.2f} s); wrong video file, or wrong times?")
    return video, start, min(end, duration)


# --- objects ----------------------------------------------------------------------------------

def parse_object_list(text: str) -> list[dict]:
    """An object list, one per line, as [{name, attributes}]: "- Knife: silver, sharp", "2. red tomato
    (sliced)", "bowl - glass". A line ending in ":" is a heading; repeated names are kept once."""
    objects, seen = [], set()
    for line in text.splitlines():
        line = _BULLET.sub("", line.replace("**", "")).strip().rstrip(".").strip()
        if not line or line.endswith(":"):
            continue
        match = re.match(r"^(.*?)\s*(?::|\s[-\u2013\u2014]\s|\(|,)\s*(.*?)\)?$", line)
        name, attributes = (match.group(1), match.group(2)) if match and match.group(1) else (line, "")
        name = name.strip(" \"'")[:MAX_NAME_CHARS].strip()
        if name and name.casefold() not in seen:
            seen.add(name.casefold())
            objects.append({"name": name, "attributes": attributes.strip() or None})
        if len(objects) == MAX_OBJECTS:
            break
    return objects


def ground_objects(detector: vlm.ZeroShotDetector, frame: np.ndarray, objects: list[dict], min_score: float,
                   box_threshold: float | None) -> list[dict]:
    """The objects the detector finds on `frame`, each with its score (see the module docstring)."""
    threshold = detector.default_box_threshold if box_threshold is None else box_threshold
    probabilities = detector.best_scores(frame, [o["name"] for o in objects])
    scored = [{**o, "score": round(p, 4) if p >= threshold else 0.0} for o, p in zip(objects, probabilities)]
    return [o for o in scored if o["score"] > min_score]


def imagenet_objects(classifier: vision.ImageNetClassifier, frame: np.ndarray, placement: Placement, top_k: int,
                     min_score: float) -> list[dict]:
    """The top-k ImageNet classes of `frame`, most probable first, with their softmax probabilities."""
    import torch

    size = (classifier.input_size, classifier.input_size)
    with torch.inference_mode():
        x = fit(to_tensor(frame[None], placement), size, IMAGENET_RESIZE)
        probs = classifier.model((x - 127.0) / 128.0).float().softmax(-1)[0]  # its training scaling
        top, index = probs.topk(top_k)
    names = label_names()
    found = [{"name": names[i], "attributes": None, "score": round(float(p), 4)}
             for p, i in zip(top.tolist(), index.tolist())]
    return [o for o in found if o["score"] > min_score]


def object_caption(objects: list[dict], with_probability: bool = False) -> str:
    """The objects as the LLM reads them: "knife (silver, sharp); tomato (red)". ImageNet labels carry their
    probability instead ("orange (81%); lemon (8%)"), so that a confident label reads unlike a guess."""
    def extra(o: dict) -> str | None:
        if with_probability:
            return f"{o['score']:.0%}" if o["score"] >= 0.01 else "<1%"
        return o["attributes"]

    return "; ".join(o["name"] + (f" ({extra(o)})" if extra(o) else "") for o in objects)


# --- the description --------------------------------------------------------------------------

def _filled(text: str | None) -> str:
    text = " ".join((text or "").split()).rstrip(". ")
    return text or NOT_AVAILABLE  # the template ends each part with its own period


def consolidate(llm: ChatBackend, config: DescribeConfig, record_id: object, narration: str | None,
                action: str | None, objects: str | None) -> str:
    messages = config.template.render(narration=_filled(narration), action_caption=_filled(action),
                                      object_caption=_filled(objects))
    if llm.count_message_tokens(messages) + config.step_max_tokens > llm.n_ctx:
        raise RecordError("context_too_small", f"clip {record_id}: its narration and captions do not fit --n-ctx "
                          f"{config.n_ctx} with {config.step_max_tokens} new tokens; raise --n-ctx")
    reply = llm.chat(messages, max_tokens=config.step_max_tokens, temperature=0.0,
                     seed=record_seed(config.seed, record_id) % 2**32)
    step = " ".join(reply.text.split()).strip("\"'")
    if not step:
        raise RecordError("llm_output_invalid", f"clip {record_id}: the LLM {config.llm} gave an empty "
                          "description")
    return step


def describe(record: dict, config: DescribeConfig) -> dict:
    video, start, end = clip_span(record, config.lengths)
    centre = (start + end) / 2
    narration = record.get("narration")
    narration = (" ".join(narration.split()) or None) if isinstance(narration, str) else None
    if config.vlm_files is None:
        frame = media.read_frames(video, [centre])[0]
        action = None
        objects = imagenet_objects(config.load_classifier(), frame, config.placement, config.top_k,
                                   config.min_score)
    else:
        times = sample_times(start, end, config.num_frames)
        frames = media.read_frames(video, times + [centre])  # one decode for both prompts
        model = config.load_vlm()
        action = model.caption(ACTION_PROMPT, frames[:-1], config.max_new_tokens, span_s=end - start) or None
        objects = parse_object_list(model.caption(OBJECTS_PROMPT, frames[-1:], config.max_new_tokens))
        if config.detector_files is not None:
            objects = ground_objects(config.load_detector(), frames[-1], objects, config.min_score, config.box_threshold)
        else:
            objects = [{**o, "score": None} for o in objects]
    if narration is None and action is None and not objects:
        raise RecordError("nothing_to_describe", f"clip {record['id']}: no narration, no action caption and no "
                          "object found on its centre frame; nothing to describe")
    shown = object_caption(objects, with_probability=config.vlm_files is None) or None
    step = consolidate(config.load_llm(), config, record["id"], narration, action, shown)
    return {"description": {"action": action, "objects": objects, "narration": narration, "step": step,
                            "sources": config.sources}}


DESCRIBE = RecordStage(
    STAGE,
    reads="clip records (vi clips): [cyan]video[/cyan], [cyan]start[/cyan], [cyan]end[/cyan], and "
          "[cyan]narration[/cyan] and [cyan]video_duration[/cyan] when present.",
    writes="[cyan]description[/cyan] = {action, objects: [{name, attributes, score}], narration, step, "
           "sources: {action, objects, step}}: [cyan]step[/cyan] is the sentence (what vi pair-qa reads); "
           "[cyan]sources[/cyan] names the model behind each part (action null without a VLM; objects "
           f"\"{IMAGENET_OBJECTS}\" offline, else \"VLM+DETECTOR\"). A clip without a readable video, or "
           "with times outside it, is an error record.",
    example="vi clips -i steps.jsonl | vi describe | vi pair | vi pair-qa -o qa.jsonl",
    config=DescribeConfig, fields=("description",), process=describe)
