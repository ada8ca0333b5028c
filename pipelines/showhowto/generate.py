"""`vi generate`: ShowHowTo's generator on records `{image, prompts: [tau_0, tau_1, ..., tau_n]}`, n
images out, one per step, plus a strip.

tau_0 describes the input image (the release's prompt files give one; the paper found a free-form
description better than "an image"), tau_1..tau_n are the steps. The model denoises n + 1 frames,
frame 0 being its rendering of the input; `generated.frames` are frames 1..n, and the strip is the
input image followed by them.

Output per record, written whole or not at all (a hidden folder renamed into place):
`OUT/<key>/step01.jpg ...` and `OUT/<key>/strip.jpg`; the record gains `generated = {frames, strip,
seed, steps, guidance, eta, model}` (and `official` with --official-names). The seed of a record is
(--seed, id), and each record has its own noise generator, so its images do not depend on its batch,
shard or a resume; on a CPU they are the release's predict.py images after `torch.manual_seed(seed)`.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.config import internal, option
from vi.core.errors import RecordError
from vi.core.records import Record
from vi.core.seeding import record_seed
from vi.pipelines.showhowto.export_writers import safe_key

if TYPE_CHECKING:  # numpy and PIL, like torch, are imported where images are made
    from PIL import Image

STAGE = "generate"


def check_model(model: Path):
    """A release file (or DynamiCrafter's checkpoint), a vi train showhowto checkpoint or run; checked before
    any record is read."""
    from vi.core.errors import ModelNotAvailable
    from vi.pipelines.showhowto.generator_model import resolve_source

    try:
        resolve_source(Path(model))
    except FileNotFoundError as exc:
        raise ModelNotAvailable(f"--model {model}: {exc}; get the release's showhowto_2to8steps.pt (vi models "
                                "lists where), train one with vi train showhowto, or make the tiny one (python -m "
                                "vi.evaluation.showhowto.generator_tiny model DIR)") from None
    return Path(model)


def check_model_config(path: Path | None) -> Path | None:
    """An lvdm YAML, read now: another architecture is exit 2 before any record."""
    from vi.pipelines.showhowto.generator_model import read_spec

    if path is not None:
        read_spec(Path(path))
    return path


@dataclass(frozen=True, kw_only=True)
class GenerateConfig:
    """The options of `vi generate` (its inputs, -i, --prompt-file or --dataset, are the command's).
    The defaults are the release's predict.py: 50 DDIM steps, eta 1.0, guidance 7.5."""

    model: Path = option(parse=check_model, show_default=False, help=(
        "The generator: a release file (showhowto_2to8steps.pt; DynamiCrafter's .ckpt), a vi train showhowto "
        "checkpoint, or a run (its newest checkpoint)."))
    model_config: Path | None = option(None, parse=check_model_config, exists=True, dir_okay=False, help=(
        "The model's lvdm config (YAML, the release's layout) when it is not the release's 256 one; default: "
        "NAME.yaml beside NAME.pt, else the built-in 256 config."))
    out: Path = option(file_okay=False, show_default=False, help="Folder for the images.")
    steps: int = option(50, min=1, max=1000, help="DDIM steps.")
    guidance: float = option(7.5, hidden_aliases=("--text-guidance",), help=(
        "Classifier-free guidance scale: the prompts and the scene's image tokens against empty prompts and a "
        "blank image (1: no guidance, one model call per step)."))
    eta: float = option(1.0, min=0.0, help="DDIM's eta (1.0, the release's; 0: deterministic given the initial "
                                           "noise).")
    official_names: bool = option(False, flag="--official-names", help=(
        "Also write predict.py's output: OUT/{idx:05d}.jpg, every frame the model made side by side (its "
        "rendering of the scene first), idx the line's place in --prompt-file (else the record's key)."))
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


def load_generator(model: Path, model_config: Path | None, device: str, dtype: str):
    """The generator on the best device, once per process: fp32 on a CPU; on a GPU the U-Net, encoders and
    Resampler in the placement's dtype, the autoencoder in fp32."""
    from vi.core.devices import resolve_placement
    from vi.core.errors import ModelNotAvailable
    from vi.core.models.cache import load_once
    from vi.pipelines.showhowto.generator_model import load, resolve_source

    placement = resolve_placement(device, dtype)
    source = resolve_source(Path(model), model_config)

    def build():
        try:
            generator = load(source)
        except ValueError as exc:
            raise ModelNotAvailable(str(exc)) from None
        return generator.place(placement.device, placement.torch_dtype())

    return load_once(("showhowto-generator", str(source), placement), build)


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
    """The scene as predict.py prepares it: the centred square (integer halves), resized to the model's
    size with PIL's default filter (bicubic)."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image = image.convert("RGB")
    except (OSError, ValueError) as exc:
        raise RecordError("unreadable_image", f"field `image`: {path} cannot be read as an image ({exc})") from None
    w, h = image.size
    if w > h:
        image = image.crop(((w - h) // 2, 0, h + (w - h) // 2, h))
    elif h > w:
        image = image.crop((0, (h - w) // 2, w, w + (h - w) // 2))
    return image.resize((size, size))


def generate_batch(records: list[Record], config: GenerateConfig) -> list[dict | Exception]:
    """One result per record; records of one length share model calls."""
    import numpy as np
    import torch
    from PIL import Image

    from vi.pipelines.showhowto.generator import Sampling, generate, to_uint8

    generator = load_generator(config.model, config.model_config, config.device, config.dtype)
    size = generator.spec.image_size
    results: list[dict | Exception] = [None] * len(records)  # type: ignore[list-item]
    ready: dict[int, list[tuple[int, Image.Image, list[str]]]] = {}
    for i, record in enumerate(records):
        try:
            path, prompts = check_record(record, generator.spec.max_frames)
            image = read_image(path, size)  # before its group exists: a bad line leaves no empty group behind
            ready.setdefault(len(prompts), []).append((i, image, prompts))
        except RecordError as exc:
            results[i] = exc
    sampling = Sampling(config.steps, config.guidance, config.eta)
    for group in ready.values():
        pixels = torch.stack([torch.from_numpy(np.asarray(image, np.float32)).permute(2, 0, 1)
                              for _, image, _ in group])
        seeds = [record_seed(config.seed, records[i]["id"]) for i, _, _ in group]
        noise = [torch.Generator().manual_seed(s) for s in seeds]
        frames = generate(generator, pixels / (255 / 2) - 1, [p for _, _, p in group], sampling, noise)
        for (i, image, _), seed, sequence in zip(group, seeds, frames):
            images = [Image.fromarray(f) for f in to_uint8(sequence)]
            written = write_sequence(config, records[i], image, images)
            results[i] = {"generated": {**written, "seed": seed, "steps": config.steps, "guidance": config.guidance,
                                        "eta": config.eta, "model": str(config.model)}}
    return results


def write_sequence(config: GenerateConfig, record: Record, scene: Image.Image, images: list[Image.Image]) -> dict:
    """OUT/<key>/stepNN.jpg + strip.jpg (the scene, then the steps), renamed into place whole; with
    --official-names also predict.py's strip of every frame the model made, OUT/{idx:05d}.jpg."""
    import numpy as np
    from PIL import Image

    from vi.pipelines.showhowto.export import make_strip

    key = safe_key(str(record["id"]))
    final, partial = config.out / key, config.out / f".{key}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    steps = images[1:]  # frame 0 is the model's rendering of the scene
    names = [f"step{i:02d}.jpg" for i in range(1, len(steps) + 1)]
    for name, image in zip(names, steps):
        image.save(partial / name, quality=config.jpeg_quality)
    make_strip([scene, *steps], scene.height).save(partial / "strip.jpg", quality=config.jpeg_quality)
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    written = {"frames": [str(final / n) for n in names], "strip": str(final / "strip.jpg")}
    if config.official_names:
        index = record.get("prompt_index")
        name = f"{index:05d}.jpg" if isinstance(index, int) else f"{key}.jpg"
        official = config.out / name
        tmp = config.out / f".{name}.partial.jpg"
        Image.fromarray(np.concatenate([np.asarray(i) for i in images], axis=1)).save(tmp)
        tmp.replace(official)  # PIL's default JPEG quality, as predict.py saves
        written["official"] = str(official)
    return written
