"""ShowHowTo's generator (Sec. 4) as released: DynamiCrafter's latent video diffusion, parts named
as in the release so its files load as they are.

`ShowHowToModel` holds, under the release's attribute names (so `state_dict()` keys match):
- `model.diffusion_model`: the 3D U-Net (generator_unet); its input is every frame's noisy latent
  with the scene image's latent concatenated on channels;
- `first_stage_model`: the KL autoencoder (diffusers' AutoencoderKL; generator_vae maps its keys to
  and from the release's);
- `cond_stage_model`: OpenCLIP's text encoder, penultimate layer (generator_encoders);
- `embedder` and `image_proj_model`: OpenCLIP's image tokens of the scene through the Resampler;
- the noise schedule as buffers (`betas`, `alphas_cumprod`, ...), which release files carry too.

A model is (a) a release file: `showhowto_2to8steps.pt` (a raw state dict) or DynamiCrafter's
`dynamicrafter_256_v1.ckpt` (a Lightning checkpoint: its `state_dict`), with (b) a model config in
lvdm's YAML layout: the release's 256 config is built in (model_configs/showhowto_256.yaml); a file
`NAME.yaml` beside `NAME.pt` or `--model-config FILE` gives another (the tests' tiny ones). Or (c) a
`vi train showhowto` checkpoint folder: `showhowto.json` naming the base file and config, and
`unet.pt`, the trained U-Net's weights.

Files are read memory-mapped into a model built on the meta device: a 2.5 GB checkpoint is never
held twice in RAM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vi.pipelines.showhowto.generator_unet import UNetConfig, UNetModel

BUILTIN = "showhowto_256"  # the release's config (configs/inference_256_v1.1.yaml)
CHECKPOINT = "showhowto.json"  # a vi train showhowto checkpoint folder's description
TRAINED = "unet.pt"  # ... and its trained weights (the U-Net: what the release trains)
UNET = "model.diffusion_model."
VAE = "first_stage_model."
SCHEDULE = ("betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod", "sqrt_one_minus_alphas_cumprod",
            "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod",
            "posterior_variance", "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2")
# What each part of an lvdm config must be (the last part of its `target`): vi implements these.
TARGETS = {"": "LatentVisualDiffusion", "unet_config": "UNetModel", "first_stage_config": "AutoencoderKL",
           "cond_stage_config": "FrozenOpenCLIPEmbedder", "img_cond_stage_config": "FrozenOpenCLIPImageEmbedderV2",
           "image_proj_stage_config": "Resampler"}


@dataclass(frozen=True)
class ModelSpec:
    """A generator's architecture, read from an lvdm model config."""

    unet: UNetConfig
    ddconfig: dict
    embed_dim: int
    text_clip: dict  # open_clip model configs
    text_layer: str
    image_clip: dict
    resampler: dict
    latent_size: tuple[int, int]
    scale_factor: float = 0.18215
    linear_start: float = 0.00085
    linear_end: float = 0.012
    timesteps: int = 1000
    source: str = BUILTIN
    text_arch: str = ""
    image_arch: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def image_size(self) -> int:
        """Square frames in pixels: the latent size times the autoencoder's downsampling."""
        return self.latent_size[0] * 2 ** (len(self.ddconfig["ch_mult"]) - 1)

    @property
    def max_frames(self) -> int:
        return self.unet.temporal_length

    @property
    def latent_channels(self) -> int:
        return self.unet.out_channels


def builtin_config() -> Path:
    return Path(str(resources.files("vi.pipelines.showhowto") / "model_configs" / f"{BUILTIN}.yaml"))


