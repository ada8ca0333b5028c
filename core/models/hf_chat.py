"""A causal LM run by transformers as a vi LLM: `--llm transformers:REF`, batched on a GPU.

A stage calls `chat` once per record; with `--concurrency N` the stage driver calls it from N
threads at once, and the calls that arrive together (within GATHER_S) are generated as one
left-padded batch of up to N prompts. So the stages stay per-record functions and a GPU still
sees batches. The prompt is the model's own chat template (tokenizer.chat_template).

- Greedy requests (temperature 0) are batched. A sampled request (temperature > 0) runs alone,
  with torch seeded from its seed first, so its reply depends on its seed only.
- A batch pads and computes in other shapes than one prompt alone, so a batched greedy reply
  can differ in rare near-ties from the one-at-a-time reply; --concurrency 1 is bit-exact
  run to run.
- No constrained decoding: a reply to a JSON schema is validated and, if wrong, asked again
  with what was wrong (`chat.chat_json`).
REF is what `core.models.causal_lm` loads: a GGUF alias (dequantized once into vi's cache), a
transformers folder or a cached hub id.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass
from typing import Any

from vi.core.devices import resolve_placement
from vi.core.errors import RecordError
from vi.core.models.cache import load_once
from vi.core.models.causal_lm import CausalLM, load_causal_lm, resolve_causal_lm
from vi.core.models.chat_backend import MESSAGE_OVERHEAD_TOKENS, ChatReply, chat_json

GATHER_S = 0.02  # how long the first request of a batch waits for others to join it


@dataclass
class _Request:
    prompt: list[int]
    max_tokens: int
    temperature: float
    seed: int
    result: ChatReply | Exception | None = None


class HFChat:
    def __init__(self, lm: CausalLM, n_ctx: int, max_batch: int = 1):
        self.lm, self.max_batch = lm, max(1, max_batch)
        self.name = lm.source.label
        self.tokenizer = lm.tokenizer
        if not getattr(self.tokenizer, "chat_template", None):
            from vi.core.errors import SetupError

            raise SetupError(f"{self.name} has no chat template; --llm transformers:REF needs a chat model")
        limit = getattr(lm.model.config, "max_position_embeddings", None) or n_ctx
        self._n_ctx = min(n_ctx, int(limit))
        self.generation = copy.deepcopy(lm.model.generation_config)
        self.generation.update(do_sample=False, num_beams=1, temperature=None, top_p=None, top_k=None)
        if self.generation.pad_token_id is None:
            pad = self.tokenizer.pad_token_id
            self.generation.pad_token_id = pad if pad is not None else self.tokenizer.eos_token_id
        eos = self.generation.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else
                       [self.tokenizer.eos_token_id])
        self._pending: list[_Request] = []
        self._busy = False
        self._cond = threading.Condition()

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_message_tokens(self, messages: list[dict[str, Any]]) -> int:
        return sum(self.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def chat(self, messages: list[dict[str, Any]], *, schema: dict[str, Any] | None = None,
             max_tokens: int = 512, temperature: float = 0.0, seed: int = 0) -> ChatReply:
        options = {"max_tokens": max_tokens, "temperature": temperature, "seed": seed}
        if schema is None:
            return self._ask(messages, **options)
        return chat_json(self._ask, messages, schema, **options)

    def _ask(self, messages: list[dict[str, Any]], *, max_tokens: int, temperature: float, seed: int) -> ChatReply:
        prompt = self.prompt_ids(messages)
        if len(prompt) + max_tokens > self.n_ctx:
            raise RecordError("context_too_small", f"the prompt has {len(prompt)} tokens; with {max_tokens} to "
                              f"generate that is more than the {self.n_ctx} of the LLM's context; raise --n-ctx")
        request = _Request(prompt, max_tokens, temperature, seed)
        with self._cond:
            self._pending.append(request)
            self._cond.notify_all()
            while request.result is None:
                if self._busy:
                    self._cond.wait()
                    continue
                self._busy = True  # this thread generates the next batch, for itself and others
                deadline = time.monotonic() + GATHER_S
                while len(self._pending) < self.max_batch and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
                batch = self._take()
                self._cond.release()
                try:
                    results = self._generate(batch)
                except Exception as exc:  # noqa: BLE001 - each request of the batch fails alike
                    results = [exc] * len(batch)
                finally:
                    self._cond.acquire()
                for item, result in zip(batch, results):
                    item.result = result
                self._busy = False
                self._cond.notify_all()
        if isinstance(request.result, Exception):
            raise request.result
        return request.result

    def _take(self) -> list[_Request]:
        """The oldest request, with the greedy ones behind it when it is greedy too."""
        first = self._pending.pop(0)
        if first.temperature > 0:
            return [first]
        batch = [first] + [r for r in self._pending if r.temperature == 0][: self.max_batch - 1]
        self._pending = [r for r in self._pending if r not in batch[1:]]
        return batch

    def _generate(self, batch: list[_Request]) -> list[ChatReply]:
        import torch

        longest = max(len(r.prompt) for r in batch)
        pad = self.generation.pad_token_id
        ids = torch.tensor([[pad] * (longest - len(r.prompt)) + r.prompt for r in batch])
        mask = torch.tensor([[0] * (longest - len(r.prompt)) + [1] * len(r.prompt) for r in batch])
        options: dict[str, Any] = {"max_new_tokens": max(r.max_tokens for r in batch)}
        if batch[0].temperature > 0:  # alone in its batch (see _take)
            torch.manual_seed(batch[0].seed)
            options.update(do_sample=True, temperature=batch[0].temperature)
        device = self.lm.placement.device
        with torch.inference_mode():
            out = self.lm.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                         generation_config=self.generation, **options)
        replies = []
        for row, request in zip(out[:, longest:].tolist(), batch):
            end = next((i for i, token in enumerate(row) if token in self.eos), None)
            stopped = end is not None and end < request.max_tokens
            tokens = row[:end] if stopped else row[: request.max_tokens]
            replies.append(ChatReply(text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                                     prompt_tokens=len(request.prompt), completion_tokens=len(tokens),
                                     finish_reason="stop" if stopped else "length"))
        return replies


def load_hf_chat(ref: str, *, n_ctx: int = 4096, device: str = "auto", max_batch: int = 1) -> HFChat:
    source, placement = resolve_causal_lm(ref), resolve_placement(device, "auto", engine="torch")
    return load_once(("transformers-chat", source, placement, n_ctx, max_batch),
                     lambda: HFChat(load_causal_lm(source, placement), n_ctx, max_batch))
