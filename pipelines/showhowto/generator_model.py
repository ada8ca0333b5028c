"""ShowHowTo's generator (Sec. 4): a latent video-diffusion model that turns a scene image I_0 and
per-frame prompts tau_0..tau_n into a sequence of images, one per step.

Built from library parts, as DynamiCrafter (its initialisation) is:
- `unet`: diffusers' `UNet3DConditionModel`, spatial and temporal attention interleaved. Its input
  is the noisy latent of every frame with I_0's latent concatenated on channels (so
  `in_channels = 2 x latent channels`).
- per-frame prompts: diffusers' video U-Nets repeat one prompt over all frames. Here the U-Net is
  given every frame's prompt tokens side by side, `[image tokens | tau_0 tokens | ... | tau_n
  tokens]`, and each *spatial* cross-attention gets `PerFrameCrossAttnProcessor`, which hands
  frame f the image tokens and its own tau_f tokens only. Temporal attention is untouched.
- image cross-attention tokens: a CLIP vision encoder's embedding of I_0 through diffusers'
  `ImageProjection` (trained with the U-Net), shared by every frame.
- `vae` (`AutoencoderKL`), `text_encoder` (`CLIPTextModel`), `image_encoder`
  (`CLIPVisionModelWithProjection`) are frozen; the noise schedule is a diffusers scheduler.

A model is a folder: `unet/ vae/ text_encoder/ image_encoder/ scheduler/` in diffusers /
transformers format, `image_proj/` and `showhowto.json` (this module's `GeneratorConfig`).
A training checkpoint holds only what training changes (`unet/`, `image_proj/`); its
`showhowto.json` names the folder with the frozen parts (`base`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import nn

CONFIG = "showhowto.json"
FROZEN = ("vae", "text_encoder", "image_encoder", "scheduler", "tokenizer")
TRAINED = ("unet", "image_proj")


@dataclass
class GeneratorConfig:
    image_size: int = 256  # frames are square: ShowHowTo's loader centre-crops every tile
    text_tokens: int = 77  # per prompt (CLIP's context)
    image_tokens: int = 16  # I_0's cross-attention tokens (DynamiCrafter's resampler gives 16)
    max_frames: int = 16  # the input frame plus at most 15 steps
    sample_posterior: bool = True  # VAE latents drawn from the posterior (SD, DynamiCrafter); False: its mean
    tokenizer: str = "folder"  # "folder": tokenizer/ beside the model; "open_clip": its bundled BPE
    base: str | None = None  # where the frozen parts are, when this folder holds only trained ones
    note: str = ""  # what the weights are (e.g. "tiny random, VAE fitted on colour blocks")

    def save(self, folder: Path) -> None:
        (folder / CONFIG).write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, folder: Path) -> GeneratorConfig:
        data = json.loads((folder / CONFIG).read_text())
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class PerFrameCrossAttnProcessor:
    """Spatial cross-attention where frame f sees `image_tokens` shared tokens and its own prompt.

    UNet3DConditionModel repeats the encoder states over frames (row b*F + f of the flattened
    batch is frame f of sample b), so each row holds every frame's prompt; this keeps row r's own
    `text_tokens` slice, then runs the usual attention."""

    def __init__(self, image_tokens: int, text_tokens: int):
        from diffusers.models.attention_processor import AttnProcessor2_0

        self.image_tokens, self.text_tokens = image_tokens, text_tokens
        self.inner = AttnProcessor2_0()

    def select(self, states: torch.Tensor) -> torch.Tensor:
        rows, tokens, dim = states.shape
        frames, left = divmod(tokens - self.image_tokens, self.text_tokens)
        if left or frames < 1:
            raise ValueError(f"cross-attention got {tokens} tokens: expected {self.image_tokens} image tokens "
                             f"plus {self.text_tokens} per frame")
        text = states[:, self.image_tokens:].reshape(rows, frames, self.text_tokens, dim)
        own = text[torch.arange(rows, device=states.device), torch.arange(rows, device=states.device) % frames]
        return torch.cat([states[:, :self.image_tokens], own], dim=1)

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None,
                 *args, **kwargs):
        if encoder_hidden_states is not None:
            encoder_hidden_states = self.select(encoder_hidden_states)
        return self.inner(attn, hidden_states, encoder_hidden_states, attention_mask, temb, *args, **kwargs)


def use_per_frame_prompts(unet, image_tokens: int, text_tokens: int) -> int:
    """Give every spatial cross-attention of `unet` its frame's prompt; returns how many."""
    processors = dict(unet.attn_processors)
    per_frame = PerFrameCrossAttnProcessor(image_tokens, text_tokens)
    count = 0
    for name in processors:
        if ".attentions." in name and name.endswith("attn2.processor"):  # not temp_attentions
            processors[name] = per_frame
            count += 1
    if not count:
        raise ValueError("the U-Net has no spatial cross-attention to give per-frame prompts to")
    unet.set_attn_processor(processors)
    return count