def read_spec(path: Path | None = None) -> ModelSpec:
    """An lvdm model config (the release's YAML layout) as a ModelSpec; None: the built-in 256 one.
    Another architecture is refused naming the field."""
    import yaml

    from vi.pipelines.showhowto.generator_encoders import clip_config

    path = Path(path) if path is not None else builtin_config()
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"--model-config {path}: cannot be read as YAML ({exc})") from None
    params = (data or {}).get("model", {}).get("params") if isinstance(data, dict) else None
    if not isinstance(params, dict):
        raise ValueError(f"--model-config {path}: expected lvdm's layout (model: target, params: ...), as "
                         "ShowHowTo's configs/inference_256_v1.1.yaml")

    def part(name: str) -> dict:
        node = data["model"] if not name else params.get(name)
        where = f"model.params.{name}" if name else "model"
        if not isinstance(node, dict):
            raise ValueError(f"--model-config {path}: {where} is missing")
        target = str(node.get("target", ""))
        if target.rsplit(".", 1)[-1] != TARGETS[name]:
            raise ValueError(f"--model-config {path}: {where}.target is {target!r}; vi implements "
                             f"{TARGETS[name]} there (DynamiCrafter as ShowHowTo uses it)")
        return node.get("params") or {}

    part("")
    for name, want in (("conditioning_key", "hybrid"), ("parameterization", "eps"), ("rescale_betas_zero_snr", False),
                       ("beta_schedule", "linear"), ("scale_by_std", False)):
        if params.get(name, want) != want:
            raise ValueError(f"--model-config {path}: model.params.{name} is {params[name]!r}; vi supports {want!r}")
    search = [path.parent]
    text, image = part("cond_stage_config"), part("img_cond_stage_config")
    text_arch, image_arch = text.get("arch", "ViT-H-14"), image.get("arch", "ViT-H-14")
    first = part("first_stage_config")
    size = params.get("image_size", [32, 32])
    return ModelSpec(
        unet=UNetConfig.from_params(part("unet_config")), ddconfig=dict(first["ddconfig"]),
        embed_dim=int(first["embed_dim"]), text_clip=clip_config(text_arch, search),
        text_layer=text.get("layer", "last"), image_clip=clip_config(image_arch, search),
        resampler=dict(part("image_proj_stage_config")),
        latent_size=tuple(size) if isinstance(size, list) else (size, size),
        scale_factor=float(params.get("scale_factor", 1.0)), linear_start=float(params.get("linear_start", 1e-4)),
        linear_end=float(params.get("linear_end", 2e-2)), timesteps=int(params.get("timesteps", 1000)),
        source=str(path), text_arch=text_arch, image_arch=image_arch)


class _Wrapper(nn.Module):
    """`model.diffusion_model`: the release's DiffusionWrapper, which only holds the U-Net."""

    def __init__(self, unet: UNetModel):
        super().__init__()
        self.diffusion_model = unet


def schedule(spec: ModelSpec) -> dict[str, torch.Tensor]:
    """The linear ("scaled linear") noise schedule's buffers, computed in float64 and stored as float32,
    under the release's names."""
    betas = np.linspace(spec.linear_start ** 0.5, spec.linear_end ** 0.5, spec.timesteps, dtype=np.float64) ** 2
    alphas = 1.0 - betas
    cumprod = np.cumprod(alphas)
    previous = np.append(1.0, cumprod[:-1])
    variance = betas * (1.0 - previous) / (1.0 - cumprod)
    values = {
        "betas": betas, "alphas_cumprod": cumprod, "alphas_cumprod_prev": previous,
        "sqrt_alphas_cumprod": np.sqrt(cumprod), "sqrt_one_minus_alphas_cumprod": np.sqrt(1.0 - cumprod),
        "log_one_minus_alphas_cumprod": np.log(1.0 - cumprod), "sqrt_recip_alphas_cumprod": np.sqrt(1.0 / cumprod),
        "sqrt_recipm1_alphas_cumprod": np.sqrt(1.0 / cumprod - 1), "posterior_variance": variance,
        "posterior_log_variance_clipped": np.log(np.maximum(variance, 1e-20)),
        "posterior_mean_coef1": betas * np.sqrt(previous) / (1.0 - cumprod),
        "posterior_mean_coef2": (1.0 - previous) * np.sqrt(alphas) / (1.0 - cumprod)}
    return {name: torch.tensor(values[name], dtype=torch.float32) for name in SCHEDULE}


