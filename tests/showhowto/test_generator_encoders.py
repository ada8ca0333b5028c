"""The generator's conditioning encoders (pipelines/showhowto/generator_encoders.py): OpenCLIP text
and image tokens, kornia 0.7.4's resize without kornia, the Perceiver resampler, meta-device loading,
and parity with the ShowHowTo release on a tiny model (golden.pt, made by
evaluation/showhowto/dynamicrafter_golden.py with the release's code, open_clip 2.22, kornia 0.7.4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from vi.pipelines.showhowto.generator_encoders import (
    OpenClipImage,
    OpenClipText,
    Resampler,
    clip_config,
    resize_like_kornia,
)

DATA = Path(__file__).parent / "data" / "dynamicrafter"
CONFIG = Path(__file__).parents[2] / "evaluation" / "showhowto" / "tiny_model"  # tiny.yaml, vi-tiny-clip.json
PROMPTS = ["Slice the bread.", "Spread butter on the slices.", ""]


@pytest.fixture(scope="module")
def config() -> dict:
    return clip_config("vi-tiny-clip", [CONFIG])


def _images(seed: int, size: int, batch: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, 3, size, size, generator=g) * 2 - 1


# --- configs, shapes, key layout ---------------------------------------------------------------

def test_clip_config_reads_a_json_then_open_clip_then_fails(tmp_path):
    assert clip_config("vi-tiny-clip", [tmp_path, CONFIG])["text_cfg"]["width"] == 8
    assert clip_config("ViT-H-14", [tmp_path])["vision_cfg"]["width"] == 1280
    with pytest.raises(ValueError, match="no-such-arch"):
        clip_config("no-such-arch", [tmp_path])


def test_text_tokens_and_shapes(config):
    torch.manual_seed(0)
    text = OpenClipText(config).eval()
    ids = text.tokenize(["", "word " * 100])
    assert ids.shape == (2, 77) and ids.dtype == torch.long
    assert ids[0, :3].tolist() == [49406, 49407, 0]  # "" is start, end
    assert ids[1, 0] == 49406 and ids[1, -1] == 49407 and (ids[1] != 0).all()  # truncated, ends with end
    with torch.no_grad():
        pen = text(PROMPTS)
        text.layer = "last"
        last = text(PROMPTS)
    assert pen.shape == last.shape == (3, 77, config["text_cfg"]["width"])
    assert (pen - last).abs().max() > 1e-3
    with pytest.raises(ValueError):
        OpenClipText(config, layer="pooled")


def test_image_tokens_shapes(config):
    torch.manual_seed(0)
    image = OpenClipImage(config).eval()
    vision = config["vision_cfg"]
    tokens = 1 + (vision["image_size"] // vision["patch_size"]) ** 2  # class token + the patch grid
    with torch.no_grad():
        assert image(_images(1, 256)).shape == (2, tokens, vision["width"])
        assert image(_images(2, 16, batch=1)).shape == (1, tokens, vision["width"])


def test_state_dict_keys_follow_the_release(config):
    text_keys = set(OpenClipText(config).state_dict())
    assert all(k.startswith("model.") for k in text_keys)
    assert not any("visual." in k for k in text_keys)
    assert "model.transformer.resblocks.2.mlp.c_proj.weight" in text_keys and "model.attn_mask" not in text_keys
    image_keys = set(OpenClipImage(config).state_dict())
    assert any(k.startswith("model.visual.") for k in image_keys)
    assert "model.token_embedding.weight" in image_keys and "model.visual.ln_post.weight" in image_keys
    assert not any(k.startswith("model.transformer.") for k in image_keys)
    assert not {"mean", "std", "model.attn_mask"} & image_keys  # non-persistent, as in the release


def test_resampler_shapes_and_names():
    r = Resampler(dim=32, depth=2, dim_head=16, heads=2, num_queries=4, embedding_dim=48, output_dim=8,
                  ff_mult=2, video_length=16)
    assert r.latents.shape == (1, 64, 32)
    assert {"layers.1.0.to_kv.weight", "layers.1.1.0.bias", "layers.1.1.3.weight", "norm_out.weight"} <= set(
        r.state_dict())
    assert r(torch.randn(3, 17, 48)).shape == (3, 64, 8)
    assert Resampler(dim=32, depth=1, dim_head=16, heads=2, num_queries=4, embedding_dim=48).latents.shape[1] == 4


# --- meta-device construction ----------------------------------------------------------------

def test_meta_build_assign_load_materialize_matches_eager(config):
    torch.manual_seed(0)
    text, image = OpenClipText(config).eval(), OpenClipImage(config).eval()
    images = _images(3, 64)
    with torch.no_grad():
        want_text, want_image = text(PROMPTS), image(images)
        text.materialize()  # nothing on meta: a no-op
        image.materialize()
        assert torch.equal(text(PROMPTS), want_text)

    with torch.device("meta"):
        meta_text, meta_image = OpenClipText(config), OpenClipImage(config)
    assert meta_text.model.attn_mask.is_meta and meta_image.mean.is_meta
    meta_text.load_state_dict(text.state_dict(), assign=True)
    meta_image.load_state_dict(image.state_dict(), assign=True)
    meta_text.materialize()
    meta_image.materialize()
    assert not any(t.is_meta for t in [*meta_text.buffers(), *meta_image.buffers()])
    with torch.no_grad():
        assert torch.equal(meta_text.eval()(PROMPTS), want_text)
        assert torch.equal(meta_image.eval()(images), want_image)


def test_materialize_reports_weights_left_on_meta(config):
    with torch.device("meta"):
        text = OpenClipText(config)
    with pytest.raises(RuntimeError, match="meta"):
        text.materialize()


def test_vit_h_14_builds_on_meta_with_the_release_key_count():
    config = clip_config("ViT-H-14", [])
    with torch.device("meta"):
        text, image = OpenClipText(config), OpenClipImage(config)
    # the release's cond_stage_model / embedder of ViT-H-14 (open_clip 2.22): 294 and 398 entries
    assert (len(text.state_dict()), len(image.state_dict())) == (294, 398)
    assert sum(p.numel() for p in image.model.visual.parameters()) > 6e8


# --- kornia 0.7.4's resize -------------------------------------------------------------------

# kornia.geometry.resize(x, size, interpolation="bicubic", align_corners=True, antialias=True) with
# kornia 0.7.4 on x = torch.rand(shape) * 2 - 1 after torch.manual_seed(0): sum and sum of squares
# (in float64) of the output and its values at SAMPLED.
SAMPLED = [(0, 0, 0, 0), (0, 1, 17, 200), (0, 2, 223, 223), (0, 0, 111, 5), (0, 2, 64, 150)]
KORNIA = {
    "down 256 -> 224": ((1, 3, 256, 256), 261.7116940222381, 36863.68170941359,
                        [-0.007486820220947266, 0.5868602991104126, -0.5623521208763123, -0.6729450225830078,
                         -0.05606381595134735]),
    "up 16 -> 224 (no blur)": ((1, 3, 16, 16), -282.88660298516857, 37414.50998124095,
                               [-0.007486820220947266, 0.29813018441200256, 0.8675785064697266,
                                -0.3395512104034424, -0.11900375038385391]),
    "down H, up W": ((2, 3, 300, 180), 78.63486211267036, 73818.88387853818,
                     [-0.007486813701689243, -0.20085811614990234, -0.14461448788642883, 0.24354448914527893,
                      0.18994084000587463]),
    "720x1280 -> 224 (kernels 5 and 9)": ((1, 3, 720, 1280), 12.246104696879229, 1827.2208586346796,
                                          [-0.12506355345249176, -0.16664625704288483, -0.05486162379384041,
                                           -0.026597313582897186, 0.059767551720142365]),
}


@pytest.mark.parametrize("case", list(KORNIA))
def test_resize_matches_kornia_0_7_4(case):
    shape, total, squares, values = KORNIA[case]
    torch.manual_seed(0)
    y = resize_like_kornia(torch.rand(*shape) * 2 - 1, (224, 224))
    assert y.shape == (*shape[:2], 224, 224)
    n = y.numel()
    assert abs(y.double().sum().item() - total) <= 1e-5 * n
    assert abs((y.double() ** 2).sum().item() - squares) <= 1e-5 * n
    got = torch.tensor([y[i].item() for i in SAMPLED])
    assert (got - torch.tensor(values)).abs().max() <= 1e-5


def test_resize_to_the_same_size_is_identity():
    x = torch.rand(1, 3, 224, 224)
    assert resize_like_kornia(x, (224, 224)) is x


# --- parity with the release (tiny model) ------------------------------------------------------

@pytest.fixture(scope="module")
def release():
    golden, weights = DATA / "golden.pt", DATA / "tiny_release.pt"
    if not (golden.exists() and weights.exists()):
        pytest.skip("golden.pt / tiny_release.pt not generated (evaluation/showhowto/dynamicrafter_golden.py)")
    yaml = pytest.importorskip("yaml")
    sd = torch.load(weights, map_location="cpu", weights_only=True)
    sd = {k: v.float() if v.is_floating_point() else v for k, v in sd.items()}  # weights stored as fp16
    params = yaml.safe_load((CONFIG / "tiny.yaml").read_text())["model"]["params"]
    return torch.load(golden, map_location="cpu", weights_only=False), sd, params


def _part(sd: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}


def test_text_encoder_matches_the_release(release):
    golden, sd, params = release
    cfg = params["cond_stage_config"]["params"]
    text = OpenClipText(clip_config(cfg["arch"], [CONFIG]), layer=cfg["layer"]).eval()
    text.load_state_dict(_part(sd, "cond_stage_model."), strict=True)
    assert torch.equal(text.tokenize(golden["text"]["prompts"]), golden["text"]["tokens"])
    with torch.no_grad():
        diff = (text(golden["text"]["prompts"]) - golden["text"]["out"]).abs().max().item()
    print(f"text max abs diff {diff:.3g}")
    assert diff <= 1e-4


def test_image_encoder_matches_the_release(release):
    golden, sd, params = release
    image = OpenClipImage(clip_config(params["img_cond_stage_config"]["params"]["arch"], [CONFIG])).eval()
    image.load_state_dict(_part(sd, "embedder."), strict=True)
    g = golden["image"]
    with torch.no_grad():
        diff256 = (image(g["img256"].float()) - g["out256"]).abs().max().item()
        diff16 = (image(g["img16"]) - g["out16"]).abs().max().item()
    print(f"image max abs diff: 256 px {diff256:.3g}, 16 px {diff16:.3g}")
    assert diff256 <= 1e-4 and diff16 <= 1e-4


def test_resampler_matches_the_release(release):
    golden, sd, params = release
    resampler = Resampler(**params["image_proj_stage_config"]["params"]).eval()
    resampler.load_state_dict(_part(sd, "image_proj_model."), strict=True)
    with torch.no_grad():
        diff = (resampler(golden["resampler"]["x"]) - golden["resampler"]["out"]).abs().max().item()
    print(f"resampler max abs diff {diff:.3g}")
    assert diff <= 1e-4
