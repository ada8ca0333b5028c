"""DynamiCrafter's autoencoder (ShowHowTo's first stage) as diffusers' `AutoencoderKL`.

The release's `lvdm.models.autoencoder.AutoencoderKL(ddconfig, embed_dim)` is the Stable-Diffusion KL
autoencoder: the same layers and math as diffusers' `AutoencoderKL` (GroupNorm(32, eps 1e-6), SiLU,
one-head mid-block self-attention with scale C^-1/2, downsampling by a stride-2 3x3 conv after a
(0, 1, 0, 1) zero pad, nearest upsampling then a 3x3 conv). Only the parameter names differ, so a
checkpoint's `first_stage_model.*` weights load into diffusers through `ldm_to_diffusers`.

Posterior: both sides chunk the encoder's moments into (mean, logvar) on channels and clamp logvar to
[-30, 20] before `std = exp(logvar / 2)` (the release's `DiagonalGaussianDistribution`); see
`sample_posterior`. The latent scale (the release's `scale_factor`, 0.18215) is the caller's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

# Module-path renames, release (ldm) -> diffusers; a parameter's key is a path plus `weight`/`bias`.
# Fields: {e} encoder|decoder, {i} {j} indices kept as they are, {up} a decoder level (reversed, see
# below), {r} a layer inside a resnet block (renamed by RESNET_LAYERS).
RENAMES: tuple[tuple[str, str], ...] = (
    ("{e}.conv_in.", "{e}.conv_in."),
    ("encoder.down.{i}.block.{j}.{r}.", "encoder.down_blocks.{i}.resnets.{j}.{r}."),
    ("encoder.down.{i}.downsample.conv.", "encoder.down_blocks.{i}.downsamplers.0.conv."),
    ("{e}.mid.block_1.{r}.", "{e}.mid_block.resnets.0.{r}."),
    ("{e}.mid.attn_1.norm.", "{e}.mid_block.attentions.0.group_norm."),
    # the release's attention projections are 1x1 convs (C, C, 1, 1), diffusers' are linears (C, C)
    ("{e}.mid.attn_1.q.", "{e}.mid_block.attentions.0.to_q."),
    ("{e}.mid.attn_1.k.", "{e}.mid_block.attentions.0.to_k."),
    ("{e}.mid.attn_1.v.", "{e}.mid_block.attentions.0.to_v."),
    ("{e}.mid.attn_1.proj_out.", "{e}.mid_block.attentions.0.to_out.0."),
    ("{e}.mid.block_2.{r}.", "{e}.mid_block.resnets.1.{r}."),
    # The release numbers decoder levels by resolution (up.0 is the last, full-resolution level: its
    # Decoder builds them in reverse and prepends each), diffusers by execution order (up_blocks.0
    # runs first, at the lowest resolution): up.{k} <-> up_blocks.{levels - 1 - k}.
    ("decoder.up.{up}.block.{j}.{r}.", "decoder.up_blocks.{up}.resnets.{j}.{r}."),
    ("decoder.up.{up}.upsample.conv.", "decoder.up_blocks.{up}.upsamplers.0.conv."),
    ("{e}.norm_out.", "{e}.conv_norm_out."),
    ("{e}.conv_out.", "{e}.conv_out."),
    ("quant_conv.", "quant_conv."),
    ("post_quant_conv.", "post_quant_conv."),
)
# Inside a resnet block: the 1x1 conv on the skip path, used when channels change, is renamed.
RESNET_LAYERS: dict[str, str] = {
    "norm1": "norm1", "conv1": "conv1", "norm2": "norm2", "conv2": "conv2", "nin_shortcut": "conv_shortcut",
}
_ATTN_PROJ = re.compile(r"\.attentions\.0\.to_(q|k|v|out\.0)\.weight$")  # diffusers key of a 1x1-conv weight

# ddconfig fields the release reads, with the only value this mapping reproduces (None: any value).
_DDCONFIG: dict[str, Any] = {
    "double_z": True, "z_channels": None, "resolution": None, "in_channels": None, "out_ch": None, "ch": None,
    "ch_mult": None, "num_res_blocks": None, "attn_resolutions": None, "dropout": None, "resamp_with_conv": True,
    "use_linear_attn": False, "attn_type": "vanilla", "give_pre_end": False, "tanh_out": False,
}


def autoencoder_from_ddconfig(ddconfig: dict, embed_dim: int):
    """A diffusers `AutoencoderKL` shaped as the release's `AutoencoderKL(ddconfig, embed_dim)` (random weights)."""
    from diffusers import AutoencoderKL

    cfg = dict(ddconfig)
    for name, value in cfg.items():
        if name not in _DDCONFIG:
            raise ValueError(f"ddconfig field {name!r} is not one this mapping knows")
        if _DDCONFIG[name] is not None and value != _DDCONFIG[name]:
            raise ValueError(f"ddconfig {name}={value!r} is not supported (only {_DDCONFIG[name]!r})")
    if cfg["z_channels"] != embed_dim:
        # diffusers' quant convs are (2L -> 2L) and (L -> L); the release's are (2z -> 2e) and (e -> z)
        raise ValueError(f"ddconfig z_channels={cfg['z_channels']} must equal embed_dim={embed_dim}")
    if list(cfg["attn_resolutions"]):
        raise ValueError(f"ddconfig attn_resolutions={list(cfg['attn_resolutions'])} (attention in the "
                         "down/up blocks) is not supported: only the mid-block attention")
    # dropout acts in training only (diffusers' AutoencoderKL has none); the autoencoder is frozen here.
    levels = len(cfg["ch_mult"])
    return AutoencoderKL(
        in_channels=cfg["in_channels"], out_channels=cfg["out_ch"],
        down_block_types=("DownEncoderBlock2D",) * levels, up_block_types=("UpDecoderBlock2D",) * levels,
        block_out_channels=tuple(cfg["ch"] * m for m in cfg["ch_mult"]), layers_per_block=cfg["num_res_blocks"],
        act_fn="silu", latent_channels=embed_dim, norm_num_groups=32, sample_size=cfg["resolution"],
        use_quant_conv=True, use_post_quant_conv=True, mid_block_add_attention=True,
    )


