"""ShowHowTo's (DynamiCrafter's) conditioning encoders, with the release's state-dict layout.

- `OpenClipText`: OpenCLIP's text tower, tokens of its penultimate (or last) block after
  `ln_final`: the U-Net's text cross-attention context. Stored as the release's
  `cond_stage_model`: an open_clip `CLIP` without `visual`, under `model.`.
- `OpenClipImage`: the patch tokens (and class token) of OpenCLIP's visual transformer, before
  `ln_post` and `proj`. Stored as the release's `embedder`: a `CLIP` without its text
  `transformer`, under `model.` (the unused text embeddings stay, so release checkpoints load
  with strict=True).
- `Resampler`: the Perceiver that turns those image tokens into per-frame query tokens (the
  release's `image_proj_model`).

The release ran open_clip 2.22 and kornia 0.7.4; this runs open_clip 3.x (same parameter names,
same tokenizer ids, batch-first transformers) and reproduces kornia's resize without kornia.
Both encoders can be built on the meta device, loaded with `load_state_dict(sd, assign=True)`
and then `materialize()`d, so a ~1B-parameter ViT-H-14 is never initialised twice.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

CONTEXT_LENGTH = 77  # every OpenCLIP text model; the release tokenises with open_clip.tokenize's default
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def clip_config(arch: str, search: list[Path]) -> dict:
    """The open_clip model config of `arch`: `<arch>.json` in a `search` folder, else open_clip's own."""
    for folder in search:
        path = Path(folder) / f"{arch}.json"
        if path.is_file():
            return json.loads(path.read_text())
    import open_clip

    # only the bundled registry: get_model_config would fetch "hf-hub:" names from the network
    if arch in open_clip.list_models():
        return open_clip.get_model_config(arch)
    raise ValueError(f"no open_clip config {arch!r}: no {arch}.json in {[str(p) for p in search]} "
                     f"and not one of open_clip's built-in models")


def clip_model(config: dict) -> nn.Module:
    """A randomly initialised open_clip `CLIP` (nothing downloaded) from a model config dict."""
    from open_clip.model import CLIP

    if "custom_text" in config or "multimodal_cfg" in config:
        # CustomTextCLIP / CoCa nest the text tower under `text.`: not the release's key layout
        raise ValueError("only plain CLIP configs (text tower at the top level) are supported")
    return CLIP(**config)


