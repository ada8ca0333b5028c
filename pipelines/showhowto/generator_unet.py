"""DynamiCrafter's 3D U-Net (the `lvdm` UNetModel ShowHowTo fine-tunes), written for vi with the
release's parameter names and shapes, so a release state dict loads as is (strict).

Frames travel as a flat batch `(b t) c h w` through 2D convolutions and spatial transformers;
temporal layers see `b c t h w`:
- `ResBlock`: GroupNorm-SiLU-conv, the timestep embedding added, GroupNorm-SiLU-dropout-conv, a
  skip; then, when `temporal_conv`, a `TemporalConvBlock` (four 3x1x1 Conv3d over time, residual).
- `SpatialTransformer`: self-attention, then cross-attention on the frame's own prompt tokens (the
  first `text_context_len` of its context row) plus, with `image_cross_attention`, a second
  attention on the image tokens (the rest of the row) added with weight `tanh(alpha) + 1`.
- `TemporalTransformer`: self-attention over the frames at each pixel (twice: DynamiCrafter's block
  with `temporal_selfatt_only` runs its cross-attention slot as self-attention too).
- `init_attn`: one more temporal transformer after the first convolution (`addition_attention`).
- the frame-stride embedding (`fs_condition`) is added to the timestep embedding.

Per-frame prompts need no special attention: the context has one row per frame (`(b t) tokens
dim`), so each frame's cross-attention sees its own prompt; a context with one row per sequence is
repeated over its frames, as the release does.

Attention is torch's `scaled_dot_product_attention` on an accelerator and the explicit product on a
CPU (same scale, `dim_head ** -0.5`): the release's einsum softmax and xformers give the same numbers
to float rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class UNetConfig:
    """The release's `unet_config.params` (configs/inference_256_v1.1.yaml), names kept."""

    in_channels: int = 8
    out_channels: int = 4
    model_channels: int = 320
    attention_resolutions: tuple[int, ...] = (4, 2, 1)
    num_res_blocks: int = 2
    channel_mult: tuple[int, ...] = (1, 2, 4, 4)
    dropout: float = 0.1
    num_head_channels: int = 64
    num_heads: int = -1
    transformer_depth: int = 1
    context_dim: int = 1024
    use_linear: bool = True
    temporal_conv: bool = True
    tempspatial_aware: bool = False
    temporal_attention: bool = True
    temporal_selfatt_only: bool = True
    use_relative_position: bool = False
    use_causal_attention: bool = False
    temporal_length: int = 16
    addition_attention: bool = True
    image_cross_attention: bool = True
    image_cross_attention_scale_learnable: bool = True
    default_fs: int = 3
    fs_condition: bool = True
    text_context_len: int = 77  # the release's cross-attention splits text | image tokens here

    # The release's options that change nothing here (or that vi does not support: refused by name).
    IGNORED = ("use_checkpoint", "conv_resample", "dims", "use_fp16", "use_scale_shift_norm", "resblock_updown")

    @classmethod
    def from_params(cls, params: dict) -> UNetConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known - set(cls.IGNORED))
        if unknown:
            raise ValueError(f"unet_config.params: unknown {', '.join(unknown)} (vi implements DynamiCrafter's "
                             "UNetModel as ShowHowTo configures it)")
        for name, supported in (("use_relative_position", False), ("use_causal_attention", False),
                                ("tempspatial_aware", False), ("use_scale_shift_norm", False),
                                ("resblock_updown", False), ("conv_resample", True), ("dims", 2)):
            if name in params and params[name] != supported:
                raise ValueError(f"unet_config.params.{name}: vi supports only {supported!r} (the release's value)")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items() if k in known}
        return cls(**values)


