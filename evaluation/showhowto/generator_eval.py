"""`vi eval showhowto`: ShowHowTo's Sec. 5.1 metrics of generated sequences on a test set written by
`vi export showhowto`, and the paper's Table 1 baselines (copy of input, random, source sequences).

The test set's strips are cut into tiles (frame 0 = the input image I_0, frames 1..m-1 = the
steps). Every tile is encoded once with the scene model (the database of scene consistency) and,
for the baselines, whose step images are tiles, with the image-text model. Generated frames are
encoded with both. The metrics themselves are `generator_metrics`.

Models: ShowHowTo's DFN5B-CLIP ViT-H/14 (step and task faithfulness) and DINOv2 (scene consistency),
from the local HF cache. Without them (`auto`), the embedded offline models stand in, and the
output says so (`offline: true`): EfficientNet-Lite0's top-5 ImageNet labels embedded with MiniLM
(`imagenet-labels`, the offline scorer of vi align-frames) and EfficientNet-Lite0's pooled
1280-d features.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from vi.core.devices import Placement, resolve_placement
from vi.core.models import dino, get_spec, vision
from vi.core.models.catalog import DEFAULT_DINO, DEFAULT_IMAGE_CLASSIFIER
from vi.core.models.resolve import resolve
from vi.core.progress import log
from vi.core.seeding import record_rng
from vi.evaluation.showhowto import generator_metrics as metrics
from vi.evaluation.showhowto.generator_eval_config import METHODS, GeneratorEvalConfig
from vi.pipelines.common import frame_scorers as fs
from vi.pipelines.showhowto.generator_data import DatasetSequence, read_dataset

EFFICIENTNET_FEATURES = f"{vision.IMAGENET_ARCH} (pooled features)"
CHUNK = 256  # images decoded at a time


@dataclass
class Generated:
    """The generated file: each scored sequence's frame files, and the records that failed."""

    frames: dict[int, list[Path]] = field(default_factory=dict)  # test-set index -> step images
    failed: list[dict] = field(default_factory=list)  # {line, id, reason}


def read_generated(path: Path, sequences: list[DatasetSequence], dataset: Path) -> Generated:
    """Parse `vi generate`'s JSONL; a line that cannot be scored is a ValueError naming file and line."""
    index = {s.key: i for i, s in enumerate(sequences)} | {s.id: i for i, s in enumerate(sequences)}
    out, seen = Generated(), {}
    for number, text in enumerate(Path(path).read_text().splitlines(), 1):
        if not text.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        if not isinstance(record, dict) or "id" not in record:
            raise ValueError(f"{where}: not a record with an id (a line of vi generate's output)")
        at = index.get(str(record["id"]))
        if at is None:
            raise ValueError(f"{where}: id {record['id']!r} is not a sequence of the test set {dataset} "
                             f"({len(sequences)} sequences, matched by their sidecar id or strip KEY); was it "
                             "generated from another dataset?")
        if at in seen:
            raise ValueError(f"{where}: id {record['id']!r} again (first on line {seen[at]})")
        seen[at] = number
        errors, generated = record.get("errors"), record.get("generated")
        if errors or not isinstance(generated, dict):
            reason = (errors[-1].get("message") if isinstance(errors, list) and isinstance(errors[-1], dict)
                      else str(errors)) if errors else "no 'generated' field"
            out.failed.append({"line": number, "id": record["id"], "reason": reason})
            continue
        frames, steps = generated.get("frames"), len(sequences[at].prompts) - 1
        if not isinstance(frames, list) or len(frames) != steps or not all(isinstance(f, str) for f in frames):
            raise ValueError(f"{where}: generated.frames must list {steps} image paths (one per step of test "
                             f"sequence {sequences[at].key}), got {json.dumps(frames)[:200]}")
        out.frames[at] = [_existing(frame, Path(path).parent, f"{where}: generated.frames[{j}]")
                          for j, frame in enumerate(frames)]
    return out


def _existing(name: str, base: Path, where: str) -> Path:
    for candidate in (Path(name), base / name):
        if candidate.is_file():
            return candidate
    raise ValueError(f"{where}: {name}: no such image file (relative paths are read from the current "
                     f"folder or {base})")


# --- the models ---------------------------------------------------------------------------

def resolve_text_image(ref: str, arch: str | None) -> fs.ScorerChoice:
    if ref == "auto":
        spec = get_spec(fs.DEFAULT_CLIP)
        if spec is not None and spec.available():
            ref = fs.DEFAULT_CLIP
        else:
            log.info("eval showhowto: %s is not in the local hub cache (`%s`): step and task faithfulness "
                     "use the offline %s instead, not the paper's numbers", fs.DEFAULT_CLIP,
                     spec.install if spec else fs.DEFAULT_CLIP, fs.LABEL_SCORER)
            ref = fs.LABEL_SCORER
    if ref == fs.RANDOM:
        raise ValueError("--clip random scores nothing; the random baseline is --method random")
    is_file = Path(ref).expanduser().is_file()
    if arch is not None and not is_file:
        raise ValueError("--clip-arch goes with --clip PATH_TO_CHECKPOINT")
    if is_file and arch is None:
        raise ValueError(f"--clip {ref} is a checkpoint file: name its architecture with --clip-arch")
    return fs.resolve_scorer(ref, arch)


