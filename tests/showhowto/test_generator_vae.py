"""The release's (DynamiCrafter's) autoencoder as diffusers' AutoencoderKL: the key map both ways, its
refusals, the posterior sample, and parity with the release's own outputs (golden.pt, made by
evaluation/showhowto/dynamicrafter_golden.py from the release's code)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from vi.pipelines.showhowto.generator_vae import (
    autoencoder_from_ddconfig,
    diffusers_to_ldm,
    ldm_to_diffusers,
    sample_posterior,
)

DATA = Path(__file__).parent / "data" / "dynamicrafter"
CONFIG = Path(__file__).parents[2] / "evaluation" / "showhowto" / "tiny_model"  # tiny.yaml, vi-tiny-clip.json
TINY = {"double_z": True, "z_channels": 4, "resolution": 16, "in_channels": 3, "out_ch": 3, "ch": 32,
        "ch_mult": [1, 2, 2], "num_res_blocks": 1, "attn_resolutions": [], "dropout": 0.0}
LEVELS = len(TINY["ch_mult"])


def test_round_trip_gives_the_release_key_names():
    torch.manual_seed(0)
    state = autoencoder_from_ddconfig(TINY, 4).state_dict()
    ldm = diffusers_to_ldm(state, LEVELS)
    back = ldm_to_diffusers(ldm, LEVELS)
    assert list(back) == list(state)
    assert all(torch.equal(back[k], v) for k, v in state.items())

    # the release's AutoencoderKL(TINY, embed_dim=4) has 152 parameters (counted from its code)
    assert len(ldm) == 152
    assert ldm["encoder.mid.attn_1.q.weight"].shape == (64, 64, 1, 1)  # 1x1 conv there, linear here
    assert state["encoder.mid_block.attentions.0.to_q.weight"].shape == (64, 64)
    # channels change (32 -> 64) in the encoder's level 1 and the decoder's last level: a 1x1 skip conv
    assert {k for k in ldm if "nin_shortcut" in k} == {
        f"{side}.block.0.nin_shortcut.{w}" for side in ("encoder.down.1", "decoder.up.0") for w in ("weight", "bias")}
    # decoder levels reversed: the release's up.2 is the lowest resolution (64 channels), run first
    assert torch.equal(ldm["decoder.up.2.block.0.conv1.weight"], state["decoder.up_blocks.0.resnets.0.conv1.weight"])
    assert ldm["decoder.up.0.block.1.conv2.weight"].shape[0] == 32
    assert "decoder.up.2.upsample.conv.weight" in ldm and "decoder.up.0.upsample.conv.weight" not in ldm
    assert "encoder.down.0.downsample.conv.bias" in ldm and "encoder.down.2.downsample.conv.bias" not in ldm
    for name in ("encoder.norm_out.weight", "decoder.mid.attn_1.proj_out.weight", "decoder.mid.block_2.norm2.bias",
                 "quant_conv.weight", "post_quant_conv.bias"):
        assert name in ldm


@pytest.mark.parametrize("convert, key", [
    (ldm_to_diffusers, "encoder.down.0.attn.0.q.weight"),  # attention in a down block (attn_resolutions)
    (ldm_to_diffusers, "first_stage_model.encoder.conv_in.weight"),  # the caller strips the prefix
    (ldm_to_diffusers, "decoder.up.0.block.0.temb_proj.weight"),
    (diffusers_to_ldm, "decoder.up_blocks.0.attentions.0.to_q.weight"),
    (diffusers_to_ldm, "encoder.down_blocks.0.resnets.0.nin_shortcut.weight"),  # the other side's name
])
def test_an_unknown_key_is_refused_by_name(convert, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        convert({key: torch.zeros(1)}, LEVELS)


def test_configs_it_cannot_reproduce_are_refused():
    with pytest.raises(ValueError, match="embed_dim"):
        autoencoder_from_ddconfig(TINY, 8)
    with pytest.raises(ValueError, match="attn_resolutions"):
        autoencoder_from_ddconfig({**TINY, "attn_resolutions": [4]}, 4)
    with pytest.raises(ValueError, match="tanh_out"):
        autoencoder_from_ddconfig({**TINY, "tanh_out": True}, 4)


def test_sample_posterior_clamps_logvar_as_the_release():
    mean, logvar, noise = torch.randn(1, 4, 2, 2), torch.randn(1, 4, 2, 2), torch.randn(1, 4, 2, 2)
    logvar[0, 0, 0, 0], logvar[0, 1, 0, 0] = 50.0, -80.0
    got = sample_posterior(torch.cat([mean, logvar], dim=1), noise)
    assert torch.allclose(got, mean + torch.exp(0.5 * logvar.clamp(-30, 20)) * noise)
    assert torch.equal(sample_posterior(torch.cat([mean, logvar], dim=1), None), mean)


def test_matches_the_release_outputs():
    golden = torch.load(DATA / "golden.pt", map_location="cpu", weights_only=True)["autoencoder"]
    release = torch.load(DATA / "tiny_release.pt", map_location="cpu", weights_only=True)
    params = yaml.safe_load((CONFIG / "tiny.yaml").read_text())["model"]["params"]["first_stage_config"]["params"]
    prefix = "first_stage_model."
    ldm = {k[len(prefix):]: v.float() for k, v in release.items() if k.startswith(prefix)}
    vae = autoencoder_from_ddconfig(params["ddconfig"], params["embed_dim"]).eval()
    vae.load_state_dict(ldm_to_diffusers(ldm, LEVELS), strict=True)
    assert diffusers_to_ldm(vae.state_dict(), LEVELS).keys() == ldm.keys()
    with torch.no_grad():
        mean, logvar = vae.encode(golden["images"]).latent_dist.parameters.chunk(2, dim=1)
        decoded = vae.decode(golden["z"]).sample
    diffs = {"mean": (mean - golden["posterior_mean"]).abs().max().item(),
             "logvar": (logvar.clamp(-30, 20) - golden["posterior_logvar"]).abs().max().item(),
             "decoded": (decoded - golden["decoded"]).abs().max().item()}
    print("autoencoder vs release, max abs:", diffs)
    assert all(d <= 1e-4 for d in diffs.values()), diffs
