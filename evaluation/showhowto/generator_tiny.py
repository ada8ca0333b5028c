"""A tiny ShowHowTo generator and a task it can learn on a CPU, for the tests, `make
showhowto-generator` and the benchmark. No diffusion, CLIP or DINOv2 weights reach these machines.

`build_tiny(DIR)`: the generator's real classes (DynamiCrafter's U-Net, the KL autoencoder, OpenCLIP's
encoders, the Resampler) on the tiny config tiny_model/tiny.yaml, random, written as a release file
(DIR/tiny.pt beside DIR/tiny.yaml). A random VAE does not give a frame's colours back (decode(encode(x)) is a
fixed distortion of x), so the colour task reads generated frames against the palette's frames
passed through the same VAE (`vae_references`): what a perfect generator would give.

The colour task (`make_colour_dataset`): every sequence is a background colour B and a centred
square whose colour changes at every step. The step prompt names the square's colour ("a red
square"); B is named by no prompt and must come from the input image. So a model that follows the
per-frame prompts and keeps the scene paints frame i's square in the colour of prompt i on B.
`colour_scores` reads that back from the pixels.

    python -m vi.evaluation.showhowto.generator_tiny model DIR [--size 16]
    python -m vi.evaluation.showhowto.generator_tiny colours DIR [--sequences 48] [--seed 0]
    python -m vi.evaluation.showhowto.generator_tiny steps SAMPLE_DIR > steps.jsonl

`steps` prints the four how-to samples (made in SAMPLE_DIR when absent) as step records with their
annotated steps and times, for vi align-frames | vi export showhowto: a dataset of real sample frames
for `make showhowto-generator` without the LLM stages (`make demo` shows those).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image

SQUARES = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40)}
BACKGROUNDS = {"black": (20, 20, 20), "white": (235, 235, 235), "purple": (150, 60, 160)}


TINY_CONFIG = Path(__file__).parent / "tiny_model"  # tiny.yaml (lvdm layout) and its OpenCLIP config


def build_tiny(folder: Path, size: int = 16, seed: int = 0, width: int = 32) -> Path:
    """A tiny random generator in the release's format: FOLDER/tiny.pt (a raw state dict, as
    showhowto_2to8steps.pt) beside FOLDER/tiny.yaml (its lvdm config, which vi reads for NAME.pt from
    NAME.yaml) and the OpenCLIP config it names. DynamiCrafter's classes at a few channels (the
    parity goldens' tiny_model/, with the text and cross-attention `width`: the goldens keep 8 to stay
    small, the colour task needs 32 to be learned in 1000 steps); frames of `size` px (a multiple of 4:
    the autoencoder downsamples 4x)."""
    import json

    import yaml

    from vi.pipelines.showhowto.generator_model import build, read_spec, save_release

    if size % 4:
        raise ValueError(f"size {size}: a multiple of 4")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load((TINY_CONFIG / "tiny.yaml").read_text())
    params = config["model"]["params"]
    params["image_size"] = [size // 4, size // 4]
    params["first_stage_config"]["params"]["ddconfig"]["resolution"] = size
    params["unet_config"]["params"]["context_dim"] = width
    params["image_proj_stage_config"]["params"]["output_dim"] = width
    clip = json.loads((TINY_CONFIG / "vi-tiny-clip.json").read_text())
    clip["text_cfg"].update(width=width, heads=max(2, width // 8))
    (folder / "vi-tiny-clip.json").write_text(json.dumps(clip, indent=1) + "\n")
    (folder / "tiny.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    torch.manual_seed(seed)
    model = build(read_spec(folder / "tiny.yaml"))
    with torch.no_grad():
        # A trained autoencoder's posterior is narrow; a random one's is not, and its draws would bury
        # the colours: the log-variance half of quant_conv is set to a constant -20 (std 4.5e-5).
        quant = model.first_stage_model.quant_conv
        half = quant.out_channels // 2
        quant.weight[half:] = 0
        quant.bias[half:] = -20.0
    set_latent_scale(model, folder / "tiny.yaml", size, seed)
    save_release(model, folder / "tiny.pt")
    return folder / "tiny.pt"


def colour_blocks(count: int, size: int, rng: np.random.Generator) -> torch.Tensor:
    """Random backgrounds with 1-3 random rectangles, (count, 3, size, size) in [-1, 1]."""
    images = np.empty((count, size, size, 3), np.float32)
    for i in range(count):
        images[i] = rng.uniform(0, 255, 3)
        for _ in range(rng.integers(1, 4)):
            x0, y0 = rng.integers(0, size - 4, 2)
            x1, y1 = x0 + rng.integers(4, size - x0 + 1), y0 + rng.integers(4, size - y0 + 1)
            images[i, y0:y1, x0:x1] = rng.uniform(0, 255, 3)
    return torch.from_numpy(images).permute(0, 3, 1, 2) / 127.5 - 1


def set_latent_scale(model, config: Path, size: int, seed: int) -> None:
    """`scale_factor` = 1 / the latents' standard deviation over colour-block images, as Stable
    Diffusion's VAE was given its 0.18215: the diffusion then starts from unit-variance latents."""
    import yaml

    with torch.no_grad():
        moments = model.latent_moments(colour_blocks(64, size, np.random.default_rng(seed)))
    scale = float(1 / moments[:, :moments.shape[1] // 2].std())
    data = yaml.safe_load(config.read_text())
    data["model"]["params"]["scale_factor"] = scale
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def colour_frame(background: str, square: str, size: int) -> Image.Image:
    frame = Image.new("RGB", (size, size), BACKGROUNDS[background])
    quarter = size // 4
    frame.paste(SQUARES[square], (quarter, quarter, size - quarter, size - quarter))
    return frame


def make_colour_dataset(root: Path, sequences: int = 48, size: int = 32, seed: int = 0,
                        lengths: tuple[int, int] = (3, 5)) -> Path:
    """The colour task in `vi export showhowto`'s layout: imgseqs/KEY.jpg strips, KEY.json sidecars,
    prompts.json. Frame 0's prompt describes the scene ("a red square"), as tau_0 does."""
    rng = random.Random(seed)
    folder = Path(root) / "imgseqs"
    folder.mkdir(parents=True, exist_ok=True)
    index = {}
    for n in range(sequences):
        background = list(BACKGROUNDS)[n % len(BACKGROUNDS)]
        colours = [rng.choice(list(SQUARES))]
        for _ in range(rng.randint(*lengths) - 1):
            colours.append(rng.choice([c for c in SQUARES if c != colours[-1]]))
        strip = Image.new("RGB", (size * len(colours), size))
        for i, colour in enumerate(colours):
            strip.paste(colour_frame(background, colour, size), (i * size, 0))
        key = f"colours{n:03d}"
        prompts = [f"a {c} square" for c in colours]
        strip.save(folder / f"{key}.jpg", quality=95)
        (folder / f"{key}.json").write_text(json.dumps({"id": key, "prompts": prompts, "video": key,
                                                         "title": f"squares on {background}"}))
        index[key] = prompts
    (Path(root) / "prompts.json").write_text(json.dumps(index))
    return Path(root)


def vae_references(model, size: int) -> dict[tuple[str, str], np.ndarray]:
    """Every (background, square) frame of the palette through the generator's autoencoder and back, uint8:
    what the model would give if it generated the exact latents of the frame it should."""
    from vi.pipelines.showhowto.generator import to_uint8

    keys = [(b, s) for b in BACKGROUNDS for s in SQUARES]
    frames = torch.stack([torch.from_numpy(np.asarray(colour_frame(b, s, size), np.float32)).permute(2, 0, 1)
                          for b, s in keys]) / 127.5 - 1
    with torch.no_grad():
        moments = model.latent_moments(frames.to(model.device))
        decoded = model.decode(model.sample_latents(moments, None))
    return dict(zip(keys, to_uint8(decoded)))


def colour_scores(frames: np.ndarray, squares: list[str], background: str,
                  references: dict[tuple[str, str], np.ndarray]) -> dict[str, float]:
    """frames (T, H, W, 3) uint8, each read as its nearest reference frame (pixel L2): the share whose
    square has the named colour, and whose background is the sequence's."""
    keys = list(references)
    stack = np.stack([references[k] for k in keys]).astype(np.float32)
    read = [keys[int(np.argmin(((stack - f.astype(np.float32)) ** 2).sum(axis=(1, 2, 3))))] for f in frames]
    return {"square": float(np.mean([s == want for (_, s), want in zip(read, squares)])),
            "background": float(np.mean([b == background for b, _ in read]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("model", "colours", "steps"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--sequences", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.what == "steps":
        from vi.evaluation.showhowto.align_quality import truth_records

        for record, _ in truth_records(args.folder):
            print(json.dumps(record))
    elif args.what == "model":
        print(build_tiny(args.folder, args.size, args.seed))
    else:
        print(make_colour_dataset(args.folder, args.sequences, args.size, args.seed))


if __name__ == "__main__":
    main()
