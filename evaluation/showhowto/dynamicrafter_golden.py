"""Golden fixtures from the public ShowHowTo release (a DynamiCrafter fine-tune), for testing the
project's own re-implementation against the release's outputs.

It runs the release's own code, imported from a separate checkout given by `--release DIR`
(github soCzech/ShowHowTo at commit 29700e2633ed7d3f7958c411a82a76585cd64536); nothing of the
release is copied into this project and nothing here imports `vi`. The release needs kornia==0.7.4
(with kornia-rs) and open_clip_torch==2.22.0, installed outside the venv in a folder DEPS put on
PYTHONPATH.

It builds the tiny model of `tiny_model/tiny.yaml` (lvdm config format; its OpenCLIP encoders are
`tiny_model/vi-tiny-clip.json`; `--config` for another folder) on the CPU in fp32, gives it seeded
random weights that are exactly representable in fp16 (the release's zero-initialised layers
included), and writes into `--out`:

- `tiny_release.pt`: the raw state dict, as the release checkpoint showhowto_2to8steps.pt is stored
  (`model.state_dict()`), floating weights as fp16 and the noise-schedule buffers as fp32;
- `release_256_keys.json.gz`: every key and shape of the release's real 256 model (built on the meta
  device, no weights), so vi's built-in config is checked against it;
- `golden.pt`: inputs and the release's outputs for the U-Net, the resampler, the autoencoder, the
  OpenCLIP text and image encoders and predict.py's `image_guided_synthesis` (DDIM, 5 steps,
  guidance 7.5, eta 0 and 1), plus `meta`.

Remake the fixtures (from the project root):

    pip install --no-deps --target DEPS kornia==0.7.4 kornia-rs==0.1.7 open_clip_torch==2.22.0
    PYTHONPATH=DEPS python evaluation/showhowto/dynamicrafter_golden.py \\
        --release /path/to/ShowHowTo --out tests/showhowto/data/dynamicrafter

`--bench` (what vi.evaluation.showhowto.generator_bench runs) times predict.py's
`image_guided_synthesis` instead (DDIM, guidance 7.5, eta 1, one sequence) on the CPU with `--threads`
threads: it loads `--weights` (a release-format file, e.g. tiny_release.pt) into the release model built
from `--config`'s tiny.yaml, builds the inputs from `--seed` with `bench_inputs` (which vi's side calls
too), runs once untimed, then `--repeats` timed runs (each after `torch.manual_seed(SEED)`), and prints
one JSON line (seconds per sequence: the median); `--save FILE` keeps the last run's frames (T, 3, H, W):

    PYTHONPATH=DEPS python evaluation/showhowto/dynamicrafter_golden.py --release /path/to/ShowHowTo \\
        --bench --weights tests/showhowto/data/dynamicrafter/tiny_release.pt --steps 10 --frames 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

RELEASE_COMMIT = "29700e2633ed7d3f7958c411a82a76585cd64536"

# DDPM buffers kept as the release computed them (fp32, never randomised).
SCHEDULE_BUFFERS = {
    "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod", "sqrt_one_minus_alphas_cumprod",
    "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod",
    "posterior_variance", "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2",
}
WEIGHT_SEED = 0
INPUT_SEED = 1
SAMPLE_SEED = 1234
SCALE_MATRIX = 0.2  # ndim >= 2
SCALE_VECTOR = 0.05  # ndim <= 1 (biases, embeddings of one dimension)
SCALE_NORM = 0.05  # norm weights are 1 + SCALE_NORM * randn
SCALE_ALPHA = 0.5  # image cross-attention `alpha` (used as tanh(alpha) + 1)

TEXT_PROMPTS = [
    "Crack two eggs into a bowl and whisk them with a fork.",
    # longer than 77 CLIP tokens: tokenize() truncates it and puts the end token last
    "First preheat the oven to two hundred degrees, then line a large baking tray with parchment paper, "
    "peel and chop the potatoes, carrots and onions into even bite-sized pieces, toss them in olive oil "
    "with salt, pepper, garlic and rosemary, spread them in a single layer on the tray and roast them "
    "for forty minutes, turning them halfway through, until they are golden and crisp at the edges.",
    "",
]
SAMPLE_PROMPTS = [
    "A wooden cutting board with a loaf of bread on a kitchen counter.",
    "Slice the bread.",
    "Spread butter on the slices.",
]
BENCH_PROMPTS = SAMPLE_PROMPTS + ["Put cheese on the bread.", "Add slices of tomato.", "Close the sandwich.",
                                  "Cut it in half.", "Serve it on a plate."]


def bench_inputs(seed: int, frames: int, size: int) -> tuple[torch.Tensor, list[str]]:
    """The `--bench` inputs, also what vi's side of the benchmark uses: a (1, 3, size, size) scene image
    in [-1, 1] drawn from `seed`, and `frames` prompts (the scene's description first)."""
    if not 1 <= frames <= len(BENCH_PROMPTS):
        raise ValueError(f"frames {frames}: 1..{len(BENCH_PROMPTS)}")
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, 3, size, size, generator=g) * 2 - 1, BENCH_PROMPTS[:frames]


