"""Multi-image chats, many at once: batched generation with a `VisionLanguageModel` (vlm.py), or requests in
flight to an OpenAI-compatible server (`ask_server`).

`vi caption-frames` asks one question about T frames of a sequence, and many sequences; one generate call per
sequence (what ProgressCaptioner's inference script does) leaves a GPU mostly idle. Here each request is a
chat (the rendered prompt turns) plus its frames, given as T images (not as one video: the prompt numbers
frames and the model must see T separate pictures), and up to `batch_size` requests share one generate call.

Decoder-only generation appends new tokens at the right, so the batch is padded on the left, and the
attention mask keeps pad tokens out; greedy decoding of a request then gives the same text alone or in a
batch (tested on tiny random models of each family). `temperature > 0` samples instead, seeded (the
stage's retry after a reply with missing frames); a sampled batch's text depends on the batch's make-up.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from vi.core.models.vlm import VisionLanguageModel, _inputs_to
from vi.core.progress import log

SERVER_CONTEXT = 32768  # the client counts tokens against it only where a stage asks; the server has its own


@dataclass(frozen=True)
class ImageChat:
    messages: list[dict[str, Any]]  # [{role, content: str}], the last a user turn
    frames: Sequence[np.ndarray]  # T frames, (H, W, 3) uint8, shown before the last user turn's text


def with_image_parts(messages: list[dict[str, Any]], n_images: int, image=lambda i: {"type": "image"}
                     ) -> list[dict[str, Any]]:
    """Every turn's content as a list of parts (chat templates of LLaVA-OneVision and Idefics3 iterate over
    it), with `n_images` image parts, made by `image(i)`, before the text of the last user turn."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    out = []
    for i, message in enumerate(messages):
        parts = [image(k) for k in range(n_images)] if i == last else []
        out.append({"role": message["role"], "content": [*parts, {"type": "text", "text": message["content"]}]})
    return out


def chat_text(model: VisionLanguageModel, chat: ImageChat) -> str:
    return model.processor.apply_chat_template(with_image_parts(chat.messages, len(chat.frames)),
                                               add_generation_prompt=True, tokenize=False,
                                               chat_template=model.chat_template)


def batch_inputs(model: VisionLanguageModel, chats: Sequence[ImageChat]):
    texts = [chat_text(model, chat) for chat in chats]
    images = [list(chat.frames) for chat in chats]  # one list per request: the processors nest them so
    return model.processor(text=texts, images=images, padding=True, padding_side="left", return_tensors="pt")


def generate(model: VisionLanguageModel, chats: Sequence[ImageChat], max_new_tokens: int, *,
             batch_size: int = 1, temperature: float = 0.0, seed: int = 0) -> list[str]:
    """The reply to each chat, in order; `batch_size` chats per generate call. A batch that fails with a
    RuntimeError (out of memory, most often) is redone one chat at a time, which fits where one chat does."""
    replies: list[str] = []
    for start in range(0, len(chats), max(1, batch_size)):
        batch = chats[start:start + batch_size]
        try:
            replies += _generate(model, batch, max_new_tokens, temperature, seed + start)
        except RuntimeError as exc:
            if len(batch) == 1:
                raise
            log.warning("a batch of %d multi-image chats failed (%s); generating them one at a time", len(batch),
                        (str(exc).splitlines() or [""])[0][:200])
            _free_memory()
            for k, chat in enumerate(batch):
                replies += _generate(model, [chat], max_new_tokens, temperature, seed + start + k)
    return replies


def _generate(model: VisionLanguageModel, chats: Sequence[ImageChat], max_new_tokens: int, temperature: float,
              seed: int) -> list[str]:
    import torch

    config = model.generation
    if temperature > 0:
        config = copy.deepcopy(config)
        config.update(do_sample=True, temperature=temperature, top_p=None, top_k=None)
        torch.manual_seed(seed)  # a different draw per batch, the same on a rerun
    if getattr(model, "release", None) is not None:  # a LLaVA-NeXT checkpoint: the release's prompt and video path
        last = [next(m["content"] for m in reversed(chat.messages) if m["role"] == "user") for chat in chats]
        return model.release_generate([(q, np.stack(chat.frames)) for q, chat in zip(last, chats)], config,
                                      max_new_tokens)
    inputs = _inputs_to(batch_inputs(model, chats), model.model, model.placement)
    with torch.inference_mode():
        out = model.model.generate(**inputs, generation_config=config, max_new_tokens=max_new_tokens)
    new = out[:, inputs["input_ids"].shape[1]:]  # left padding: every prompt ends at the same column
    return [text.strip() for text in model.processor.batch_decode(new, skip_special_tokens=True)]


def _free_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def ask_server(spec, chats: Sequence[ImageChat], max_tokens: int, seeds: Sequence[int], *, temperature: float = 0.0,
               concurrency: int = 1) -> list[str | Exception]:
    """The reply to each chat from the server `spec` (an openai LLMSpec) names, the frames sent as base64 data
    URLs; `concurrency` requests in flight. A request the server fails (after the client's retries) gives its
    RecordError in place of the reply, so one bad request fails one record."""
    from concurrent.futures import ThreadPoolExecutor

    from vi.core.errors import RecordError
    from vi.core.models.openai_chat import image_part, load_openai_chat

    client = load_openai_chat(spec, n_ctx=SERVER_CONTEXT, in_flight=concurrency)

    def one(k: int) -> str | Exception:
        chat = chats[k]
        messages = with_image_parts(chat.messages, len(chat.frames), lambda i: image_part(chat.frames[i]))
        try:
            return client.chat(messages, max_tokens=max_tokens, temperature=temperature, seed=seeds[k]).text
        except RecordError as exc:
            return exc

    with ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="vlm-server") as pool:
        return list(pool.map(one, range(len(chats))))