def resize_like_kornia(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Resize (B, C, H, W) to `size` as kornia 0.7.4's
    `geometry.resize(x, size, interpolation="bicubic", align_corners=True, antialias=True)` does.

    Unchanged if already `size`. When downscaling along either axis (factor = old / new > 1),
    kornia first blurs with a separable Gaussian (rows, then columns; reflect padding), per axis
    sigma = max((factor - 1) / 2, 0.001) and kernel size int(max(4 * sigma, 3)), made odd by
    adding 1; an upscaled axis thus gets a 3-tap kernel with sigma 0.001, i.e. identity. Then
    torch's bicubic interpolation with align_corners=True.
    """
    size = (int(size[0]), int(size[1]))
    h, w = x.shape[-2:]
    if (h, w) == size:
        return x
    factors = (h / size[0], w / size[1])
    if max(factors) > 1:
        sigmas = [max((f - 1.0) / 2.0, 0.001) for f in factors]
        kernels = [int(max(2.0 * 2 * s, 3)) for s in sigmas]
        kernels = [k + 1 if k % 2 == 0 else k for k in kernels]
        x = _blur(x, kernels[1], sigmas[1], dim=-1)
        x = _blur(x, kernels[0], sigmas[0], dim=-2)
    return F.interpolate(x, size=size, mode="bicubic", align_corners=True)


def _blur(x: torch.Tensor, size: int, sigma: float, dim: int) -> torch.Tensor:
    # kornia builds the kernel in the input's dtype (sigma included) and convolves per channel
    s = torch.tensor([[sigma]], device=x.device, dtype=x.dtype)
    t = torch.arange(size, device=x.device, dtype=x.dtype) - float(size // 2)
    g = torch.exp(-t.pow(2.0) / (2 * s.pow(2.0)))
    g = (g / g.sum(-1, keepdim=True))[0]
    c, p = x.shape[1], (size - 1) // 2
    if dim == -1:
        weight, pad = g.view(1, 1, 1, size), (p, size - 1 - p, 0, 0)
    else:
        weight, pad = g.view(1, 1, size, 1), (0, 0, p, size - 1 - p)
    x = F.pad(x, pad, mode="reflect")
    return F.conv2d(x, weight.expand(c, 1, -1, -1), groups=c)


def _run_blocks(transformer: nn.Module, x: torch.Tensor, count: int,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The first `count` residual blocks on (N, L, D) tokens."""
    # open_clip 3.x builds its blocks batch-first; 2.22 (the release's) sequence-first
    batch_first = getattr(transformer, "batch_first", False)
    if not batch_first:
        x = x.transpose(0, 1)
    for block in transformer.resblocks[:count]:
        x = block(x, attn_mask=attn_mask)
    return x if batch_first else x.transpose(0, 1)


def _causal_mask(n: int, like: torch.Tensor, device: torch.device) -> torch.Tensor:
    # open_clip's text mask: additive, -inf above the diagonal
    return torch.full((n, n), float("-inf"), dtype=like.dtype, device=device).triu_(1)


def _check_materialized(module: nn.Module) -> None:
    left = [n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"still on the meta device (not in the loaded state dict?): {left[:5]}")


class OpenClipText(nn.Module):
    """Per-token text features (N, 77, width) of OpenCLIP's text transformer."""

    def __init__(self, config: dict, layer: str = "penultimate") -> None:
        super().__init__()
        if layer not in ("last", "penultimate"):
            raise ValueError(f"layer must be 'last' or 'penultimate', not {layer!r}")
        self.layer = layer
        self.model = clip_model(config)
        del self.model.visual

    @staticmethod
    def tokenize(texts: list[str]) -> torch.Tensor:
        """(N, 77) BPE ids. open_clip 3.x's `tokenize` gives 2.22's ids (same vocabulary, cleaning,
        truncation to 76 tokens + end-of-text, "" -> start, end)."""
        import open_clip

        return open_clip.tokenize(list(texts), context_length=CONTEXT_LENGTH)

    def forward(self, texts: list[str]) -> torch.Tensor:
        m = self.model
        tokens = self.tokenize(texts).to(m.token_embedding.weight.device)
        x = m.token_embedding(tokens) + m.positional_embedding
        keep = len(m.transformer.resblocks) - (1 if self.layer == "penultimate" else 0)
        return m.ln_final(_run_blocks(m.transformer, x, keep, m.attn_mask))

    def materialize(self) -> None:
        """Rebuild the non-persistent causal mask after a meta-device build + assign load."""
        m = self.model
        if m.attn_mask is not None and m.attn_mask.is_meta:
            m.attn_mask = _causal_mask(m.attn_mask.shape[-1], m.attn_mask, m.token_embedding.weight.device)
        _check_materialized(self)


class OpenClipImage(nn.Module):
    """Token features (B, 1 + grid**2, width) of OpenCLIP's visual transformer for images in [-1, 1]."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.model = clip_model(config)
        del self.model.transformer
        # non-persistent, as in the release: not checkpoint entries
        self.register_buffer("mean", torch.tensor(CLIP_MEAN), persistent=False)
        self.register_buffer("std", torch.tensor(CLIP_STD), persistent=False)

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        size = self.model.visual.image_size
        size = (size, size) if isinstance(size, int) else tuple(size)
        x = (resize_like_kornia(images, size) + 1.0) / 2.0
        # kornia.enhance.normalize casts mean/std to the data's dtype
        mean = self.mean.to(x.dtype).view(1, -1, 1, 1)
        std = self.std.to(x.dtype).view(1, -1, 1, 1)
        return (x - mean) / std

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        v = self.model.visual
        x = v.conv1(self.preprocess(images))  # (B, width, grid, grid)
        x = x.flatten(2).transpose(1, 2)
        cls = v.class_embedding.to(x.dtype).view(1, 1, -1).expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + v.positional_embedding.to(x.dtype)
        x = v.ln_pre(v.patch_dropout(x))
        return _run_blocks(v.transformer, x, len(v.transformer.resblocks))  # no ln_post, no proj

    def materialize(self) -> None:
        """Rebuild the non-persistent buffers (mean/std, open_clip's unused text mask) after a
        meta-device build + assign load."""
        device = self.model.visual.conv1.weight.device
        if self.mean.is_meta:
            self.mean = torch.tensor(CLIP_MEAN, device=device)
        if self.std.is_meta:
            self.std = torch.tensor(CLIP_STD, device=device)
        m = self.model
        if m.attn_mask is not None and m.attn_mask.is_meta:
            m.attn_mask = _causal_mask(m.attn_mask.shape[-1], m.attn_mask, device)
        _check_materialized(self)


class PerceiverAttention(nn.Module):
    """Latents attend to [image tokens, latents] (keys/values from both)."""

    def __init__(self, *, dim: int, dim_head: int = 64, heads: int = 8) -> None:
        super().__init__()
        self.dim_head, self.heads = dim_head, heads
        inner = dim_head * heads
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_kv = nn.Linear(dim, inner * 2, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)

    def forward(self, x: torch.Tensor, latents: torch.Tensor) -> torch.Tensor:
        x, latents = self.norm1(x), self.norm2(latents)
        b, n, _ = latents.shape
        q = self.to_q(latents)
        k, v = self.to_kv(torch.cat((x, latents), dim=-2)).chunk(2, dim=-1)
        q, k, v = (t.view(b, t.shape[1], self.heads, -1).transpose(1, 2) for t in (q, k, v))
        # as the release: q and k each scaled by dim_head**-0.25 (steadier in fp16 than scaling
        # after the product), softmax in fp32; written out so fp16/bf16 match it too
        scale = 1 / math.sqrt(math.sqrt(self.dim_head))
        w = (q * scale) @ (k * scale).transpose(-2, -1)
        w = torch.softmax(w.float(), dim=-1).to(w.dtype)
        out = (w @ v).transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


def _feed_forward(dim: int, mult: float) -> nn.Sequential:
    inner = int(dim * mult)
    return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, inner, bias=False), nn.GELU(),
                         nn.Linear(inner, dim, bias=False))


class Resampler(nn.Module):
    """Perceiver resampler: image tokens (B, L, embedding_dim) -> (B, queries, output_dim), with
    `num_queries` queries per frame (x `video_length` when set)."""

    def __init__(self, dim: int = 1024, depth: int = 8, dim_head: int = 64, heads: int = 16,
                 num_queries: int = 8, embedding_dim: int = 768, output_dim: int = 1024,
                 ff_mult: float = 4, video_length: int | None = None) -> None:
        super().__init__()
        self.num_queries, self.video_length = num_queries, video_length
        total = num_queries * video_length if video_length is not None else num_queries
        self.latents = nn.Parameter(torch.randn(1, total, dim) / dim**0.5)
        self.proj_in = nn.Linear(embedding_dim, dim)
        self.proj_out = nn.Linear(dim, output_dim)
        self.norm_out = nn.LayerNorm(output_dim)
        self.layers = nn.ModuleList(
            nn.ModuleList([PerceiverAttention(dim=dim, dim_head=dim_head, heads=heads), _feed_forward(dim, ff_mult)])
            for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        latents = self.latents.repeat(x.shape[0], 1, 1)
        x = self.proj_in(x)
        for attn, ff in self.layers:
            latents = attn(x, latents) + latents
            latents = ff(latents) + latents
        return self.norm_out(self.proj_out(latents))