def resolve_scene(ref: str) -> dino.DinoSource | Path:
    """A DINOv2 source, or the EfficientNet-Lite0 weights file for the offline scene features."""
    if ref == "auto":
        if dino.dino_available(DEFAULT_DINO):
            return resolve(DEFAULT_DINO, "dino")
        log.info("eval showhowto: %s is not in the local hub cache (`hf download %s`): scene consistency "
                 "uses %s instead", DEFAULT_DINO, DEFAULT_DINO, EFFICIENTNET_FEATURES)
        ref = vision.IMAGENET_ARCH
    if ref in (vision.IMAGENET_ARCH, fs.LABEL_SCORER):
        return resolve(DEFAULT_IMAGE_CLASSIFIER, "image-classifier")
    return resolve(ref, "dino")


def _by_shape(images: list[Image.Image], size_of, encode) -> np.ndarray:
    """Resize each image to `size_of(w, h)`, encode same-sized ones together, keep the order."""
    arrays = [np.asarray(im.convert("RGB").resize(size_of(*im.size), Image.BICUBIC)) for im in images]
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, array in enumerate(arrays):
        groups[array.shape].append(i)
    out = None
    for rows in groups.values():
        feats = encode(np.stack([arrays[i] for i in rows]))
        out = np.zeros((len(arrays), feats.shape[1]), np.float32) if out is None else out
        out[rows] = feats
    return out


class Encoders:
    """The image-text model (step, task) and the scene model, loaded on first use."""

    def __init__(self, text_image: fs.ScorerChoice, scene, placement: Placement, batch_size: int):
        self.text_image, self.scene, self.placement, self.batch_size = text_image, scene, placement, batch_size
        self.offline = text_image.kind == fs.LABEL_SCORER or isinstance(scene, Path)
        self.labels = {"clip": text_image.name,
                       "dino": EFFICIENTNET_FEATURES if isinstance(scene, Path) else scene.label}

    def _scorer(self):
        if not hasattr(self, "scorer"):  # the models themselves are cached per process (load_once)
            self.scorer = fs.make_scorer(self.text_image, self.placement, self.batch_size)
        return self.scorer

    def images(self, images: list[Image.Image]) -> np.ndarray:
        scorer = self._scorer()
        return _by_shape(images, scorer.decode_size, scorer.encode_frames)

    def texts(self, texts: list[str]) -> np.ndarray:
        scorer = self._scorer()
        feats = scorer.encode_texts(texts)
        if isinstance(scorer, fs.ImageNetLabelScorer):  # into label space: similarity is then a dot product
            feats = feats @ scorer.label_embeddings.T
        return feats

    def scene_features(self, images: list[Image.Image]) -> np.ndarray:
        if not isinstance(self.scene, Path):
            return dino.image_features(dino.load_dino(self.scene, self.placement), images, self.batch_size)
        import torch

        net = vision.load_imagenet_classifier(self.scene, self.placement)
        size = (net.input_size, net.input_size)

        def encode(arrays):
            out = []
            with torch.inference_mode():
                for start in range(0, len(arrays), self.batch_size):
                    x = fs.fit(fs.to_tensor(arrays[start:start + self.batch_size], self.placement), size,
                               fs.IMAGENET_RESIZE)
                    out.append(net.model.extract_features((x - 127.0) / 128.0).mean((2, 3)).float().cpu().numpy())
            return np.concatenate(out)

        return _by_shape(images, lambda w, h: fs.decode_size(w, h, size, fs.IMAGENET_RESIZE), encode)


def _encode_chunks(load_groups, encode_fns) -> list[np.ndarray]:
    """Decode images a few groups at a time (`load_groups` yields lists of images), encode each chunk
    with every function, return one stacked matrix per function."""
    outs, pending = [[] for _ in encode_fns], []

    def flush():
        for out, fn in zip(outs, encode_fns):
            out.append(fn(pending))
        pending.clear()

    for images in load_groups:
        pending.extend(images)
        if len(pending) >= CHUNK:
            flush()
    if pending:
        flush()
    return [np.concatenate(out) for out in outs]


# --- the evaluation -----------------------------------------------------------------------

