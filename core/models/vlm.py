"""Vision-language models and zero-shot object detectors from transformers, each loaded once per process.

A reference is an alias from `vi models`, a local model folder or a hub id `org/name` already in the local
Hugging Face cache (`catalog.local_weights`). It is checked first, cheaply and without building anything (`locate_vlm`,
`locate_detector`): a missing model, or one that is not of a supported kind, stops a stage before any
record with a message that names what to fetch. `cached_vlm()`/`cached_detector()` pick the first model
of the catalogue's (KNOWN_VLMS, KNOWN_DETECTORS) that is in the local cache. Everything loads with
local_files_only=True, so nothing here can start a download.

- `VisionLanguageModel`: AutoProcessor + AutoModelForImageTextToText (LLaVA-OneVision, Qwen2-VL, ...). The
  prompt is rendered by the processor's chat template; frames go in as one video where the processor has a
  video processor, else as that many images; decoding is greedy.
- `ZeroShotDetector`: AutoProcessor + AutoModelForZeroShotObjectDetection (OWL-ViT, OWLv2, Grounding DINO),
  in float32. For each text query it gives the probability of the best box, over all boxes.
"""

from __future__ import annotations

import copy
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vi.core.devices import Placement
from vi.core.errors import ModelNotAvailable, SetupError
from vi.core.models.cache import load_once
from vi.core.models.catalog import hub_repos, local_weights
from vi.core.models.sources import hub_snapshot

if TYPE_CHECKING:
    import numpy as np

# Preference order for `auto` (the catalogue's order): the strongest that is cached wins.
KNOWN_VLMS = hub_repos("vlm")
KNOWN_DETECTORS = hub_repos("detector")
# How a detector's logits map to its text queries: one column per query (OWL), or one per token (DINO).
QUERY_DETECTORS = ("owlvit", "owlv2")
TOKEN_DETECTORS = ("grounding-dino", "mm-grounding-dino")
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


@dataclass(frozen=True)
class HFModelFiles:
    label: str  # what the user named (or `auto` chose): messages and the records' `sources`
    folder: Path
    model_type: str  # config.json's model_type


def _locate(ref: str, role: str, what: str, supported: tuple[str, ...], example: str) -> HFModelFiles:
    folder = local_weights(ref, role)  # an alias, a path or a cached hub id; else ModelNotAvailable with `hf download`
    config = folder / "config.json"
    if not folder.is_dir() or not config.is_file():
        raise ModelNotAvailable(f"{what} {ref!r}: {folder} is not a transformers model folder (no config.json); "
                                f"give a folder or a hub id such as {example}")
    model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    if model_type not in supported:
        raise ModelNotAvailable(f"{what} {ref!r} is a {model_type!r} model; vi runs these kinds: "
                                f"{', '.join(supported)} (e.g. {example})")
    if not any((folder / name).is_file() for name in PROCESSOR_FILES):
        raise ModelNotAvailable(f"{what} {ref!r}: {folder} has no {' or '.join(PROCESSOR_FILES)}, so its "
                                "image processor is unknown; download the whole repository")
    return HFModelFiles(ref, folder, model_type)


def _has_chat_template(folder: Path) -> bool:
    if any((folder / name).is_file() for name in CHAT_TEMPLATE_FILES):
        return True
    for name in ("processor_config.json", "tokenizer_config.json"):
        path = folder / name
        if path.is_file() and json.loads(path.read_text(encoding="utf-8")).get("chat_template"):
            return True
    return False


