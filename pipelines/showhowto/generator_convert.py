"""Make a ShowHowTo generator folder from real weights a user has locally.

`from_text_to_video(SRC, CLIP_VISION, DST)`: a diffusers text-to-video pipeline folder whose U-Net is a
`UNet3DConditionModel` (ModelScope's `ali-vilab/text-to-video-ms-1.7b`: SD-style VAE, OpenCLIP-H
text encoder as `CLIPTextModel`, spatial + temporal attention) plus a transformers
`CLIPVisionModelWithProjection` folder (e.g. `laion/CLIP-ViT-H-14-laion2B-s32B-b79K`). The U-Net's
first convolution is widened to take I_0's latent too: the new input channels start at zero, so until
trained the U-Net ignores I_0's latent (InstructPix2Pix's initialisation); the image-token projection is
new and trained with the U-Net.

    python -m vi.pipelines.showhowto.generator_convert SRC CLIP_VISION DST [--image-size 256]

DynamiCrafter's own checkpoints (lvdm format: `model.diffusion_model.*`, OpenCLIP text and image
encoders, a 16-token resampler) use another temporal block than diffusers' UNet3DConditionModel, so
their U-Net weights do not map one to one; see docs/showhowto.md for what carries over.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from vi.pipelines.showhowto.generator_model import GeneratorConfig, HFTokenizer, ImageTokens, Parts, save_parts


def widen_conv_in(unet) -> None:
    """Double the U-Net's input channels; the added ones (I_0's latent) start at zero weight."""
    old = unet.conv_in
    new = torch.nn.Conv2d(old.in_channels * 2, old.out_channels, old.kernel_size, old.stride, old.padding)
    with torch.no_grad():
        new.weight.zero_()
        new.weight[:, :old.in_channels] = old.weight
        new.bias.copy_(old.bias)
    unet.conv_in = new
    unet.register_to_config(in_channels=old.in_channels * 2)


def from_text_to_video(source: Path, clip_vision: Path, target: Path, image_size: int = 256,
                       image_tokens: int = 16) -> Path:
    from diffusers import AutoencoderKL, DDPMScheduler, UNet3DConditionModel
    from transformers import CLIPTextModel, CLIPTokenizer, CLIPVisionModelWithProjection

    source, target = Path(source), Path(target)
    for part in ("unet", "vae", "text_encoder", "tokenizer", "scheduler"):
        if not (source / part).is_dir():
            raise ValueError(f"{source}: no {part}/ folder; give a diffusers text-to-video pipeline folder (e.g. "
                             "`hf download ali-vilab/text-to-video-ms-1.7b` then its snapshot folder)")
    unet = UNet3DConditionModel.from_pretrained(source / "unet")
    widen_conv_in(unet)
    image_encoder = CLIPVisionModelWithProjection.from_pretrained(clip_vision)
    tokenizer = CLIPTokenizer.from_pretrained(source / "tokenizer")
    config = GeneratorConfig(image_size=image_size, text_tokens=tokenizer.model_max_length,
                             image_tokens=image_tokens, tokenizer="folder",
                             note=f"from {source.name} (U-Net input widened for I_0) and {Path(clip_vision).name}; "
                                  "image tokens untrained")
    parts = Parts(unet=unet, vae=AutoencoderKL.from_pretrained(source / "vae"),
                  text_encoder=CLIPTextModel.from_pretrained(source / "text_encoder"), image_encoder=image_encoder,
                  image_proj=ImageTokens(image_encoder.config.projection_dim, unet.config.cross_attention_dim,
                                         image_tokens),
                  scheduler=DDPMScheduler.from_pretrained(source / "scheduler"),
                  tokenizer=HFTokenizer(tokenizer, config.text_tokens), config=config)
    save_parts(parts, target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a diffusers text-to-video pipeline folder")
    parser.add_argument("clip_vision", type=Path, help="a transformers CLIPVisionModelWithProjection folder")
    parser.add_argument("target", type=Path)
    parser.add_argument("--image-size", type=int, default=256)
    args = parser.parse_args()
    print(from_text_to_video(args.source, args.clip_vision, args.target, args.image_size))


if __name__ == "__main__":
    main()