class ShowHowToModel(nn.Module):
    def __init__(self, spec: ModelSpec):
        from vi.pipelines.showhowto.generator_encoders import OpenClipImage, OpenClipText, Resampler
        from vi.pipelines.showhowto.generator_vae import autoencoder_from_ddconfig

        super().__init__()
        self.spec = spec
        self.model = _Wrapper(UNetModel(spec.unet))
        self.first_stage_model = autoencoder_from_ddconfig(spec.ddconfig, spec.embed_dim)
        self.cond_stage_model = OpenClipText(spec.text_clip, spec.text_layer)
        self.embedder = OpenClipImage(spec.image_clip)
        self.image_proj_model = Resampler(**spec.resampler)
        for name, value in schedule(spec).items():
            self.register_buffer(name, value)
        for frozen in (self.first_stage_model, self.cond_stage_model, self.embedder, self.image_proj_model):
            frozen.requires_grad_(False)

    def train(self, mode: bool = True) -> ShowHowToModel:
        """Only the U-Net ever trains: the frozen parts stay in eval mode (the release's disabled_train)."""
        super().train(mode)
        for frozen in (self.first_stage_model, self.cond_stage_model, self.embedder, self.image_proj_model):
            frozen.eval()
        return self

    @property
    def unet(self) -> UNetModel:
        return self.model.diffusion_model

    @property
    def device(self) -> torch.device:
        return self.betas.device

    def materialize(self) -> None:
        """Rebuild what a state dict does not hold (non-persistent buffers) after a meta-device load."""
        self.cond_stage_model.materialize()
        self.embedder.materialize()

    def place(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> ShowHowToModel:
        """On `device`; the U-Net, encoders and Resampler in `dtype`; the autoencoder and the schedule
        stay float32 (as the release runs them)."""
        self.to(device)
        for part in (self.model, self.cond_stage_model, self.embedder, self.image_proj_model):
            part.to(dtype)
        self.first_stage_model.float()
        return self

    # --- the frozen parts ------------------------------------------------------------------------

    @torch.no_grad()
    def encode_text(self, texts: list[str]) -> torch.Tensor:
        """(len(texts), 77, context_dim): OpenCLIP's tokens of each text."""
        return self.cond_stage_model(texts)

    @torch.no_grad()
    def image_tokens(self, images: torch.Tensor) -> torch.Tensor:
        """(B, queries, context_dim): the Resampler's tokens of the scene images (B, 3, H, W) in [-1, 1]."""
        dtype = next(self.embedder.parameters()).dtype
        return self.image_proj_model(self.embedder(images.to(dtype)))

    @torch.no_grad()
    def latent_moments(self, frames: torch.Tensor) -> torch.Tensor:
        """The autoencoder's posterior (mean | logvar on channels) of (n, 3, H, W) frames in [-1, 1]."""
        posterior = self.first_stage_model.encode(frames.float()).latent_dist
        return torch.cat([posterior.mean, posterior.logvar], dim=1)

    def sample_latents(self, moments: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        """A posterior draw, scaled: (mean + std * noise) * scale_factor (the release samples it); noise None:
        the mean."""
        from vi.pipelines.showhowto.generator_vae import sample_posterior

        return sample_posterior(moments, None if noise is None else noise.to(moments)) * self.spec.scale_factor

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, chunk: int = 4) -> torch.Tensor:
        """(n, C, h, w) scaled latents -> (n, 3, H, W) frames, a few frames at a time (the release decodes
        one at a time: the decoder's activations at 256 px are what costs memory)."""
        out = [self.first_stage_model.decode(part.float() / self.spec.scale_factor).sample
               for part in latents.split(chunk)]
        return torch.cat(out)

    # --- the denoiser ----------------------------------------------------------------------------

    def denoise(self, noisy: torch.Tensor, timesteps: torch.Tensor, scene: torch.Tensor, context: torch.Tensor,
                fs: torch.Tensor) -> torch.Tensor:
        """noisy (B, C, T, h, w); scene (B, C, h, w) the scene image's latent, given to every frame;
        context (B*T, tokens, dim) one row per frame -> the predicted noise."""
        dtype = next(self.unet.parameters()).dtype
        concat = scene.unsqueeze(2).expand(-1, -1, noisy.shape[2], -1, -1)
        x = torch.cat([noisy, concat], dim=1).to(dtype)
        return self.unet(x, timesteps, context.to(dtype), fs).float()

    def q_sample(self, latents: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        shape = (-1,) + (1,) * (latents.dim() - 1)
        return (self.sqrt_alphas_cumprod[t].view(shape) * latents
                + self.sqrt_one_minus_alphas_cumprod[t].view(shape) * noise)


# --- files -------------------------------------------------------------------------------------------

def _levels(spec: ModelSpec) -> int:
    return len(spec.ddconfig["ch_mult"])


def from_release(state: dict, spec: ModelSpec) -> dict:
    """A release state dict -> this module's names: the autoencoder's keys mapped to diffusers';
    DynamiCrafter's `framestride_embed` is the release's `fps_embedding` (its loader renames it too)."""
    from vi.pipelines.showhowto.generator_vae import ldm_to_diffusers

    vae = ldm_to_diffusers({k[len(VAE):]: v for k, v in state.items() if k.startswith(VAE)}, _levels(spec))
    out = {k.replace("framestride_embed", "fps_embedding"): v for k, v in state.items() if not k.startswith(VAE)}
    out.update({VAE + k: v for k, v in vae.items()})
    return out


def to_release(state: dict, spec: ModelSpec) -> dict:
    """This module's state dict in the release's names: a file the release's predict.py loads."""
    from vi.pipelines.showhowto.generator_vae import diffusers_to_ldm

    vae = diffusers_to_ldm({k[len(VAE):]: v for k, v in state.items() if k.startswith(VAE)}, _levels(spec))
    out = {k: v for k, v in state.items() if not k.startswith(VAE)}
    out.update({VAE + k: v for k, v in vae.items()})
    return out


def read_state(path: Path) -> dict:
    """A release file's state dict, memory-mapped (a Lightning checkpoint: its `state_dict`)."""
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises several kinds for a file that is not a checkpoint
        raise ValueError(f"{path}: cannot be read as a PyTorch checkpoint ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:200]})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path}: not a state dict (nor a checkpoint with one under 'state_dict')")
    return state


def build(spec: ModelSpec, state: dict | None = None, origin: str = "") -> ShowHowToModel:
    """The model with `state` (release names) loaded strictly, built on the meta device so the weights
    are the file's (memory-mapped) tensors; random weights when `state` is None."""
    if state is None:
        return ShowHowToModel(spec).eval()
    # imported before the meta-device context: importing them inside it breaks torch._dynamo's import
    import open_clip  # noqa: F401
    from diffusers import AutoencoderKL  # noqa: F401

    with torch.device("meta"):
        model = ShowHowToModel(spec)
    mapped = from_release(state, spec)
    expected = model.state_dict().keys()
    missing, unexpected = sorted(set(expected) - set(mapped)), sorted(set(mapped) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{origin or 'the weights'}: not a ShowHowTo/DynamiCrafter model of the config {spec.source}: "
            f"{len(missing)} missing key(s) (e.g. {', '.join(missing[:3]) or '-'}), {len(unexpected)} unexpected "
            f"(e.g. {', '.join(unexpected[:3]) or '-'}); give --model-config for its size")
    model.load_state_dict(mapped, strict=True, assign=True)
    model.materialize()
    for name in SCHEDULE:  # the file's own schedule, float32 as the release keeps it
        setattr(model, name, getattr(model, name).float())
    return model.eval()


@dataclass(frozen=True)
class Source:
    """Where a generator's weights come from: a release file (+ its config), or a vi checkpoint."""

    weights: Path
    config: Path | None
    trained: Path | None = None  # a checkpoint's unet.pt, over the weights

    @property
    def describe(self) -> str:
        return str(self.trained.parent if self.trained else self.weights)


def model_config_for(weights: Path, given: Path | None) -> Path | None:
    """--model-config, else NAME.yaml beside NAME.pt, else None (the built-in 256 config)."""
    if given is not None:
        return Path(given)
    beside = Path(weights).with_suffix(".yaml")
    return beside if beside.is_file() else None


def resolve_source(path: Path, model_config: Path | None = None) -> Source:
    """A release file (or its name in `vi models`: showhowto-2to8steps, dynamicrafter-256), a checkpoint
    folder, or a training run (its newest checkpoint)."""
    from vi.core.models.resolve import resolve
    from vi.core.training import latest_checkpoint

    path = resolve(path, "generator")  # a catalogue name: its file in vi's cache
    if path.is_dir():
        found = path if (path / CHECKPOINT).is_file() else latest_checkpoint(path, CHECKPOINT)
        if found is None:
            raise FileNotFoundError(f"{path}: neither a ShowHowTo model file nor a vi train showhowto checkpoint "
                                    f"or run (no {CHECKPOINT})")
        described = json.loads((found / CHECKPOINT).read_text())
        base = (found / described["base"]).resolve()
        config = model_config or (Path(described["model_config"]) if described.get("model_config") else None)
        if config is not None and not config.is_absolute():
            config = (found / config).resolve()
        return Source(base, config, found / TRAINED)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file or folder")
    return Source(path, model_config_for(path, model_config))


def load(source: Source) -> ShowHowToModel:
    spec = read_spec(source.config)
    state = read_state(source.weights)
    if source.trained is not None:
        state = {**state, **{UNET + k: v for k, v in torch.load(source.trained, map_location="cpu", mmap=True,
                                                                 weights_only=True).items()}}
    return build(spec, state, origin=source.describe)


def save_release(model: ShowHowToModel, path: Path) -> None:
    """The whole model as a release file (a raw state dict in the release's names)."""
    torch.save(to_release(model.state_dict(), model.spec), path)


def save_checkpoint(model: ShowHowToModel, folder: Path, base: Path, model_config: Path | None, note: str = "") -> None:
    """A checkpoint folder: the trained U-Net, and where its frozen parts and config are."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().cpu().contiguous() for k, v in model.unet.state_dict().items()}, folder / TRAINED)
    description = {"base": str(Path(base).resolve()), "model_config": str(Path(model_config).resolve())
                   if model_config else None, "note": note}
    (folder / CHECKPOINT).write_text(json.dumps(description, indent=1) + "\n")
