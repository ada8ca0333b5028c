"""StepDiff's video-conditioned LLM (Sec. 3.3): frozen encoder tokens -> Perceiver resampler + linear
head (the only trained part) -> a frozen causal LM that reads them in place of each video slot.

The encoder ran earlier (`vi encode-videos`): the model takes its stored tokens. Everything here
works on batches of `Sequence`s (stepdiff_prompt): the loss averages the counted tokens' negative
log-likelihood over the batch; a score is a sequence's summed log-likelihood of its counted
tokens; generation continues a sequence token by token with the LLM's cache. Logits are computed
only where a counted token is predicted, not over the whole sequence (the vocabulary is large).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from vi.core.devices import Placement
from vi.core.models.causal_lm import CausalLM, load_causal_lm
from vi.core.models.perceiver import PerceiverResampler, ProjectorConfig
from vi.core.models.resolve import resolve
from vi.pipelines.stepdiff.prompt import IGNORE, PromptFormat, Sequence

CONFIG_FILE, WEIGHTS_FILE = "model.json", "projector.safetensors"


@dataclass(frozen=True)
class ModelConfig:
    """What rebuilds a trained model: saved beside every checkpoint's projector weights."""

    llm: str
    encoder: dict  # the feature store's encoder.json: features at inference must come from it
    projector: dict  # ProjectorConfig fields
    template: str  # chat | llama2, as resolved for this LLM

    def save(self, folder: Path) -> None:
        (folder / CONFIG_FILE).write_text(json.dumps(self.__dict__, indent=1) + "\n")

    @classmethod
    def load(cls, folder: Path) -> ModelConfig:
        path = folder / CONFIG_FILE
        if not path.is_file():
            raise ValueError(f"{folder} is not a StepDiff checkpoint: it has no {CONFIG_FILE}")
        return cls(**json.loads(path.read_text()))


