"""`vi train captioner`'s data and parameter groups: the JSONL that `vi captioner-data` writes, as the
datasets TRL's vision trainers take, and the split of a VLM's weights into vision encoder vs LLM + projector.

Records (one a line, TRL's conversational vision format): `images` (paths relative to the file's folder),
`prompt` ([{role: user, content: [{type: image} x len(images), {type: text, text}]}]), and `completion` (SFT)
or `chosen` + `rejected` (DPO), each [{role: assistant, content: [{type: text, text}]}]; `split` is train or
heldout. Images stay paths in the dataset (datasets' Image feature decodes them when a batch is collated), so
a large set is not held in memory as pixels; or, with `CachedImages` (--cache-images), each file is decoded
once and kept.
"""

from __future__ import annotations

import json
from pathlib import Path

from vi.core.config import check_choice

METHOD_KEYS = {"sft": ("completion",), "dpo": ("chosen", "rejected")}
TRAIN, HELDOUT = "train", "heldout"
# Parameter names of the vision encoders of the supported families (LLaVA-OneVision's SigLIP, Qwen2-VL's
# ViT, Idefics3/SmolVLM's SigLIP); Qwen2-VL's patch merger sits inside `visual` but is its projector.
VISION_PARTS = (".vision_tower.", ".visual.", ".vision_model.")
PROJECTOR_PARTS = (".visual.merger.",)


def read_records(path: Path, method: str, split: str | None) -> list[dict]:
    """The records of `path` for `method` whose `split` is `split` (None: all), checked, with their images as
    absolute paths. A bad line is a ValueError naming the file and line."""
    check_choice("--method", method, METHOD_KEYS)
    base = path.parent
    out = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON ({exc})") from None
            if split is not None and record.get("split", TRAIN) != split:
                continue
            out.append(_checked(record, method, base, where))
    return out


def _checked(record: dict, method: str, base: Path, where: str) -> dict:
    missing = [key for key in ("images", "prompt", *METHOD_KEYS[method]) if key not in record]
    if missing:
        other = "dpo" if method == "sft" else "sft"
        hint = f" (a file for --method {other}?)" if all(k in record for k in METHOD_KEYS[other]) else ""
        raise ValueError(f"{where}: no {', '.join(missing)}{hint}")
    images = [str(base / p) for p in record["images"]]
    placeholders = sum(part.get("type") == "image" for turn in record["prompt"] for part in turn["content"])
    if placeholders != len(images):
        raise ValueError(f"{where}: the prompt has {placeholders} image parts for {len(images)} images")
    absent = [p for p in images if not Path(p).is_file()]
    if absent:
        raise ValueError(f"{where}: image {absent[0]} does not exist (paths are relative to {base})")
    # Only what the trainers read: the rest (id, video, kind...) would make Arrow columns for nothing.
    return {"images": images, "prompt": _uniform(record["prompt"]),
            **{key: _uniform(record[key]) for key in METHOD_KEYS[method]}}


def _uniform(turns: list[dict]) -> list[dict]:
    # Arrow needs one struct type per column: every part gets a `text` (None for an image part).
    return [{"role": t["role"], "content": [{"type": p["type"], "text": p.get("text")} for p in t["content"]]}
            for t in turns]


def to_dataset(records: list[dict], decode: bool = True):
    """A datasets.Dataset of `records`, images decoded lazily (RGB) when read; `decode` False: images stay
    path strings, which `CachedImages` decodes."""
    import datasets

    datasets.disable_progress_bars()  # its "Casting the dataset" bars: noise beside the Trainer's own
    table = datasets.Dataset.from_list(records)
    if not decode:
        return table
    return table.cast_column("images", datasets.List(datasets.Image(mode="RGB")))


def decode_image(path: str):
    """The image file at `path` as the trainers get it from datasets' Image(mode="RGB") feature when nothing
    is cached: loaded, turned upright by its EXIF orientation, RGB (a PIL image)."""
    import datasets

    return datasets.Image(mode="RGB").decode_example({"path": path, "bytes": None})


class CachedImages:
    """`vi train captioner --cache-images`: wraps TRL's vision collator; the records reach it with image paths
    (a dataset of `to_dataset(..., decode=False)`), replaced here by the decoded images, each distinct file
    decoded once (`decode_image`) and then kept in memory for the rest of the run: width x height x 3 bytes a
    frame (0.7 MB at 640x360, 6.2 MB at 1920x1080), in each training process. The collator still runs the
    processor (resizing, tiling, normalising) on every batch: it takes a batch's images and text together."""

    def __init__(self, collator):
        self.collator = collator
        self.images: dict[str, object] = {}

    def __call__(self, examples: list[dict]):
        return self.collator([{**e, "images": [self.image(p) for p in e["images"]]} for e in examples])

    def image(self, path: str):
        image = self.images.get(path)
        if image is None:
            image = self.images[path] = decode_image(path)
        return image


def load_split(data: Path, val: Path | None, method: str, decode: bool = True):
    """(train, held-out) datasets: the held-out one is --val's records (all of them), else `data`'s heldout
    split; None when there is none. `decode` False: images stay path strings (for `CachedImages`)."""
    train = read_records(data, method, TRAIN)
    if not train:
        raise ValueError(f"{data}: no records of split {TRAIN!r} for --method {method}")
    heldout = read_records(val, method, None) if val is not None else read_records(data, method, HELDOUT)
    return to_dataset(train, decode), (to_dataset(heldout, decode) if heldout else None)


def is_vision(name: str) -> bool:
    """Whether parameter `name` belongs to the vision encoder (works under peft's `base_model.model.` too)."""
    name = "." + name
    return any(p in name for p in VISION_PARTS) and not any(p in name for p in PROJECTOR_PARTS)


def param_groups(model, lr: float, vision_lr: float, weight_decay: float, decay_names: set[str]) -> list[dict]:
    """AdamW groups: vision encoder at `vision_lr`, everything else trainable (LLM, projector) at `lr`, each
    with and without weight decay (biases and norms get none, as transformers' Trainer does). Each group is
    named so a test or a resumed optimizer can tell them apart."""
    groups = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        part = "vision" if is_vision(name) else "llm"
        decay = name in decay_names
        key = f"{part}{'' if decay else '_no_decay'}"
        groups.setdefault(key, {"name": key, "params": [], "lr": vision_lr if part == "vision" else lr,
                                "weight_decay": weight_decay if decay else 0.0})["params"].append(param)
    order = ("llm", "llm_no_decay", "vision", "vision_no_decay")  # fixed: a checkpoint's optimizer state matches
    return [groups[key] for key in order if key in groups]