def baseline_frames(method: str, sequences: list[DatasetSequence], offsets: list[int], seed: int) -> list[list[int]]:
    """Each sequence's step images as indices of test-set tiles: copy = the input image n times;
    source = its own steps; random = the steps of another sequence drawn from (seed, id), one with the
    same number of steps when there is one (else its steps repeated or cut to length)."""
    out = []
    for i, seq in enumerate(sequences):
        steps = len(seq.prompts) - 1
        if method == "copy":
            out.append([offsets[i]] * steps)
        elif method == "source":
            out.append([offsets[i] + j for j in range(1, steps + 1)])
        else:
            others = [k for k in range(len(sequences)) if k != i]
            if not others:
                raise ValueError("--method random needs a test set of at least two sequences")
            same = [k for k in others if len(sequences[k].prompts) == len(seq.prompts)]
            k = record_rng(seed, seq.id).choice(same or others)
            theirs = len(sequences[k].prompts) - 1
            out.append([offsets[k] + 1 + j % theirs for j in range(steps)])
    return out


def evaluate(config: GeneratorEvalConfig) -> tuple[dict, list[dict]]:
    """(the summary, one row per scored sequence). Inputs and models are checked before any is loaded."""
    dataset, generated, method = config.dataset, config.generated, config.method or "generated"
    if (generated is None) == (method == "generated"):
        raise ValueError("give either --generated FILE (vi generate's output) or --method copy|random|source")
    if method not in METHODS:
        raise ValueError(f"--method must be one of {', '.join(METHODS[1:])}, got {method!r}")
    sequences = read_dataset(dataset)
    short = [s.key for s in sequences if len(s.prompts) < 2]
    if short:
        raise ValueError(f"{dataset}: sequences {', '.join(short[:5])} have no step (one prompt only)")
    gen = read_generated(generated, sequences, dataset) if method == "generated" else None
    if gen is not None and not gen.frames:
        first = f" (first: line {gen.failed[0]['line']}: {gen.failed[0]['reason']})" if gen.failed else ""
        raise ValueError(f"{generated}: no generated sequence to score; {len(gen.failed)} record(s) failed{first}")
    encoders = Encoders(resolve_text_image(config.clip, config.clip_arch), resolve_scene(config.dino),
                        resolve_placement(config.device, "auto"), config.batch_size)

    offsets = np.cumsum([0] + [len(s.prompts) for s in sequences]).tolist()
    fns = [encoders.scene_features] + ([encoders.images] if gen is None else [])
    tiles = _encode_chunks((s.tiles() for s in sequences), fns)
    database, videos = tiles[0], [s.video or s.key for s in sequences for _ in s.prompts]
    if gen is None:
        scored = dict(enumerate(baseline_frames(method, sequences, offsets, config.seed)))
        scene_feats, image_feats = database, tiles[1]
    else:
        scored, count = {}, 0
        for i, frames in gen.frames.items():  # rows of the generated images' features, in file order
            scored[i], count = list(range(count, count + len(frames))), count + len(frames)
        scene_feats, image_feats = _encode_chunks(
            ([_load(p) for p in frames] for frames in gen.frames.values()),
            [encoders.scene_features, encoders.images])

    seq_ids = sorted(scored)
    tasks = {task: n for n, task in enumerate(dict.fromkeys(s.title or s.id for s in sequences))}
    task_feats = encoders.texts(list(tasks))
    step_texts = list(dict.fromkeys(t for i in seq_ids for t in sequences[i].prompts[1:]))
    step_feats = dict(zip(step_texts, encoders.texts(step_texts))) if step_texts else {}
    task_credit = metrics.task_credit([image_feats[scored[i]] for i in seq_ids], task_feats,
                                      [tasks[sequences[i].title or sequences[i].id] for i in seq_ids])
    rows, steps, scenes = [], [], []
    for i, task in zip(seq_ids, task_credit):
        seq, rows_of = sequences[i], scored[i]
        classes, targets = metrics.step_targets(seq.prompts[1:])
        step = metrics.zero_shot_credit(image_feats[rows_of], np.stack([step_feats[c] for c in classes]), targets)
        scene_c = metrics.scene_credit(scene_feats[rows_of], [seq.video or seq.key] * len(rows_of),
                                       [offsets[i]] * len(rows_of), database, videos)
        steps.extend(step)
        scenes.extend(scene_c)
        rows.append({"id": seq.id, "key": seq.key, "task": seq.title or seq.id, "video": seq.video or seq.key,
                     "step": step.round(4).tolist(), "scene": scene_c.round(4).tolist(), "task_correct": float(task)})
    result = {
        "method": method, "sequences": len(rows), "frames": len(steps),
        "step_faithfulness": _round(metrics.mean(steps)), "scene_consistency": _round(metrics.mean(scenes)),
        "task_faithfulness": _round(metrics.mean(task_credit)), "tasks": len(tasks),
        "tasks_from_id": sum(1 for s in sequences if not s.title), "models": encoders.labels,
        "offline": encoders.offline, "failed": len(gen.failed) if gen else 0,
        "missing": len(sequences) - len(rows) - (len(gen.failed) if gen else 0),
    }
    if gen and gen.failed:
        result["failed_records"] = gen.failed
    return result, rows


def _load(path: Path) -> Image.Image:
    with Image.open(path) as image:
        return image.convert("RGB")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