class ImageTokens(nn.Module):
    """diffusers' ImageProjection with its settings kept, so it saves and loads like the rest."""

    def __init__(self, image_embed_dim: int, cross_attention_dim: int, tokens: int):
        super().__init__()
        from diffusers.models.embeddings import ImageProjection

        self.settings = {"image_embed_dim": image_embed_dim, "cross_attention_dim": cross_attention_dim,
                         "tokens": tokens}
        self.proj = ImageProjection(image_embed_dim, cross_attention_dim, tokens)

    def forward(self, image_embeds: torch.Tensor) -> torch.Tensor:
        return self.proj(image_embeds)

    def save_pretrained(self, folder: Path) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self.settings) + "\n")
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(folder / "model.safetensors"))

    @classmethod
    def from_pretrained(cls, folder: Path) -> ImageTokens:
        from safetensors.torch import load_file

        module = cls(**json.loads((folder / "config.json").read_text()))
        module.load_state_dict(load_file(str(folder / "model.safetensors")))
        return module


class OpenClipTokenizer:
    """open_clip's bundled CLIP BPE (the vocabulary of OpenAI's CLIP text encoders), for models
    saved without a transformers tokenizer: no file to fetch."""

    def __init__(self, length: int):
        from open_clip.tokenizer import SimpleTokenizer

        self.inner, self.length = SimpleTokenizer(context_length=length), length

    def __call__(self, texts: list[str]) -> torch.Tensor:
        return self.inner(texts, context_length=self.length)


@dataclass
class Parts:
    unet: nn.Module
    vae: nn.Module
    text_encoder: nn.Module
    image_encoder: nn.Module
    image_proj: ImageTokens
    scheduler: object
    tokenizer: object
    config: GeneratorConfig


def _component(folder: Path, config: GeneratorConfig, name: str) -> Path:
    here = folder / name
    if here.exists() or config.base is None:
        return here
    return (folder / config.base / name).resolve()


def load_parts(folder: Path) -> Parts:
    """A model folder (or a training checkpoint, whose frozen parts are in its `base`)."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet3DConditionModel
    from transformers import CLIPTextModel, CLIPVisionModelWithProjection

    folder = Path(folder)
    if not (folder / CONFIG).is_file():
        raise ValueError(f"{folder}: not a ShowHowTo generator ({CONFIG} missing); make one with "
                         "`vi train showhowto` or see docs/showhowto.md on converting DynamiCrafter's weights")
    config = GeneratorConfig.load(folder)

    def part(name: str) -> str:
        return str(_component(folder, config, name))

    unet = UNet3DConditionModel.from_pretrained(part("unet"))
    use_per_frame_prompts(unet, config.image_tokens, config.text_tokens)
    if config.tokenizer == "open_clip":
        tokenizer = OpenClipTokenizer(config.text_tokens)
    else:
        from transformers import CLIPTokenizer

        tokenizer = HFTokenizer(CLIPTokenizer.from_pretrained(part("tokenizer")), config.text_tokens)
    return Parts(unet=unet, vae=AutoencoderKL.from_pretrained(part("vae")),
                 text_encoder=CLIPTextModel.from_pretrained(part("text_encoder")),
                 image_encoder=CLIPVisionModelWithProjection.from_pretrained(part("image_encoder")),
                 image_proj=ImageTokens.from_pretrained(Path(part("image_proj"))),
                 scheduler=DDPMScheduler.from_pretrained(part("scheduler")), tokenizer=tokenizer, config=config)


class HFTokenizer:
    def __init__(self, tokenizer, length: int):
        self.inner, self.length = tokenizer, length

    def __call__(self, texts: list[str]) -> torch.Tensor:
        return self.inner(texts, padding="max_length", max_length=self.length, truncation=True,
                          return_tensors="pt").input_ids


def save_parts(parts: Parts, folder: Path, names: tuple[str, ...] = FROZEN + TRAINED) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        if name == "tokenizer":
            if isinstance(parts.tokenizer, HFTokenizer):
                parts.tokenizer.inner.save_pretrained(folder / name)
            continue
        getattr(parts, name).save_pretrained(folder / name)
    parts.config.save(folder)