class StepDiffModel:
    def __init__(self, llm: CausalLM, projector: PerceiverResampler, config: ModelConfig):
        self.llm, self.projector, self.config = llm, projector, config
        self.format = PromptFormat(llm.tokenizer, config.template)
        self.device = torch.device(llm.placement.device)

    @classmethod
    def build(cls, llm_ref: str, encoder: dict, placement: Placement, template: str = "auto",
              **projector_options) -> StepDiffModel:
        llm = load_causal_lm(resolve(llm_ref, "causal-lm"), placement)
        resolved = PromptFormat(llm.tokenizer, template).template
        frames = int(encoder.get("frames_out") or encoder.get("frames") or 1)
        projector_options.setdefault("max_frames", max(ProjectorConfig.max_frames, frames))
        projector_config = ProjectorConfig(input_dim=int(encoder["dim"]), output_dim=llm.hidden_size,
                                           **projector_options)
        projector = PerceiverResampler(projector_config).to(placement.device)  # float32: trained
        return cls(llm, projector, ModelConfig(llm_ref, encoder, projector_config.to_dict(), resolved))

    @classmethod
    def from_checkpoint(cls, folder: Path, placement: Placement) -> StepDiffModel:
        from safetensors.torch import load_file

        config = ModelConfig.load(folder)
        llm = load_causal_lm(resolve(config.llm, "causal-lm"), placement)
        projector = PerceiverResampler(ProjectorConfig(**config.projector))
        projector.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))
        projector.to(placement.device).eval()
        return cls(llm, projector, config)

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().float().cpu().contiguous() for k, v in self.projector.state_dict().items()}
        save_file(state, str(folder / WEIGHTS_FILE))
        self.config.save(folder)

    # --- building the LLM's input --------------------------------------------------------------

    def inputs(self, sequences: list[Sequence], features: dict[str, torch.Tensor]):
        """(inputs_embeds, attention_mask, labels), right-padded: every video of the batch goes
        through the projector in one call."""
        clips = sorted({clip for s in sequences for clip in s.videos})
        stacked = torch.stack([features[c] for c in clips]).to(self.device, torch.float32)
        projected = self.projector(stacked)
        video = dict(zip(clips, projected))
        embed = self.llm.model.get_input_embeddings()
        dtype = embed.weight.dtype
        rows, labels = [], []
        for sequence in sequences:
            pieces, piece_labels = [], []
            for part, part_labels in zip(sequence.parts, sequence.labels):
                if isinstance(part, int):
                    tokens = video[sequence.videos[part]]
                    pieces.append(tokens.to(dtype))
                    piece_labels.extend([IGNORE] * tokens.shape[0])
                elif part:
                    pieces.append(embed(torch.tensor(part, device=self.device)))
                    piece_labels.extend(part_labels)
            rows.append(torch.cat(pieces))
            labels.append(piece_labels)
        length = max(r.shape[0] for r in rows)
        embeds = torch.zeros(len(rows), length, rows[0].shape[1], dtype=dtype, device=self.device)
        mask = torch.zeros(len(rows), length, dtype=torch.long, device=self.device)
        label_tensor = torch.full((len(rows), length), IGNORE, dtype=torch.long, device=self.device)
        for i, (row, row_labels) in enumerate(zip(rows, labels)):
            embeds[i, :row.shape[0]] = row
            mask[i, :row.shape[0]] = 1
            label_tensor[i, :row.shape[0]] = torch.tensor(row_labels, device=self.device)
        return embeds, mask, label_tensor

    def _hidden(self, embeds, mask):
        return self.llm.model.base_model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state

    def counted_log_probs(self, sequences: list[Sequence], features: dict[str, torch.Tensor]):
        """(log-likelihood of each counted token, the row each belongs to): a token at position t
        is predicted from the hidden state at t - 1."""
        embeds, mask, labels = self.inputs(sequences, features)
        hidden = self._hidden(embeds, mask)
        targets = labels[:, 1:]
        where = targets != IGNORE
        logits = self.llm.model.get_output_embeddings()(hidden[:, :-1][where]).float()
        log_probs = torch.log_softmax(logits, dim=-1).gather(1, targets[where].unsqueeze(1)).squeeze(1)
        rows = torch.arange(len(sequences), device=self.device).unsqueeze(1).expand_as(targets)[where]
        return log_probs, rows

    def loss(self, sequences: list[Sequence], features: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean negative log-likelihood over the counted tokens of the batch."""
        log_probs, _ = self.counted_log_probs(sequences, features)
        return -log_probs.mean()

    @torch.inference_mode()
    def scores(self, sequences: list[Sequence], features: dict[str, torch.Tensor]) -> list[float]:
        """Each sequence's summed log-likelihood of its counted tokens."""
        log_probs, rows = self.counted_log_probs(sequences, features)
        sums = torch.zeros(len(sequences), device=self.device).index_add_(0, rows, log_probs.float())
        return sums.tolist()

    @torch.inference_mode()
    def next_token_log_probs(self, sequences: list[Sequence], features: dict[str, torch.Tensor]) -> torch.Tensor:
        """(batch, vocabulary) log-probabilities of the token after each whole sequence."""
        embeds, mask, _ = self.inputs(sequences, features)
        hidden = self._hidden(embeds, mask)
        last = hidden[torch.arange(len(sequences), device=self.device), mask.sum(1) - 1]
        return torch.log_softmax(self.llm.model.get_output_embeddings()(last).float(), dim=-1)

    @torch.inference_mode()
    def generate(self, sequence: Sequence, features: dict[str, torch.Tensor], max_new_tokens: int = 64,
                 sample: bool = False, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0) -> str:
        """The continuation of `sequence` until an end of turn: greedy, or sampled with `seed`."""
        from transformers import GenerationConfig

        embeds, mask, _ = self.inputs([sequence], features)
        tokenizer = self.llm.tokenizer
        stop = self.format.stop_ids
        config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=sample,
                                  temperature=temperature if sample else None, top_p=top_p if sample else None,
                                  top_k=None, eos_token_id=stop, pad_token_id=tokenizer.pad_token_id or stop[0],
                                  bos_token_id=self.llm.model.generation_config.bos_token_id)
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            # use_model_defaults=False: an LLM's generation_config.json (Qwen2.5's samples at 0.7 with a
            # repetition penalty) would otherwise fill every field left at its default, greedy included.
            out = self.llm.model.generate(inputs_embeds=embeds, attention_mask=mask, generation_config=config,
                                          use_model_defaults=False)
        finally:
            torch.random.set_rng_state(generator_state)
        ids = [t for t in out[0].tolist() if t not in stop]
        return tokenizer.decode(ids, skip_special_tokens=True)