def locate_vlm(ref: str) -> HFModelFiles:
    """The folder of a vision-language model that AutoModelForImageTextToText builds, with a chat template."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    from vi.core.models import llava_next

    supported = tuple(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)
    if Path(ref).is_dir() and llava_next.is_llava_next(Path(ref)):
        # a LLaVA-NeXT checkpoint (ProgressCaptioner's release): converted once, run the release's way
        files = _locate(str(llava_next.converted(Path(ref))), "vlm", "vision-language model", supported, ref)
        return HFModelFiles(ref, files.folder, files.model_type)
    files = _locate(ref, "vlm", "vision-language model", supported, KNOWN_VLMS[0])
    if not _has_chat_template(files.folder):
        raise ModelNotAvailable(f"vision-language model {ref!r}: {files.folder} has no chat template "
                                f"({', '.join(CHAT_TEMPLATE_FILES)}), so vi cannot build its prompt; use an "
                                "instruction-tuned (chat) model")
    return files


def locate_detector(ref: str) -> HFModelFiles:
    """The folder of a zero-shot object detector vi can score text queries with."""
    return _locate(ref, "detector", "zero-shot detector", QUERY_DETECTORS + TOKEN_DETECTORS, KNOWN_DETECTORS[0])


def cached_vlm() -> HFModelFiles | None:
    return next((locate_vlm(repo) for repo in KNOWN_VLMS if hub_snapshot(repo) is not None), None)


def cached_detector() -> HFModelFiles | None:
    return next((locate_detector(repo) for repo in KNOWN_DETECTORS if hub_snapshot(repo) is not None), None)


def _inputs_to(inputs, model, placement: Placement):
    # floating tensors (pixels) take the model's dtype; token ids keep theirs
    return inputs.to(placement.device, model.dtype)


class VisionLanguageModel:
    """`caption(prompt, frames)`: greedy text about one image or a clip's frames. Load with `load_vlm`."""

    def __init__(self, files: HFModelFiles, placement: Placement):
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.files, self.placement = files, placement
        try:
            self.processor = AutoProcessor.from_pretrained(str(files.folder), local_files_only=True)
            self.model = AutoModelForImageTextToText.from_pretrained(
                str(files.folder), local_files_only=True, dtype=placement.torch_dtype())
        except Exception as exc:  # a truncated file, a version mismatch: nothing a record can fix
            raise SetupError(f"vision-language model {files.label!r} did not load from {files.folder}: "
                             f"{type(exc).__name__}: {exc}") from exc
        self.model.to(placement.device).eval()
        tokenizer = self.processor.tokenizer
        # A converted LLaVA-NeXT checkpoint: frames go through the release's own video path (llava_next)
        self.release = None
        release = files.folder / "vi_release.json"
        if release.is_file():
            from transformers import SiglipImageProcessor

            self.release = json.loads(release.read_text(encoding="utf-8"))
            self.release_processor = SiglipImageProcessor.from_pretrained(
                str(files.folder / "release_image_processor"), local_files_only=True)
        self.chat_template = self.processor.chat_template or tokenizer.chat_template
        # A processor with a video processor (LLaVA-OneVision, Qwen2-VL) takes the frames as one video.
        self.takes_video = getattr(self.processor, "video_processor", None) is not None
        # Greedy, whatever sampling defaults the repo's generation_config.json sets; its other settings
        # (end tokens, cache kind) are kept.
        self.generation = copy.deepcopy(self.model.generation_config)
        self.generation.update(do_sample=False, num_beams=1, temperature=None, top_p=None, top_k=None)
        if self.generation.pad_token_id is None:
            pad = tokenizer.pad_token_id
            self.generation.pad_token_id = pad if pad is not None else tokenizer.eos_token_id

    def inputs(self, prompt: str, frames: np.ndarray, span_s: float | None = None):
        """Model inputs for `prompt` about `frames` (N, H, W, 3) uint8: one image when N is 1, else the
        frames sampled uniformly from a clip `span_s` seconds long, as one video or as N images."""
        from transformers.video_utils import VideoMetadata

        count = len(frames)
        as_video = count > 1 and self.takes_video
        parts = [{"type": "video"}] if as_video else [{"type": "image"}] * count
        messages = [{"role": "user", "content": [*parts, {"type": "text", "text": prompt}]}]
        text = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                                  chat_template=self.chat_template)
        if not as_video:
            return self.processor(text=[text], images=list(frames), return_tensors="pt")
        # The frames are sampled already; their rate lets timestamp-aware models (Qwen2.5/3-VL) place them.
        fps = count / span_s if span_s else 1.0
        metadata = VideoMetadata(total_num_frames=count, fps=fps, width=frames.shape[2], height=frames.shape[1],
                                 duration=count / fps, frames_indices=list(range(count)))
        return self.processor(text=[text], videos=[frames], do_sample_frames=False, fps=fps,
                              video_metadata=[metadata], return_tensors="pt")

    def caption(self, prompt: str, frames: np.ndarray, max_new_tokens: int, span_s: float | None = None) -> str:
        import torch

        if self.release is not None:
            return self.release_generate([(prompt, frames)], self.generation, max_new_tokens)[0]
        inputs = _inputs_to(self.inputs(prompt, frames, span_s), self.model, self.placement)
        with torch.inference_mode():
            out = self.model.generate(**inputs, generation_config=self.generation, max_new_tokens=max_new_tokens)
        new = out[:, inputs["input_ids"].shape[1]:]  # the reply only, not the prompt
        return self.processor.batch_decode(new, skip_special_tokens=True)[0].strip()


    def release_generate(self, requests: list[tuple[str, np.ndarray]], config, max_new_tokens: int) -> list[str]:
        """Replies to [(query, frames)] the way the release's infer.py asks (llava_next.release_inputs)."""
        import torch

        from vi.core.models.llava_next import release_inputs

        with torch.inference_mode():
            embeds, mask = release_inputs(self.model, self.processor.tokenizer, self.release_processor, requests)
            out = self.model.generate(inputs_embeds=embeds, attention_mask=mask, generation_config=config,
                                      max_new_tokens=max_new_tokens)
        return [text.strip() for text in self.processor.batch_decode(out, skip_special_tokens=True)]


