"""`vi generate`: ShowHowTo's generator on records `{image, prompts: [tau_0, tau_1, ..., tau_n]}`, n
images out, one per step, plus a strip.

tau_0 describes the input image (the release's prompt files give one; the paper found a free-form
description better than "an image"), tau_1..tau_n are the steps. The model denoises n + 1 frames,
frame 0 being its rendering of the input; `generated.frames` are frames 1..n, and the strip is the
input image followed by them.

Output per record, written whole or not at all (a hidden folder renamed into place):
`OUT/<key>/step01.jpg ...` and `OUT/<key>/strip.jpg`; the record gains `generated = {frames, strip,
seed, steps, guidance: {text, image}, model}`. The seed of a record is (--seed, id), and each
record has its own noise generator, so its images do not depend on its batch, shard or a resume.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from vi.core.config import internal, option
from vi.core.errors import RecordError
from vi.core.records import Record
from vi.core.seeding import record_seed
from vi.pipelines.showhowto.export_writers import safe_key

STAGE = "generate"


def check_model(model: Path) -> Path:
    """A generator folder or training run (its newest checkpoint), before any record is read."""
    from vi.core.errors import ModelNotAvailable
    from vi.pipelines.showhowto.generator_model import CONFIG
    from vi.pipelines.showhowto.train_generator import latest_checkpoint

    folder = Path(model)
    found = latest_checkpoint(folder) if folder.is_dir() else None
    if found is None or not (found / CONFIG).is_file():
        raise ModelNotAvailable(f"--model {model}: not a ShowHowTo generator (no {CONFIG}) nor a vi train showhowto "
                                "run with a checkpoint; train one, build the tiny one (python -m "
                                "vi.evaluation.showhowto.generator_tiny model DIR), or convert DynamiCrafter's "
                                "weights (docs/showhowto.md)")
    return found


@dataclass(frozen=True, kw_only=True)
class GenerateConfig:
    """The options of `vi generate` (its inputs, -i, --prompt-file or --dataset, are the command's)."""

    # From the command line, the checkpoint check_model finds: a bad --model fails before any record.
    model: Path = option(parse=check_model, show_default=False, help=(
        "A generator folder (showhowto.json + unet/ vae/ ...) or a vi train showhowto run (its newest checkpoint)."))
    out: Path = option(file_okay=False, show_default=False, help="Folder for the images.")
    steps: int = option(50, min=1, help="DDIM steps.")
    text_guidance: float = option(7.5, help="Guidance scale of the prompts.")
    image_guidance: float = option(1.0, help="Guidance scale of the scene image (1: as is).")
    eta: float = option(0.0, min=0.0, help="DDIM's eta (0: deterministic given the initial noise).")
    batch_size: int = option(4, min=1, help="Records per model call (records of one length are batched together).")
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0
    jpeg_quality: int = internal(95)


def dataset_records(root: Path, inputs: Path, size: int | None = None) -> list[Record]:
    """A `vi export showhowto` dataset as generate's input: each sequence's first frame, saved under
    `inputs`, is the scene; its prompts are tau_0..tau_n; its id, key, title and video come along
    (vi eval showhowto matches generated sequences to the test set by them)."""
    from vi.pipelines.showhowto.generator_data import read_dataset

    inputs.mkdir(parents=True, exist_ok=True)
    records = []
    for sequence in read_dataset(root):
        path = inputs / f"{sequence.key}.png"
        if not path.is_file():
            sequence.tiles(size)[0].save(path)
        record = {"id": sequence.id, "key": sequence.key, "image": str(path), "prompts": sequence.prompts,
                  "title": sequence.title, "video": sequence.video}
        if isinstance(sequence.strip, Path):  # the source strip, for vi view (a tar member has no path)
            record["source_strip"] = str(sequence.strip)
        records.append(record)
    return records


def load_generator(model: Path, device: str, dtype: str):
    """The generator on the best device, once per process (weights in fp32 on CPU; on a GPU the U-Net
    and the image projection in the placement's dtype, the VAE and encoders as saved)."""
    from vi.core.devices import resolve_placement
    from vi.core.models.cache import load_once
    from vi.pipelines.showhowto.generator import ShowHowToGenerator
    from vi.pipelines.showhowto.generator_model import load_parts

    placement = resolve_placement(device, dtype)

    def build():
        generator = ShowHowToGenerator(load_parts(Path(model))).to(placement.device)
        if placement.kind != "cpu":
            generator.unet.to(placement.torch_dtype())
            generator.image_proj.to(placement.torch_dtype())
        return generator.eval()

    return load_once(("showhowto-generator", str(Path(model).resolve()), placement), build)


def check_record(record: Record, max_frames: int) -> tuple[Path, list[str]]:
    image, prompts = record.get("image"), record.get("prompts")
    if not isinstance(image, str) or not image:
        raise RecordError("missing_field", "field `image` must be the path of the scene image")
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise RecordError("missing_field", "field `prompts` must be a list of texts: the input frame's "
                                           "description, then one per step")
    if len(prompts) < 2:
        raise RecordError("too_few_prompts", f"field `prompts` has {len(prompts)} text(s): give the input frame's "
                                             "description and at least one step")
    if len(prompts) > max_frames:
        raise RecordError("too_many_prompts", f"field `prompts` has {len(prompts)} texts; this model takes at most "
                                              f"{max_frames} (the input frame and {max_frames - 1} steps)")
    if any(not p.strip() for p in prompts[1:]):
        raise RecordError("empty_prompt", "field `prompts` has an empty step text")
    return Path(image), prompts


def read_image(path: Path, size: int) -> Image.Image:
    try:
        with Image.open(path) as image:
            return ImageOps.fit(image.convert("RGB"), (size, size), Image.BICUBIC)
    except (OSError, ValueError) as exc:
        raise RecordError("unreadable_image", f"field `image`: {path} cannot be read as an image ({exc})") from None


def generate_batch(records: list[Record], config: GenerateConfig) -> list[dict | Exception]:
    """One result per record; records of one length share model calls."""
    import torch

    from vi.pipelines.showhowto.generator import Guidance

    generator = load_generator(config.model, config.device, config.dtype)
    size = generator.config.image_size
    results: list[dict | Exception] = [None] * len(records)  # type: ignore[list-item]
    ready: dict[int, list[tuple[int, Image.Image, list[str]]]] = {}
    for i, record in enumerate(records):
        try:
            path, prompts = check_record(record, generator.config.max_frames)
            image = read_image(path, size)  # before its group exists: a bad line leaves no empty group behind
            ready.setdefault(len(prompts), []).append((i, image, prompts))
        except RecordError as exc:
            results[i] = exc
    guidance = Guidance(config.steps, config.text_guidance, config.image_guidance, config.eta)
    for group in ready.values():
        pixels = torch.stack([torch.from_numpy(np.asarray(image, np.float32)).permute(2, 0, 1) for _, image, _ in group])
        seeds = [record_seed(config.seed, records[i]["id"]) for i, _, _ in group]
        noise = [torch.Generator(device=generator.device).manual_seed(s) for s in seeds]
        frames = generator.generate((pixels / 127.5 - 1).to(generator.device), [p for _, _, p in group], guidance,
                                    noise)
        for (i, image, _), seed, sequence in zip(group, seeds, frames):
            images = [Image.fromarray(f) for f in to_uint8(sequence[1:])]
            results[i] = {"generated": {**write_sequence(config, records[i]["id"], image, images), "seed": seed,
                                        "steps": config.steps,
                                        "guidance": {"text": config.text_guidance, "image": config.image_guidance},
                                        "model": str(config.model)}}
    return results


def to_uint8(frames) -> list[np.ndarray]:
    """(T, 3, H, W) frames in [-1, 1] -> T uint8 (H, W, 3) arrays."""
    pixels = ((frames.float().cpu().permute(0, 2, 3, 1) + 1) * 127.5).round().clamp(0, 255)
    return list(pixels.numpy().astype(np.uint8))


def write_sequence(config: GenerateConfig, record_id: str, scene: Image.Image, images: list[Image.Image]) -> dict:
    """OUT/<key>/stepNN.jpg + strip.jpg, renamed into place whole."""
    from vi.pipelines.showhowto.export import make_strip

    key = safe_key(str(record_id))
    final, partial = config.out / key, config.out / f".{key}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    names = [f"step{i:02d}.jpg" for i in range(1, len(images) + 1)]
    for name, image in zip(names, images):
        image.save(partial / name, quality=config.jpeg_quality)
    make_strip([scene, *images], scene.height).save(partial / "strip.jpg", quality=config.jpeg_quality)
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    return {"frames": [str(final / n) for n in names], "strip": str(final / "strip.jpg")}
