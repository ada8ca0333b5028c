"""Chat LLMs in GGUF format through llama.cpp (llama-cpp-python), loaded once per process.

Any GGUF chat model works: an alias from `vi models` (smollm2-135m, qwen2.5-coder-1.5b), a
.gguf path, or a hub id whose snapshot in the local cache holds one .gguf. The chat template
is the model's own (llama.cpp reads it from the GGUF metadata). Output can be constrained to
a JSON schema: llama.cpp compiles the schema into a grammar, so every token sampled keeps
the text a prefix of a valid document; only a reply cut off by `max_tokens` can be invalid.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vi.core.errors import ModelNotAvailable, SetupError
from vi.core.models.cache import load_once
from vi.core.models.resolve import resolve_model

GPU_KINDS = ("cuda", "mps")
MESSAGE_OVERHEAD_TOKENS = 8  # role markers and separators the chat template adds per message


@dataclass(frozen=True)
class ChatReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop", or "length" when max_tokens cut the reply off


def gpu_offload_supported() -> bool:
    import llama_cpp

    return bool(llama_cpp.llama_supports_gpu_offload())


def llama_gpu_layers(device: str) -> int:
    """-1 (every layer on the GPU) or 0, from --device; a GPU llama.cpp lacks is an error."""
    kind, colon, index = device.partition(":")
    if kind not in ("auto", "cpu", *GPU_KINDS) or (colon and (kind != "cuda" or not index.isdigit())):
        raise ValueError(f"--device must be auto, cpu, cuda, cuda:N or mps, got {device!r}")
    if kind == "cpu":
        return 0
    supported = gpu_offload_supported()
    if kind == "auto":
        return -1 if supported else 0
    if not supported:
        raise ValueError(f"--device {device}: this llama-cpp-python build has no GPU backend; "
                         "reinstall it with CMAKE_ARGS='-DGGML_CUDA=on' (or -DGGML_METAL=on) "
                         "and `pip install --force-reinstall --no-cache-dir llama-cpp-python`")
    return -1


def gguf_path(ref: str) -> Path:
    """The .gguf file that `ref` names (alias, file, folder or cached hub id holding one)."""
    path = resolve_model(ref, role="llm")
    if path.is_dir():
        found = sorted(path.rglob("*.gguf"))
        if len(found) != 1:
            raise ModelNotAvailable(
                f"model {ref!r}: {path} holds {len(found)} .gguf files; pass the path of one")
        path = found[0]
    if path.suffix != ".gguf":
        raise ModelNotAvailable(f"model {ref!r}: {path} is not a .gguf file; vi's LLM stages "
                                "run GGUF models through llama.cpp")
    return path


class ChatLLM:
    """One loaded GGUF model: chat completions, optionally constrained to a JSON schema."""

    def __init__(self, path: Path, n_ctx: int, gpu_layers: int, seed: int, threads: int,
                 gpu_index: int | None = None):
        import llama_cpp

        self.path = path
        self.name = path.name
        # cuda:N puts the whole model on GPU N; plain cuda lets llama.cpp split it by layer
        # over every visible GPU (its default).
        pinned = ({"main_gpu": gpu_index, "split_mode": llama_cpp.LLAMA_SPLIT_MODE_NONE}
                  if gpu_index is not None and gpu_layers else {})
        try:
            self.llama = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_gpu_layers=gpu_layers,
                                         seed=seed, n_threads=threads, verbose=False, **pinned)
        except (ValueError, RuntimeError) as exc:
            raise SetupError(f"llama.cpp cannot load {path}: {exc}") from None

    @property
    def n_ctx(self) -> int:
        return self.llama.n_ctx()

    def count_tokens(self, text: str) -> int:
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def count_message_tokens(self, messages: list[dict[str, str]]) -> int:
        return sum(self.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)

    def chat(self, messages: list[dict[str, str]], *, schema: dict[str, Any] | None = None,
             max_tokens: int = 512, temperature: float = 0.0, seed: int = 0) -> ChatReply:
        """Greedy at temperature 0; seeded sampling otherwise (same seed, same reply)."""
        self.llama.reset()  # no state carried from the previous record
        out = self.llama.create_chat_completion(
            messages=messages, max_tokens=max_tokens, temperature=temperature, seed=seed,
            response_format={"type": "json_object", "schema": schema} if schema else None)
        choice, usage = out["choices"][0], out.get("usage", {})
        return ChatReply(text=choice["message"]["content"] or "",
                         prompt_tokens=usage.get("prompt_tokens", 0),
                         completion_tokens=usage.get("completion_tokens", 0),
                         finish_reason=choice.get("finish_reason") or "stop")


def load_chat_llm(ref: str, *, n_ctx: int = 4096, device: str = "auto", seed: int = 0,
                  threads: int | None = None) -> ChatLLM:
    """The model `ref`, loaded on first use and shared by every caller in this process."""
    gpu_layers = llama_gpu_layers(device)
    gpu_index = int(device.split(":")[1]) if ":" in device else None
    path = gguf_path(ref)
    threads = threads or min(8, os.cpu_count() or 1)
    key = ("llama.cpp", str(path), n_ctx, gpu_layers, gpu_index, seed, threads)
    return load_once(key, lambda: ChatLLM(path, n_ctx, gpu_layers, seed, threads, gpu_index))
