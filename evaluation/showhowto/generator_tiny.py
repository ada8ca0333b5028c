"""A tiny ShowHowTo generator and a task it can learn on a CPU, for the tests, `make
showhowto-generator` and the benchmark. No diffusion, CLIP or DINOv2 weights reach these machines.

`build_tiny(DIR)`: the real classes (UNet3DConditionModel, AutoencoderKL, CLIPTextModel,
CLIPVisionModelWithProjection, ImageProjection, DDPMScheduler) on tiny random configurations,
the VAE included. A random VAE does not give a frame's colours back (decode(encode(x)) is a
fixed distortion of x), so the colour task reads generated frames against the palette's frames
passed through the same VAE (`vae_references`): what a perfect generator would give.

The colour task (`make_colour_dataset`): every sequence is a background colour B and a centred
square whose colour changes at every step. The step prompt names the square's colour ("a red
square"); B is named by no prompt and must come from the input image. So a model that follows the
per-frame prompts and keeps the scene paints frame i's square in the colour of prompt i on B.
`colour_scores` reads that back from the pixels.

    python -m vi.evaluation.showhowto.generator_tiny model DIR [--size 32]
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
TEXT_TOKENS = 8  # "a yellow square" is 5 tokens with CLIP's start and end


def build_tiny(folder: Path, size: int = 32, seed: int = 0) -> Path:
    from diffusers import AutoencoderKL, DDPMScheduler, UNet3DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPVisionConfig, CLIPVisionModelWithProjection

    from vi.pipelines.showhowto.generator_model import GeneratorConfig, ImageTokens, Parts, save_parts

    torch.manual_seed(seed)
    width, image_tokens = 32, 2
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(16, 32), layers_per_block=1,
                        latent_channels=4, norm_num_groups=8, sample_size=size)
    set_latent_scale(vae, size, seed)
    unet = UNet3DConditionModel(sample_size=size // 2, in_channels=8, out_channels=4,
                                down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
                                up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"), block_out_channels=(16, 32),
                                layers_per_block=1, norm_num_groups=8, cross_attention_dim=width,
                                attention_head_dim=8)
    text = CLIPTextModel(CLIPTextConfig(vocab_size=49408, hidden_size=width, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        max_position_embeddings=TEXT_TOKENS, bos_token_id=49406,
                                        eos_token_id=49407, pad_token_id=0))
    image = CLIPVisionModelWithProjection(CLIPVisionConfig(image_size=size, patch_size=8, hidden_size=width,
                                                           intermediate_size=64, num_hidden_layers=2,
                                                           num_attention_heads=4, projection_dim=width))
    scheduler = DDPMScheduler(num_train_timesteps=1000, beta_schedule="scaled_linear", beta_start=0.00085,
                              beta_end=0.012, prediction_type="epsilon", clip_sample=False)
    config = GeneratorConfig(image_size=size, text_tokens=TEXT_TOKENS, image_tokens=image_tokens, max_frames=16,
                             tokenizer="open_clip",
                             sample_posterior=False,
                             note=f"tiny random (seed {seed}), VAE included: not a pretrained model")
    parts = Parts(unet=unet, vae=vae, text_encoder=text, image_encoder=image,
                  image_proj=ImageTokens(width, width, image_tokens), scheduler=scheduler, tokenizer=None,
                  config=config)
    save_parts(parts, Path(folder))
    return Path(folder)


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


def set_latent_scale(vae, size: int, seed: int) -> None:
    """`scaling_factor` = 1 / the latents' standard deviation over colour-block images, as Stable
    Diffusion's VAE was given its 0.18215: the diffusion then starts from unit-variance latents."""
    with torch.no_grad():
        latents = vae.encode(colour_blocks(64, size, np.random.default_rng(seed))).latent_dist.mean
    vae.register_to_config(scaling_factor=float(1 / latents.std()))


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


def vae_references(generator, size: int) -> dict[tuple[str, str], np.ndarray]:
    """Every (background, square) frame of the palette through the generator's VAE and back, uint8:
    what the model would give if it generated the exact latents of the frame it should."""
    keys = [(b, s) for b in BACKGROUNDS for s in SQUARES]
    frames = torch.stack([torch.from_numpy(np.asarray(colour_frame(b, s, size), np.float32)).permute(2, 0, 1)
                          for b, s in keys]) / 127.5 - 1
    with torch.no_grad():
        latents = generator.sample_latents(generator.latent_moments(frames.to(generator.device)))
        decoded = generator.decode(latents)
    pixels = ((decoded.float().cpu().permute(0, 2, 3, 1) + 1) * 127.5).round().clamp(0, 255).numpy()
    return dict(zip(keys, pixels))


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
    parser.add_argument("--size", type=int, default=32)
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