def timestep_embedding(timesteps: torch.Tensor, dim: int, max_period: int = 10000) -> torch.Tensor:
    """Sinusoidal embedding, cosines then sines (the release's order)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half)
    args = timesteps[:, None].float() * freqs[None]
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


class GroupNorm32(nn.GroupNorm):
    """GroupNorm computed in float32 whatever the activations' dtype (the release's normalization())."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float()).type(x.dtype)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """Multi-head attention, scale dim_head ** -0.5. On an accelerator torch's fused kernel; on a CPU the
    explicit softmax(q k^T) v the release computes, which keeps vi within fp32 rounding of its outputs
    after guidance amplifies every difference (the parity goldens; CPU runs are tiny models anyway)."""
    b, n, inner = q.shape
    split = [t.reshape(t.shape[0], t.shape[1], heads, inner // heads).transpose(1, 2) for t in (q, k, v)]
    if q.device.type != "cpu":
        return F.scaled_dot_product_attention(*split).transpose(1, 2).reshape(b, n, inner)
    q, k, v = split
    weights = (q @ k.transpose(-1, -2) * (inner // heads) ** -0.5).softmax(dim=-1)
    return (weights @ v).transpose(1, 2).reshape(b, n, inner)


class CrossAttention(nn.Module):
    def __init__(self, query_dim: int, context_dim: int | None, heads: int, dim_head: int, dropout: float = 0.0,
                 image_cross_attention: bool = False, scale_learnable: bool = False, text_context_len: int = 77):
        super().__init__()
        inner, context_dim = heads * dim_head, context_dim or query_dim
        self.heads, self.text_context_len = heads, text_context_len
        self.to_q = nn.Linear(query_dim, inner, bias=False)
        self.to_k = nn.Linear(context_dim, inner, bias=False)
        self.to_v = nn.Linear(context_dim, inner, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner, query_dim), nn.Dropout(dropout))
        self.image_cross_attention, self.scale_learnable = image_cross_attention, scale_learnable
        if image_cross_attention:
            self.to_k_ip = nn.Linear(context_dim, inner, bias=False)
            self.to_v_ip = nn.Linear(context_dim, inner, bias=False)
            if scale_learnable:
                self.alpha = nn.Parameter(torch.tensor(0.0))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        q = self.to_q(x)
        if context is None:  # self-attention
            return self.to_out(_attend(q, self.to_k(x), self.to_v(x), self.heads))
        text = context[:, :self.text_context_len]
        out = _attend(q, self.to_k(text), self.to_v(text), self.heads)
        if self.image_cross_attention:
            image = context[:, self.text_context_len:]
            image_out = _attend(q, self.to_k_ip(image), self.to_v_ip(image), self.heads)
            out = out + image_out * (torch.tanh(self.alpha) + 1 if self.scale_learnable else 1.0)
        return self.to_out(out)


class GEGLU(nn.Module):
    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * F.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, dim: int, dropout: float = 0.0, mult: int = 4):
        super().__init__()
        self.net = nn.Sequential(GEGLU(dim, dim * mult), nn.Dropout(dropout), nn.Linear(dim * mult, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TransformerBlock(nn.Module):
    """attn1 (self), attn2 (cross, or self again when it has no context), a GEGLU feed-forward."""

    def __init__(self, dim: int, heads: int, dim_head: int, dropout: float, context_dim: int | None,
                 image_cross_attention: bool = False, scale_learnable: bool = False, text_context_len: int = 77):
        super().__init__()
        self.attn1 = CrossAttention(dim, None, heads, dim_head, dropout)
        self.ff = FeedForward(dim, dropout)
        self.attn2 = CrossAttention(dim, context_dim, heads, dim_head, dropout, image_cross_attention,
                                    scale_learnable, text_context_len)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        x = self.attn1(self.norm1(x)) + x
        x = self.attn2(self.norm2(x), context) + x
        return self.ff(self.norm3(x)) + x


class SpatialTransformer(nn.Module):
    def __init__(self, channels: int, heads: int, dim_head: int, config: UNetConfig):
        super().__init__()
        inner = heads * dim_head
        self.use_linear = config.use_linear
        self.norm = nn.GroupNorm(32, channels, eps=1e-6)
        self.proj_in = nn.Linear(channels, inner) if self.use_linear else nn.Conv2d(channels, inner, 1)
        self.transformer_blocks = nn.ModuleList(
            TransformerBlock(inner, heads, dim_head, config.dropout, config.context_dim, config.image_cross_attention,
                             config.image_cross_attention_scale_learnable, config.text_context_len)
            for _ in range(config.transformer_depth))
        self.proj_out = nn.Linear(inner, channels) if self.use_linear else nn.Conv2d(inner, channels, 1)
        self.gradient_checkpointing = False

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        y = self.norm(x)
        if not self.use_linear:
            y = self.proj_in(y)
        y = y.flatten(2).transpose(1, 2)
        if self.use_linear:
            y = self.proj_in(y)
        for block in self.transformer_blocks:
            y = checkpoint(block, y, context, use_reentrant=False) if self.gradient_checkpointing else block(y, context)
        if self.use_linear:
            y = self.proj_out(y)
        y = y.transpose(1, 2).reshape(b, -1, h, w)
        if not self.use_linear:
            y = self.proj_out(y)
        return y + x


class TemporalTransformer(nn.Module):
    """Self-attention over time at every pixel; input and output (b, c, t, h, w)."""

    def __init__(self, channels: int, heads: int, dim_head: int, config: UNetConfig, use_linear: bool):
        super().__init__()
        inner = heads * dim_head
        self.use_linear = use_linear
        self.norm = nn.GroupNorm(32, channels, eps=1e-6)
        self.proj_in = nn.Linear(channels, inner) if use_linear else nn.Conv1d(channels, inner, 1)
        self.transformer_blocks = nn.ModuleList(TransformerBlock(inner, heads, dim_head, config.dropout, None)
                                                for _ in range(config.transformer_depth))
        self.proj_out = nn.Linear(inner, channels) if use_linear else nn.Conv1d(inner, channels, 1)
        self.gradient_checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        y = self.norm(x).permute(0, 3, 4, 1, 2).reshape(b * h * w, c, t)  # (b h w) c t
        if not self.use_linear:
            y = self.proj_in(y)
        y = y.transpose(1, 2)  # (b h w) t c
        if self.use_linear:
            y = self.proj_in(y)
        for block in self.transformer_blocks:
            y = checkpoint(block, y, use_reentrant=False) if self.gradient_checkpointing else block(y)
        if self.use_linear:
            y = self.proj_out(y)
        else:
            y = self.proj_out(y.transpose(1, 2)).transpose(1, 2)
        return y.reshape(b, h, w, t, c).permute(0, 4, 3, 1, 2) + x


class TemporalConvBlock(nn.Module):
    """Four GroupNorm-SiLU-(dropout)-Conv3d layers over time, residual (ModelScope's block)."""

    def __init__(self, channels: int, dropout: float = 0.1):
        super().__init__()
        kernel, padding = (3, 1, 1), (1, 0, 0)
        self.conv1 = nn.Sequential(nn.GroupNorm(32, channels), nn.SiLU(), nn.Conv3d(channels, channels, kernel,
                                                                                    padding=padding))
        for name in ("conv2", "conv3", "conv4"):
            setattr(self, name, nn.Sequential(nn.GroupNorm(32, channels), nn.SiLU(), nn.Dropout(dropout),
                                              nn.Conv3d(channels, channels, kernel, padding=padding)))
        nn.init.zeros_(self.conv4[-1].weight)  # the block starts as the identity
        nn.init.zeros_(self.conv4[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv4(self.conv3(self.conv2(self.conv1(x))))


class ResBlock(nn.Module):
    def __init__(self, channels: int, emb_channels: int, dropout: float, out_channels: int | None = None,
                 temporal_conv: bool = False):
        super().__init__()
        out = out_channels or channels
        self.in_layers = nn.Sequential(GroupNorm32(32, channels), nn.SiLU(), nn.Conv2d(channels, out, 3, padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_channels, out))
        self.out_layers = nn.Sequential(GroupNorm32(32, out), nn.SiLU(), nn.Dropout(dropout),
                                        nn.Conv2d(out, out, 3, padding=1))
        nn.init.zeros_(self.out_layers[-1].weight)
        nn.init.zeros_(self.out_layers[-1].bias)
        self.skip_connection = nn.Identity() if out == channels else nn.Conv2d(channels, out, 1)
        if temporal_conv:
            self.temopral_conv = TemporalConvBlock(out)  # sic: the release's parameter name
        self.gradient_checkpointing = False

    def forward(self, x: torch.Tensor, emb: torch.Tensor, batch: int) -> torch.Tensor:
        if self.gradient_checkpointing:
            return checkpoint(self._forward, x, emb, batch, use_reentrant=False)
        return self._forward(x, emb, batch)

    def _forward(self, x: torch.Tensor, emb: torch.Tensor, batch: int) -> torch.Tensor:
        h = self.in_layers(x)
        h = h + self.emb_layers(emb).type(h.dtype)[..., None, None]
        h = self.skip_connection(x) + self.out_layers(h)
        if hasattr(self, "temopral_conv"):
            h = _frames_last(h, batch)
            h = _frames_flat(self.temopral_conv(h))
        return h


class Downsample(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.op = nn.Conv2d(channels, channels, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x)


class Upsample(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


def _frames_last(x: torch.Tensor, batch: int) -> torch.Tensor:
    """(b t) c h w -> b c t h w"""
    bt, c, h, w = x.shape
    return x.reshape(batch, bt // batch, c, h, w).transpose(1, 2)


def _frames_flat(x: torch.Tensor) -> torch.Tensor:
    """b c t h w -> (b t) c h w"""
    b, c, t, h, w = x.shape
    return x.transpose(1, 2).reshape(b * t, c, h, w)


class Level(nn.Sequential):
    """One entry of input_blocks / middle_block / output_blocks: layers applied in order, each given
    what it needs (the release's TimestepEmbedSequential)."""

    def forward(self, x: torch.Tensor, emb: torch.Tensor, context: torch.Tensor, batch: int) -> torch.Tensor:
        for layer in self:
            if isinstance(layer, ResBlock):
                x = layer(x, emb, batch)
            elif isinstance(layer, SpatialTransformer):
                x = layer(x, context)
            elif isinstance(layer, TemporalTransformer):
                x = _frames_flat(layer(_frames_last(x, batch)))
            else:
                x = layer(x)
        return x


class UNetModel(nn.Module):
    def __init__(self, config: UNetConfig):
        super().__init__()
        self.config = c = config
        emb_dim = c.model_channels * 4

        def heads_of(ch: int) -> tuple[int, int]:
            if c.num_head_channels == -1:
                return c.num_heads, ch // c.num_heads
            return ch // c.num_head_channels, c.num_head_channels

        def attention(ch: int) -> list[nn.Module]:
            heads, dim_head = heads_of(ch)
            layers: list[nn.Module] = [SpatialTransformer(ch, heads, dim_head, c)]
            if c.temporal_attention:
                layers.append(TemporalTransformer(ch, heads, dim_head, c, c.use_linear))
            return layers

        def resblock(ch: int, out: int | None = None) -> ResBlock:
            return ResBlock(ch, emb_dim, c.dropout, out, c.temporal_conv)

        self.time_embed = nn.Sequential(nn.Linear(c.model_channels, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        if c.fs_condition:
            self.fps_embedding = nn.Sequential(nn.Linear(c.model_channels, emb_dim), nn.SiLU(),
                                               nn.Linear(emb_dim, emb_dim))
            nn.init.zeros_(self.fps_embedding[-1].weight)
            nn.init.zeros_(self.fps_embedding[-1].bias)
        self.input_blocks = nn.ModuleList([Level(nn.Conv2d(c.in_channels, c.model_channels, 3, padding=1))])
        if c.addition_attention:
            # 8 heads of num_head_channels and 1x1 convolutions (use_linear is not passed on), as released
            self.init_attn = Level(TemporalTransformer(c.model_channels, 8, c.num_head_channels, c, use_linear=False))
        chans, ch, ds = [c.model_channels], c.model_channels, 1
        for level, mult in enumerate(c.channel_mult):
            for _ in range(c.num_res_blocks):
                layers: list[nn.Module] = [resblock(ch, mult * c.model_channels)]
                ch = mult * c.model_channels
                if ds in c.attention_resolutions:
                    layers += attention(ch)
                self.input_blocks.append(Level(*layers))
                chans.append(ch)
            if level != len(c.channel_mult) - 1:
                self.input_blocks.append(Level(Downsample(ch)))
                chans.append(ch)
                ds *= 2
        self.middle_block = Level(resblock(ch), *attention(ch), resblock(ch))
        self.output_blocks = nn.ModuleList()
        for level, mult in list(enumerate(c.channel_mult))[::-1]:
            for i in range(c.num_res_blocks + 1):
                layers = [resblock(ch + chans.pop(), mult * c.model_channels)]
                ch = mult * c.model_channels
                if ds in c.attention_resolutions:
                    layers += attention(ch)
                if level and i == c.num_res_blocks:
                    layers.append(Upsample(ch))
                    ds //= 2
                self.output_blocks.append(Level(*layers))
        self.out = nn.Sequential(GroupNorm32(32, ch), nn.SiLU(), nn.Conv2d(c.model_channels, c.out_channels, 3,
                                                                             padding=1))
        nn.init.zeros_(self.out[-1].weight)
        nn.init.zeros_(self.out[-1].bias)

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        for module in self.modules():
            if hasattr(module, "gradient_checkpointing"):
                module.gradient_checkpointing = enabled

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                fs: torch.Tensor | None = None) -> torch.Tensor:
        """x (b, in_channels, t, h, w), timesteps (b,), context (b*t or b, tokens, context_dim): one row
        per frame (per-frame prompts) or per sequence; fs (b,) the frame stride -> (b, out, t, h, w)."""
        b, _, t, _, _ = x.shape
        c = self.config
        emb = self.time_embed(timestep_embedding(timesteps, c.model_channels).type(x.dtype))
        if len(context) != b * t:
            context = context.repeat_interleave(t, dim=0)
        if c.fs_condition:
            if fs is None:
                fs = torch.full((b,), c.default_fs, dtype=torch.long, device=x.device)
            emb = emb + self.fps_embedding(timestep_embedding(fs, c.model_channels).type(x.dtype))
        emb = emb.repeat_interleave(t, dim=0)
        h = _frames_flat(x)
        skips = []
        for index, block in enumerate(self.input_blocks):
            h = block(h, emb, context, b)
            if index == 0 and c.addition_attention:
                h = self.init_attn(h, emb, context, b)
            skips.append(h)
        h = self.middle_block(h, emb, context, b)
        for block in self.output_blocks:
            h = block(torch.cat([h, skips.pop()], dim=1), emb, context, b)
        return _frames_last(self.out(h.type(x.dtype)), b)