def _pattern(template: str, layers: dict[str, str]) -> re.Pattern[str]:
    fields = {"e": "encoder|decoder", "i": r"\d+", "j": r"\d+", "up": r"\d+", "r": "|".join(layers)}
    parts = re.split(r"\{(\w+)\}", template)  # literal, field, literal, ...
    body = "".join(re.escape(p) if k % 2 == 0 else f"(?P<{p}>{fields[p]})" for k, p in enumerate(parts))
    return re.compile(body + "(?P<w>weight|bias)")


def _match(key: str, rules: list[tuple[re.Pattern[str], str]]) -> tuple[dict[str, str], str]:
    for pattern, target in rules:
        if match := pattern.fullmatch(key):
            return match.groupdict(), target
    raise ValueError(f"unknown autoencoder key {key!r}")


def _convert(state: dict[str, Tensor], levels: int, to_diffusers: bool) -> dict[str, Tensor]:
    if levels < 1:
        raise ValueError(f"levels (len(ch_mult)) must be >= 1, not {levels}")
    layers = RESNET_LAYERS if to_diffusers else {d: s for s, d in RESNET_LAYERS.items()}
    rules = [(_pattern(s, layers), d) if to_diffusers else (_pattern(d, layers), s) for s, d in RENAMES]
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        found, target = _match(key, rules)
        if found.get("up") is not None:
            if int(found["up"]) >= levels:
                raise ValueError(f"autoencoder key {key!r}: decoder level out of range for {levels} levels")
            found["up"] = str(levels - 1 - int(found["up"]))  # its own inverse: same both ways
        if found.get("r") is not None:
            found["r"] = layers[found["r"]]
        new = target.format(**found) + found["w"]
        dkey = new if to_diffusers else key
        if _ATTN_PROJ.search(dkey):
            value = value.reshape(value.shape[:2]) if to_diffusers else value.reshape(*value.shape, 1, 1)
        if new in out:
            raise ValueError(f"autoencoder key {key!r} maps onto {new!r} twice")
        out[new] = value
    return out


def ldm_to_diffusers(state: dict[str, Tensor], levels: int) -> dict[str, Tensor]:
    """The release's autoencoder state dict (no `first_stage_model.` prefix) in diffusers' names.
    `levels` = len(ddconfig["ch_mult"]). Raises ValueError on a key no rule covers."""
    return _convert(state, levels, to_diffusers=True)


def diffusers_to_ldm(state: dict[str, Tensor], levels: int) -> dict[str, Tensor]:
    """Inverse of `ldm_to_diffusers`."""
    return _convert(state, levels, to_diffusers=False)


def sample_posterior(moments: Tensor, noise: Tensor | None) -> Tensor:
    """A latent from the encoder's moments (n, 2C, h, w), unscaled: mean + exp(logvar / 2) * noise, with
    logvar clamped to [-30, 20] as the release's DiagonalGaussianDistribution does; noise None: the mean."""
    mean, logvar = moments.chunk(2, dim=1)
    if noise is None:
        return mean
    return mean + (0.5 * logvar.clamp(-30.0, 20.0)).exp() * noise