def load_vlm(files: HFModelFiles, placement: Placement) -> VisionLanguageModel:
    return load_once(("vlm", files, placement), lambda: VisionLanguageModel(files, placement))


class ZeroShotDetector:
    """`best_scores(image, names)`: per name, the probability of its best box. Load with `load_detector`."""

    def __init__(self, files: HFModelFiles, placement: Placement):
        import torch
        from transformers import AutoModelForZeroShotObjectDetection, AutoProcessor

        self.files, self.placement = files, placement
        try:
            self.processor = AutoProcessor.from_pretrained(str(files.folder), local_files_only=True)
            # float32 whatever --dtype says: these models are small (0.15-0.25 B parameters), and their
            # scores are compared with thresholds, which half precision would move
            self.model = AutoModelForZeroShotObjectDetection.from_pretrained(
                str(files.folder), local_files_only=True, dtype=torch.float32)
        except Exception as exc:
            raise SetupError(f"zero-shot detector {files.label!r} did not load from {files.folder}: "
                             f"{type(exc).__name__}: {exc}") from exc
        self.model.to(placement.device).eval()
        # The box threshold the detector's own post-processing uses by default (OWL 0.1, Grounding DINO 0.25).
        post = self.processor.post_process_grounded_object_detection
        self.default_box_threshold = float(inspect.signature(post).parameters["threshold"].default)

    def best_scores(self, image: np.ndarray, names: list[str]) -> list[float]:
        """sigmoid of the highest logit any box gives each name, in the order of `names`."""
        if not names:
            return []
        if self.files.model_type in QUERY_DETECTORS:
            return self._query_scores(image, names)
        return self._token_scores(image, names)

    def _run(self, **inputs: Any):
        import torch

        batch = _inputs_to(self.processor(**inputs, return_tensors="pt"), self.model, self.placement)
        with torch.inference_mode():
            return batch, self.model(**batch).logits.float().sigmoid()[0].cpu()  # (boxes, queries or tokens)

    def _query_scores(self, image: np.ndarray, names: list[str]) -> list[float]:
        # OWL: each name is its own text query (at most 16 tokens: longer names are cut)
        _, probs = self._run(text=[names], images=image, truncation=True)
        return probs.max(dim=0).values.tolist()

    def _token_scores(self, image: np.ndarray, names: list[str]) -> list[float]:
        # Grounding DINO: the names are one caption "a. b. c."; a name's score is its best token's
        scores: list[float] = []
        for text, ids, spans in phrase_groups(self.processor.tokenizer, names, self.model.config.max_text_len):
            batch, probs = self._run(text=text, images=image)
            if batch["input_ids"][0].tolist() != ids:  # the spans index the processor's tokens
                raise RuntimeError(f"the detector's processor tokenised {text!r} differently from its tokenizer")
            best = probs.max(dim=0).values
            scores += [float(best[span].max()) if span else 0.0 for span in spans]
        return scores


def phrase_groups(tokenizer, names: list[str], max_tokens: int) -> list[tuple[str, list[int], list[list[int]]]]:
    """Captions "a. b. c." of whole names that fit `max_tokens`: (caption, its token ids, the positions of
    each name's tokens). Grounding DINO reads lower-case phrases ended by periods; a period inside a name
    would split it, so it becomes a space.
    """
    cleaned = [" ".join(name.lower().replace(".", " ").split()) for name in names]
    groups: list[list[str]] = [[]]
    for name in cleaned:
        if groups[-1] and len(tokenizer(". ".join(groups[-1] + [name]) + ".")["input_ids"]) > max_tokens:
            groups.append([])
        groups[-1].append(name)
    out = []
    for group in groups:
        text = ". ".join(group) + "."
        encoded = tokenizer(text, return_offsets_mapping=True, truncation=True, max_length=max_tokens)
        spans, begin = [], 0
        for name in group:
            end = begin + len(name)
            spans.append([i for i, (a, b) in enumerate(encoded["offset_mapping"]) if begin <= a < b <= end])
            begin = end + 2  # past ". "
        out.append((text, list(encoded["input_ids"]), spans))
    return out


def load_detector(files: HFModelFiles, placement: Placement) -> ZeroShotDetector:
    return load_once(("zero-shot-detector", files, placement), lambda: ZeroShotDetector(files, placement))
