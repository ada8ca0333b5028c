"""Sampling and the training loss of ShowHowTo's generator, as the release computes them.

Conditions (the release's predict.py and train.py):
- every frame f gets the context row `[tokens of prompt f (77) | the scene's image tokens]`;
- the scene image's latent (a posterior draw) is concatenated to every frame's noisy latent;
- the frame stride `fs` is 1;
- unconditional = empty prompts and the image tokens of an all-zero image; the scene latent stays.
Guidance is `eps_u + s (eps_c - eps_u)`, one scale (7.5 by default).

DDIM (the release's sampler, `uniform` spacing): timesteps `range(0, 1000, 1000 // steps) + 1`
(the first `steps` of them),
alphas from the model's `alphas_cumprod`, `sigma = eta sqrt((1 - a_prev) / (1 - a) (1 - a / a_prev))`,
eta 1.0 by default; every step draws noise (also at eta 0, where it is multiplied by 0).

Random numbers, per sequence and in the release's order, from that sequence's own generator (so a
sequence's images depend on its seed only, not on its batch): one posterior draw per frame of the
scene's latent (the release encodes the scene repeated over the frames and keeps frame 0's), the
initial noise, then each step's noise. On a CPU, a generator seeded S gives the release's numbers
after `torch.manual_seed(S)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from vi.pipelines.showhowto.generator_model import ShowHowToModel

FRAME_STRIDE = 1  # what the release passes as `fs`, in training and in predict.py


@dataclass(frozen=True)
class Sampling:
    steps: int = 50
    guidance: float = 7.5
    eta: float = 1.0


@dataclass(frozen=True)
class DDIMSchedule:
    timesteps: np.ndarray  # increasing, as the release lists them
    alphas: torch.Tensor  # float32 scalars per index, as the release rounds them
    alphas_prev: torch.Tensor
    sigmas: torch.Tensor
    sqrt_one_minus_alphas: torch.Tensor


def ddim_schedule(alphas_cumprod: torch.Tensor, steps: int, eta: float) -> DDIMSchedule:
    total = len(alphas_cumprod)
    if not 1 <= steps <= total:
        raise ValueError(f"--steps must be in 1..{total}, got {steps}")
    # the release's range(0, total, total // steps) + 1; when steps does not divide total that range has
    # one more entry and the release indexes past its schedule: here it stops at `steps` entries
    timesteps = np.arange(steps) * (total // steps) + 1
    cumprod = alphas_cumprod.detach().float().cpu()
    alphas = cumprod[timesteps]
    alphas_prev = torch.cat([cumprod[:1], cumprod[timesteps[:-1]]])
    a, a_prev = alphas.double(), alphas_prev.double()
    sigmas = eta * torch.sqrt((1 - a_prev) / (1 - a) * (1 - a / a_prev))
    return DDIMSchedule(timesteps, alphas, alphas_prev, sigmas.float(), torch.sqrt(1.0 - alphas))


def _randn(shape: tuple, generators: list[torch.Generator]) -> torch.Tensor:
    """One draw per sequence from its own generator (on the CPU: the same numbers on every device)."""
    return torch.cat([torch.randn((1, *shape), generator=g) for g in generators])


@torch.no_grad()
def generate(model: ShowHowToModel, images: torch.Tensor, prompts: list[list[str]], sampling: Sampling,
             generators: list[torch.Generator]) -> torch.Tensor:
    """images (B, 3, H, W) in [-1, 1], prompts B lists of T texts (the scene's description first),
    one CPU generator per sequence -> frames (B, T, 3, H, W) in [-1, 1] (unclamped, as decoded);
    frame 0 is the model's rendering of the scene."""
    batch, frames = images.shape[0], len(prompts[0])
    if any(len(p) != frames for p in prompts):
        raise ValueError("a batch holds sequences of one length")
    device = model.device
    images = images.to(device)
    tokens = model.image_tokens(images)
    empty_tokens = model.image_tokens(torch.zeros_like(images))
    text = model.encode_text([t for sequence in prompts for t in sequence])
    empty = model.encode_text([""]).expand(batch * frames, -1, -1)
    cond = torch.cat([text, tokens.repeat_interleave(frames, dim=0)], dim=1)
    uncond = torch.cat([empty, empty_tokens.repeat_interleave(frames, dim=0)], dim=1)
    moments = model.latent_moments(images)
    channels, h, w = moments.shape[1] // 2, moments.shape[2], moments.shape[3]
    # the release draws a posterior sample for each of the T copies of the scene and keeps the first
    draws = torch.stack([torch.cat([torch.randn((1, channels, h, w), generator=g) for _ in range(frames)])
                         for g in generators])
    scene = model.sample_latents(moments, draws[:, 0].to(device))
    schedule = ddim_schedule(model.alphas_cumprod, sampling.steps, sampling.eta)
    x = _randn((channels, frames, h, w), generators).to(device)
    fs = torch.full((batch,), FRAME_STRIDE, dtype=torch.long, device=device)
    guided = sampling.guidance != 1.0
    context = torch.cat([cond, uncond]) if guided else cond
    for index in reversed(range(len(schedule.timesteps))):
        t = torch.full((batch,), int(schedule.timesteps[index]), dtype=torch.long, device=device)
        if guided:
            eps_c, eps_u = model.denoise(torch.cat([x, x]), torch.cat([t, t]), torch.cat([scene, scene]), context,
                                         torch.cat([fs, fs])).chunk(2)
            eps = eps_u + sampling.guidance * (eps_c - eps_u)
        else:
            eps = model.denoise(x, t, scene, context, fs)
        a_t, a_prev = schedule.alphas[index].item(), schedule.alphas_prev[index].item()
        sigma, sqrt_one_minus = schedule.sigmas[index].item(), schedule.sqrt_one_minus_alphas[index].item()
        pred_x0 = (x - sqrt_one_minus * eps) / torch.tensor(a_t).sqrt().item()
        direction = torch.tensor(1.0 - a_prev - sigma ** 2).sqrt().item() * eps
        noise = _randn((channels, frames, h, w), generators).to(device)  # drawn at every step, as released
        x = torch.tensor(a_prev).sqrt().item() * pred_x0 + direction + sigma * noise
    flat = x.transpose(1, 2).reshape(batch * frames, channels, h, w)
    return model.decode(flat).reshape(batch, frames, 3, images.shape[-2], images.shape[-1])


def to_uint8(frames: torch.Tensor) -> list[np.ndarray]:
    """(T, 3, H, W) frames -> T uint8 (H, W, 3) arrays, as predict.py converts: clamp to [-1, 1], then
    (x + 1) * 255 / 2 truncated (not rounded)."""
    pixels = frames.detach().float().cpu().clamp(-1, 1).add(1).mul(255 / 2).to(torch.uint8)
    return list(pixels.permute(0, 2, 3, 1).numpy())


def conditions(model: ShowHowToModel, prompts: list[list[str]], tokens: torch.Tensor,
               text_states: torch.Tensor | None = None) -> torch.Tensor:
    """The context rows of B sequences of T frames: each frame's prompt tokens, then the sequence's image
    tokens (B, queries, dim)."""
    frames = len(prompts[0])
    if text_states is None:
        text_states = model.encode_text([t for sequence in prompts for t in sequence])
    return torch.cat([text_states, tokens.repeat_interleave(frames, dim=0).to(text_states)], dim=1)


def diffusion_loss(model: ShowHowToModel, latents: torch.Tensor, context: torch.Tensor,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """The release's training loss: latents (B, C, T, h, w) (frame 0 the scene), a uniform timestep per
    sequence, eps-prediction MSE averaged per sequence then over the batch."""
    batch = latents.shape[0]
    noise = torch.randn(latents.shape, generator=generator, device=latents.device, dtype=latents.dtype)
    t = torch.randint(0, len(model.alphas_cumprod), (batch,), generator=generator, device=latents.device)
    noisy = model.q_sample(latents, t, noise)
    fs = torch.full((batch,), FRAME_STRIDE, dtype=torch.long, device=latents.device)
    prediction = model.denoise(noisy, t, latents[:, :, 0], context, fs)
    return F.mse_loss(prediction.float(), noise.float(), reduction="none").mean(dim=(1, 2, 3, 4)).mean()
