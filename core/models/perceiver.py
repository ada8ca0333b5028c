"""A Perceiver resampler (Flamingo, Alayrac et al. 2022, Sec. 2.1 and App. A.1.1), as the
projector of a frozen encoder's tokens into a frozen LLM's input space.

Many input tokens (frames x tokens per frame) become `latents` tokens: learned latent queries
cross-attend to the inputs and to themselves, layer after layer, then a linear head maps them
to the LLM's width. A learned embedding per frame index is added first (Flamingo's time
embeddings), so the latents can tell the frames' order apart; an encoder whose tokens are
already spatio-temporal gives one "frame".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ProjectorConfig:
    input_dim: int  # width of the encoder's tokens
    output_dim: int  # width of the LLM's input embeddings
    latents: int = 32  # tokens per video in the LLM's input (StepDiff: 32)
    layers: int = 2  # Perceiver layers (StepDiff: 2)
    dim: int = 0  # the Perceiver's own width; 0: the encoder's
    heads: int = 8
    ff_mult: int = 4
    max_frames: int = 64  # frame-index embeddings learned

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def width(self) -> int:
        return self.dim or self.input_dim


class PerceiverAttention(nn.Module):
    """Latents attend to [inputs; latents] (Flamingo's keys and values include the latents)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        if dim % heads:
            raise ValueError(f"the Perceiver's width {dim} is not a multiple of its {heads} heads")
        self.heads = heads
        self.norm_inputs, self.norm_latents = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_kv = nn.Linear(dim, 2 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, inputs: torch.Tensor, latents: torch.Tensor) -> torch.Tensor:
        inputs, latents = self.norm_inputs(inputs), self.norm_latents(latents)
        batch, count, dim = latents.shape
        q = self.to_q(latents)
        k, v = self.to_kv(torch.cat([inputs, latents], dim=1)).chunk(2, dim=-1)

        def split(x):
            return x.reshape(batch, x.shape[1], self.heads, dim // self.heads).transpose(1, 2)

        attended = nn.functional.scaled_dot_product_attention(split(q), split(k), split(v))
        return self.out(attended.transpose(1, 2).reshape(batch, count, dim))


class PerceiverResampler(nn.Module):
    def __init__(self, config: ProjectorConfig):
        super().__init__()
        self.config = config
        width = config.width
        self.input_proj = nn.Identity() if width == config.input_dim else nn.Linear(config.input_dim, width)
        self.frame_embed = nn.Parameter(torch.zeros(config.max_frames, 1, width))
        self.latents = nn.Parameter(torch.randn(config.latents, width) * 0.02)
        self.blocks = nn.ModuleList()
        for _ in range(config.layers):
            ff = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, config.ff_mult * width, bias=False),
                               nn.GELU(), nn.Linear(config.ff_mult * width, width, bias=False))
            self.blocks.append(nn.ModuleList([PerceiverAttention(width, config.heads), ff]))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, config.output_dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(batch, frames, tokens per frame, input_dim) -> (batch, latents, output_dim)."""
        batch, frames = tokens.shape[:2]
        if frames > self.config.max_frames:
            raise ValueError(f"{frames} frames per video, more than the projector's {self.config.max_frames}")
        x = self.input_proj(tokens) + self.frame_embed[:frames]
        x = x.reshape(batch, -1, x.shape[-1])
        latents = self.latents.unsqueeze(0).expand(batch, -1, -1)
        for attention, ff in self.blocks:
            latents = latents + attention(x, latents)
            latents = latents + ff(latents)
        return self.head(self.norm(latents))
