"""The generator as one module: conditions, the training loss, and sampling (see generator_model
for the parts and the per-frame prompt mechanism).

Frames are tensors in [-1, 1], shape (batch, frames, 3, H, W). Frame 0 of a sequence is the input
image I_0; its latent is concatenated to every frame's noisy latent, and the model denoises all
frames, frame 0 included (as DynamiCrafter does); a generated sequence's steps are frames 1..n.

Guidance follows DynamiCrafter's two conditions: with eps(image, text),
    eps = eps(-, -) + s_img (eps(I, -) - eps(-, -)) + s_txt (eps(I, T) - eps(I, -))
where "-" is the dropped condition (zeros for the image, empty prompts for the text), the same
drop training applies with `drop_text` and `drop_image` probability.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vi.pipelines.showhowto.generator_model import Parts

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass
class Guidance:
    steps: int = 50
    text: float = 7.5
    image: float = 1.0  # 1: the image condition as is (no extrapolation)
    eta: float = 0.0  # DDIM's stochasticity


class ShowHowToGenerator(nn.Module):
    def __init__(self, parts: Parts):
        super().__init__()
        self.parts = parts
        self.unet, self.image_proj = parts.unet, parts.image_proj  # trained
        self.vae, self.text_encoder, self.image_encoder = parts.vae, parts.text_encoder, parts.image_encoder
        for frozen in (self.vae, self.text_encoder, self.image_encoder):
            frozen.requires_grad_(False)
            frozen.eval()
        self.config = parts.config
        self.noise = parts.scheduler

    def trainable(self) -> list[nn.Parameter]:
        return [p for m in (self.unet, self.image_proj) for p in m.parameters() if p.requires_grad]

    @property
    def device(self) -> torch.device:
        return next(self.unet.parameters()).device

    # --- frozen encoders -----------------------------------------------------------------------

    @torch.no_grad()
    def encode_prompts(self, prompts: list[list[str]]) -> torch.Tensor:
        """(batch, frames * text_tokens, width): every frame's prompt tokens side by side."""
        frames = {len(p) for p in prompts}
        if len(frames) != 1:
            raise ValueError(f"a batch holds sequences of one length, got {sorted(frames)}")
        flat = [text for sequence in prompts for text in sequence]
        ids = self.parts.tokenizer(flat).to(self.device)
        states = self.text_encoder(input_ids=ids).last_hidden_state
        return states.reshape(len(prompts), -1, states.shape[-1])

    @torch.no_grad()
    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """CLIP image embeddings of (batch, 3, H, W) frames in [-1, 1]."""
        size = self.image_encoder.config.image_size
        x = F.interpolate((images + 1) / 2, size=(size, size), mode="bicubic", align_corners=False).clamp(0, 1)
        mean = torch.tensor(CLIP_MEAN, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        std = torch.tensor(CLIP_STD, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        return self.image_encoder(pixel_values=((x - mean) / std).to(self.image_encoder.dtype)).image_embeds

    @torch.no_grad()
    def latent_moments(self, frames: torch.Tensor) -> torch.Tensor:
        """The VAE posterior (mean, logvar) of (n, 3, H, W) frames: (n, 2C, h, w), cacheable."""
        return self.vae.encode(frames.to(self.vae.dtype)).latent_dist.parameters

    def sample_latents(self, moments: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        mean, logvar = moments.chunk(2, dim=1)
        if not self.config.sample_posterior:
            return mean * self.vae.config.scaling_factor
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return (mean + torch.exp(0.5 * logvar.clamp(-30, 20)) * noise) * self.vae.config.scaling_factor

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """(n, C, h, w) scaled latents -> (n, 3, H, W) frames in [-1, 1]."""
        return self.vae.decode(latents / self.vae.config.scaling_factor).sample.clamp(-1, 1)

    # --- the denoiser --------------------------------------------------------------------------

    def conditions(self, image_embeds: torch.Tensor, text_states: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.image_proj(image_embeds).to(text_states.dtype), text_states], dim=1)

    def denoise(self, noisy: torch.Tensor, timesteps: torch.Tensor, first: torch.Tensor,
                states: torch.Tensor) -> torch.Tensor:
        """noisy (B, C, T, h, w), first = I_0's latent (B, C, h, w) -> the U-Net's prediction."""
        concat = first.unsqueeze(2).expand(-1, -1, noisy.shape[2], -1, -1)
        return self.unet(torch.cat([noisy, concat], dim=1), timesteps, encoder_hidden_states=states).sample

    def forward(self, *args, **kwargs) -> torch.Tensor:
        """The training loss (what accelerate's DDP wrapper calls)."""
        return self.loss(*args, **kwargs)

    def loss(self, latents: torch.Tensor, image_embeds: torch.Tensor, text_states: torch.Tensor,
             empty_text: torch.Tensor, drop_text: torch.Tensor, drop_image: torch.Tensor,
             generator: torch.Generator | None = None) -> torch.Tensor:
        """The diffusion loss of latents (B, C, T, h, w) whose frame 0 is I_0; `drop_*` are (B,)
        booleans saying which samples lose that condition (classifier-free guidance training)."""
        batch = latents.shape[0]
        noise = torch.randn(latents.shape, generator=generator, device=latents.device, dtype=latents.dtype)
        timesteps = torch.randint(0, self.noise.config.num_train_timesteps, (batch,), generator=generator,
                                  device=latents.device)
        noisy = self.noise.add_noise(latents, noise, timesteps)
        keep_image = (~drop_image).to(latents.dtype)
        first = latents[:, :, 0] * keep_image.view(-1, 1, 1, 1)
        text = torch.where(drop_text.view(-1, 1, 1), empty_text.expand_as(text_states), text_states)
        states = self.conditions(image_embeds * keep_image.view(-1, 1), text)
        prediction = self.denoise(noisy, timesteps, first, states)
        if self.noise.config.prediction_type == "v_prediction":
            target = self.noise.get_velocity(latents, noise, timesteps)
        else:
            target = noise
        return F.mse_loss(prediction.float(), target.float())

    @torch.no_grad()
    def generate(self, images: torch.Tensor, prompts: list[list[str]], guidance: Guidance,
                 generators: list[torch.Generator]) -> torch.Tensor:
        """images (B, 3, H, W) in [-1, 1], prompts B lists of T texts (tau_0 first) -> frames
        (B, T, 3, H, W) in [-1, 1]; frame 0 is the model's own rendering of the input image.
        One generator per sequence, so a sequence's result does not depend on its batch."""
        from diffusers import DDIMScheduler

        scheduler = DDIMScheduler.from_config(self.noise.config)
        scheduler.set_timesteps(guidance.steps, device=self.device)
        batch, frames = images.shape[0], len(prompts[0])
        dtype = next(self.unet.parameters()).dtype
        moments = self.latent_moments(images)
        first = torch.cat([self.sample_latents(moments[i:i + 1], generators[i]) for i in range(batch)])
        text = self.encode_prompts(prompts).to(dtype)
        empty = self.encode_prompts([[""] * frames] * batch).to(dtype)
        embeds = self.encode_image(images).to(dtype)
        both = self.conditions(embeds, text)
        image_only = self.conditions(embeds, empty)
        neither = self.conditions(torch.zeros_like(embeds), empty)
        channels, h, w = first.shape[1:]
        latents = torch.stack([torch.randn((channels, frames, h, w), generator=g, device=self.device)
                               for g in generators]).to(dtype) * scheduler.init_noise_sigma
        for t in scheduler.timesteps:
            model_in = scheduler.scale_model_input(latents, t)
            stacked = torch.cat([model_in] * 3)
            firsts = torch.cat([first, first, torch.zeros_like(first)]).to(dtype)
            eps_both, eps_image, eps_none = self.denoise(stacked, t.expand(3 * batch), firsts,
                                                         torch.cat([both, image_only, neither])).chunk(3)
            eps = eps_none + guidance.image * (eps_image - eps_none) + guidance.text * (eps_both - eps_image)
            latents = torch.stack([scheduler.step(eps[i:i + 1], t, latents[i:i + 1], eta=guidance.eta,
                                                  generator=generators[i]).prev_sample[0]
                                   for i in range(batch)]) if guidance.eta > 0 else \
                scheduler.step(eps, t, latents).prev_sample
        flat = latents.permute(0, 2, 1, 3, 4).reshape(batch * frames, channels, h, w)
        return self.decode(flat.float() if self.vae.dtype == torch.float32 else flat).reshape(
            batch, frames, 3, images.shape[-2], images.shape[-1])