def load_release(release: Path):
    sys.path.insert(0, str(release))
    import open_clip
    from lvdm.utils import instantiate_from_config
    import predict
    from lvdm.models.samplers.ddim import DDIMSampler

    return open_clip, instantiate_from_config, predict, DDIMSampler


def build_model(instantiate_from_config, config_path: Path):
    from omegaconf import OmegaConf

    model = instantiate_from_config(OmegaConf.load(config_path)["model"])
    model = model.eval().to(device="cpu", dtype=torch.float32)
    # FrozenOpenCLIPEmbedder sends its tokens to `self.device`, "cuda" by default (tiny.yaml, like the
    # release configs, does not set it): point it at the CPU.
    model.cond_stage_model.device = "cpu"
    return model


def norm_weight_names(model: nn.Module) -> set[str]:
    names = set()
    for mod_name, mod in model.named_modules():
        if isinstance(mod, (nn.LayerNorm, nn.GroupNorm)) and getattr(mod, "weight", None) is not None:
            names.add(f"{mod_name}.weight" if mod_name else "weight")
    return names


def random_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Seeded random weights, exactly representable in fp16, in sorted key order."""
    g = torch.Generator().manual_seed(WEIGHT_SEED)
    norms = norm_weight_names(model)
    sd = model.state_dict()
    out = {}
    for key in sorted(sd):
        value = sd[key]
        if not value.is_floating_point() or key in SCHEDULE_BUFFERS:
            out[key] = value.clone()
            continue
        noise = torch.randn(value.shape, generator=g)
        if key in norms:
            new = 1 + SCALE_NORM * noise
        elif key.rsplit(".", 1)[-1] == "alpha":
            new = SCALE_ALPHA * noise
        elif value.ndim >= 2:
            new = SCALE_MATRIX * noise
        else:
            new = SCALE_VECTOR * noise
        out[key] = new.half().float()
    return out


def patch_ddim_register_buffer(DDIMSampler):
    # The release's DDIMSampler.register_buffer moves every tensor to "cuda"; on this CPU-only run
    # it keeps the tensor where it is (the release checkout itself is not edited).
    def register_buffer(self, name, attr):
        setattr(self, name, attr)

    DDIMSampler.register_buffer = register_buffer


class RandnLog:
    """Records the shapes of the global-RNG torch.randn / randn_like draws (values unchanged)."""

    def __init__(self):
        self.calls: list[tuple[str, list[int]]] = []

    def __enter__(self):
        self._randn, self._randn_like = torch.randn, torch.randn_like
        log = self.calls

        def randn(*args, **kwargs):
            t = self._randn(*args, **kwargs)
            if kwargs.get("generator") is None:
                log.append(("randn", list(t.shape)))
            return t

        def randn_like(*args, **kwargs):
            t = self._randn_like(*args, **kwargs)
            log.append(("randn_like", list(t.shape)))
            return t

        torch.randn, torch.randn_like = randn, randn_like
        return self

    def __exit__(self, *exc):
        torch.randn, torch.randn_like = self._randn, self._randn_like


def release_256_keys(release: Path, open_clip, instantiate_from_config) -> dict[str, list[int]]:
    """Every key and shape of the release's real model (configs/inference_256_v1.1.yaml), its parts built on
    the meta device (no weights: OpenCLIP's ViT-H-14 without its pretrained tag, nothing downloaded)."""
    from omegaconf import OmegaConf

    params = OmegaConf.load(release / "configs" / "inference_256_v1.1.yaml")["model"]["params"]
    for name in ("cond_stage_config", "img_cond_stage_config"):
        params[name]["params"]["version"] = None
    original = open_clip.create_model_and_transforms

    def on_meta(*args, **kwargs):  # the embedders build on "cpu" and then move: build on meta instead
        return original(*args, **{**kwargs, "device": torch.device("meta")})

    open_clip.create_model_and_transforms = on_meta
    keys = {}
    try:
        with torch.device("meta"):
            for prefix, name in (("model.diffusion_model.", "unet_config"), ("first_stage_model.", "first_stage_config"),
                                 ("cond_stage_model.", "cond_stage_config"), ("embedder.", "img_cond_stage_config"),
                                 ("image_proj_model.", "image_proj_stage_config")):
                part = instantiate_from_config(params[name])
                keys.update({prefix + k: list(v.shape) for k, v in part.state_dict().items()})
    finally:
        open_clip.create_model_and_transforms = original
    # the noise schedule's buffers (DDPM.register_schedule computes them with numpy: not on meta)
    keys.update({name: [int(params.get("timesteps", 1000))] for name in SCHEDULE_BUFFERS})
    return dict(sorted(keys.items()))


def release_commit(release: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(release), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def check(name: str, t: torch.Tensor, limit: float = 1e3):
    amax = t.abs().max().item()
    if not torch.isfinite(t).all() or amax > limit:
        raise SystemExit(f"{name}: not finite or exploding (max |x| = {amax:.3g})")
    print(f"{name}: shape {tuple(t.shape)} max|x| {amax:.4g} std {t.float().std().item():.4g}")


def bench(args) -> dict:
    """Times the release's image_guided_synthesis on one sequence (see the module's docstring)."""
    torch.set_num_threads(args.threads)
    commit = release_commit(args.release)
    open_clip, instantiate_from_config, predict, DDIMSampler = load_release(args.release.resolve())
    open_clip.add_model_config(args.config / "vi-tiny-clip.json")
    patch_ddim_register_buffer(DDIMSampler)
    model = build_model(instantiate_from_config, args.config / "tiny.yaml")
    state = torch.load(args.weights, map_location="cpu", weights_only=True)
    model.load_state_dict({k: (v.float() if v.dtype == torch.float16 else v) for k, v in state.items()}, strict=True)
    latent = [int(model.image_size)] * 2 if isinstance(model.image_size, int) else [int(n) for n in model.image_size]
    size = latent[0] * 2 ** (len(model.first_stage_model.encoder.down) - 1)
    image, prompts = bench_inputs(args.seed, args.frames, size)
    videos = image.unsqueeze(2).repeat(1, 1, args.frames, 1, 1)  # b c t h w, as predict.py's repeat
    noise_shape = [1, model.channels, args.frames, *latent]

    def run() -> tuple[float, torch.Tensor]:
        torch.manual_seed(args.seed)
        start = time.perf_counter()
        out = predict.image_guided_synthesis(model, list(prompts), videos, noise_shape, ddim_steps=args.steps,
                                             ddim_eta=args.eta, unconditional_guidance_scale=args.guidance)
        return time.perf_counter() - start, out

    warm_up, _ = run()
    samples = []
    for _ in range(args.repeats):
        seconds, out = run()
        samples.append(seconds)
    if args.save is not None:
        torch.save(out[0, 0].transpose(0, 1).contiguous(), args.save)  # (T, 3, H, W)
    return {"seconds_per_sequence": statistics.median(samples), "samples": samples, "warm_up": warm_up,
            "threads": torch.get_num_threads(), "steps": args.steps, "frames": args.frames, "size": size,
            "guidance": args.guidance, "eta": args.eta, "seed": args.seed, "release_commit": commit,
            "torch": str(torch.__version__)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", type=Path, required=True, help="ShowHowTo checkout at " + RELEASE_COMMIT)
    parser.add_argument("--out", type=Path, help="where tiny_release.pt and golden.pt go")
    parser.add_argument("--config", type=Path, default=Path(__file__).parent / "tiny_model",
                        help="folder with tiny.yaml and vi-tiny-clip.json (default: tiny_model/ beside this script)")
    timing = parser.add_argument_group("--bench: time image_guided_synthesis instead of writing fixtures")
    timing.add_argument("--bench", action="store_true")
    timing.add_argument("--weights", type=Path, help="a release-format state dict for --config's tiny.yaml")
    timing.add_argument("--steps", type=int, default=10, help="DDIM steps (default 10)")
    timing.add_argument("--frames", type=int, default=4, help="frames of the sequence (default 4)")
    timing.add_argument("--guidance", type=float, default=7.5)
    timing.add_argument("--eta", type=float, default=1.0)
    timing.add_argument("--seed", type=int, default=SAMPLE_SEED, help="inputs and sampling seed")
    timing.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    timing.add_argument("--repeats", type=int, default=3, help="timed runs after one untimed (default 3)")
    timing.add_argument("--save", type=Path, help="write the last run's frames (T, 3, H, W) here")
    args = parser.parse_args(argv)

    torch.set_grad_enabled(False)
    if args.bench:
        if args.weights is None:
            parser.error("--bench needs --weights")
        print(json.dumps(bench(args)))
        return
    if args.out is None:
        parser.error("--out is required (unless --bench)")
    commit = release_commit(args.release)
    if commit != RELEASE_COMMIT:
        print(f"warning: release checkout is at {commit}, not {RELEASE_COMMIT}", file=sys.stderr)

    open_clip, instantiate_from_config, predict, DDIMSampler = load_release(args.release.resolve())
    import kornia
    from open_clip.version import __version__ as open_clip_version

    open_clip.add_model_config(args.config / "vi-tiny-clip.json")
    patch_ddim_register_buffer(DDIMSampler)

    # -- weights --------------------------------------------------------------------------------
    model = build_model(instantiate_from_config, args.config / "tiny.yaml")
    weights = random_state_dict(model)
    model.load_state_dict(weights, strict=True)

    release_sd = {k: (v.half() if v.is_floating_point() and k not in SCHEDULE_BUFFERS else v)
                  for k, v in model.state_dict().items()}
    torch.save(release_sd, args.out / "tiny_release.pt")
    fresh = build_model(instantiate_from_config, args.config / "tiny.yaml")
    loaded = torch.load(args.out / "tiny_release.pt", map_location="cpu", weights_only=True)
    fresh.load_state_dict({k: (v.float() if v.dtype == torch.float16 else v) for k, v in loaded.items()}, strict=True)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k
    del fresh, loaded

    # -- module goldens -------------------------------------------------------------------------
    g = torch.Generator().manual_seed(INPUT_SEED)
    golden: dict = {}

    x = torch.randn(2, 8, 3, 4, 4, generator=g)
    timesteps = torch.tensor([10, 500], dtype=torch.long)
    context = torch.randn(2 * 3, 77 + 64, 8, generator=g)
    fs = torch.tensor([1, 1], dtype=torch.long)
    out = model.model.diffusion_model(x, timesteps, context=context, fs=fs)
    check("unet", out)
    golden["unet"] = {"x": x, "timesteps": timesteps, "context": context, "fs": fs, "out": out}

    xr = torch.randn(2, 17, 48, generator=g)
    out = model.image_proj_model(xr)
    check("resampler", out)
    golden["resampler"] = {"x": xr, "out": out}

    images = torch.rand(2, 3, 16, 16, generator=g) * 2 - 1
    posterior = model.first_stage_model.encode(images)
    z = torch.randn(2, 4, 4, 4, generator=g)
    decoded = model.first_stage_model.decode(z)
    check("autoencoder.mean", posterior.mean)
    check("autoencoder.decoded", decoded)
    golden["autoencoder"] = {"images": images, "posterior_mean": posterior.mean,
                             "posterior_logvar": posterior.logvar, "z": z, "decoded": decoded}

    tokens = open_clip.tokenize(TEXT_PROMPTS)
    out = model.get_learned_conditioning(TEXT_PROMPTS)
    check("text", out)
    golden["text"] = {"prompts": list(TEXT_PROMPTS), "tokens": tokens, "out": out}

    # values k/128 - 1 (k = 0..255): exact in fp16, so the 256 px image is stored as fp16 (cast .float())
    img256 = torch.randint(0, 256, (1, 3, 256, 256), generator=g).float() / 128 - 1
    img16 = torch.rand(1, 3, 16, 16, generator=g) * 2 - 1
    out256 = model.embedder(img256)
    out16 = model.embedder(img16)
    check("image.out256", out256)
    check("image.out16", out16)
    golden["image"] = {"img256": img256.half(), "out256": out256, "img16": img16, "out16": out16}

    # -- predict.py's image_guided_synthesis ----------------------------------------------------
    image = torch.rand(1, 3, 16, 16, generator=g) * 2 - 1
    videos = image.unsqueeze(2).repeat(1, 1, len(SAMPLE_PROMPTS), 1, 1)  # b c t h w, as predict.py's repeat
    noise_shape = [1, 4, len(SAMPLE_PROMPTS), 4, 4]
    for eta in (0.0, 1.0):
        decode_inputs, encode_outputs = [], []
        decode, encode = model.decode_first_stage, model.encode_first_stage

        def decode_first_stage(z, **kwargs):
            decode_inputs.append(z.clone())
            return decode(z, **kwargs)

        def encode_first_stage(x):
            z = encode(x)
            encode_outputs.append(z.clone())
            return z

        model.decode_first_stage, model.encode_first_stage = decode_first_stage, encode_first_stage
        torch.manual_seed(SAMPLE_SEED)
        with RandnLog() as randn_log:
            out = predict.image_guided_synthesis(
                model, list(SAMPLE_PROMPTS), videos, noise_shape, ddim_steps=5, ddim_eta=eta,
                unconditional_guidance_scale=7.5)
        del model.decode_first_stage, model.encode_first_stage
        check(f"sample_eta{eta:g}", out)
        golden[f"sample_eta{eta:g}"] = {
            "image": image, "videos": videos, "prompts": list(SAMPLE_PROMPTS), "noise_shape": list(noise_shape),
            "ddim_steps": 5, "unconditional_guidance_scale": 7.5, "ddim_eta": eta, "seed": SAMPLE_SEED,
            "out": out, "latents": decode_inputs[0], "encoded": encode_outputs[0],
            "randn_calls": [f"{kind}{tuple(shape)}" for kind, shape in randn_log.calls],
        }

    golden["meta"] = {
        "release": "github.com/soCzech/ShowHowTo", "release_commit": commit, "torch": str(torch.__version__),
        "open_clip": str(open_clip_version), "kornia": str(kornia.__version__),
        "command": "PYTHONPATH=" + os.environ.get("PYTHONPATH", "") + " python " + " ".join(sys.argv),
        "weight_seed": WEIGHT_SEED, "input_seed": INPUT_SEED,
        "weight_scales": {"ndim>=2": SCALE_MATRIX, "ndim<=1": SCALE_VECTOR, "norm_weight": f"1 + {SCALE_NORM}*randn",
                          "alpha": SCALE_ALPHA},
        "notes": "image.img256 is stored as fp16 (exact values k/128-1): cast with .float(). "
                 "autoencoder.posterior_logvar is DiagonalGaussianDistribution.logvar (clamped to [-30, 20]). "
                 "sample_eta*.latents: the sampler's output (decode_first_stage's input); "
                 "encoded: encode_first_stage(videos) (posterior samples times scale_factor).",
    }
    torch.save(golden, args.out / "golden.pt")
    torch.load(args.out / "golden.pt", map_location="cpu", weights_only=True)  # plain tensors and builtins only
    import gzip

    with gzip.open(args.out / "release_256_keys.json.gz", "wt") as f:
        json.dump(release_256_keys(args.release.resolve(), open_clip, instantiate_from_config), f)
    for name in ("tiny_release.pt", "golden.pt", "release_256_keys.json.gz"):
        print(f"{name}: {(args.out / name).stat().st_size / 1e6:.3f} MB")


if __name__ == "__main__":
    main()
