"""One interface for every chat LLM a stage calls, whatever runs it.

A stage names its LLM with one string, `--llm SPEC`:
- `REF` or `llama.cpp:REF`: a GGUF model run in this process by llama.cpp (the offline default);
- `transformers:REF`: a model run in this process by transformers (a GPU's batched generation);
- `openai:MODEL@URL`: an OpenAI-compatible chat server (vLLM, SGLang, TGI, llama.cpp's server, a
  hosted API), MODEL being the name the server knows; the key, if it needs one, comes from
  VI_LLM_API_KEY (else OPENAI_API_KEY), never from the command line.
The spec is what a stage writes as the record's `model`, so a record says which backend made it.

Every backend answers `chat(messages, schema=, max_tokens=, temperature=, seed=) -> ChatReply`,
`count_tokens`, `count_message_tokens`, `n_ctx` and `name`. Backends that cannot constrain
decoding to a JSON schema validate the reply and ask again (`chat_json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vi.core.config import option
from vi.core.models.catalog import DEFAULT_LLM
from vi.core.models.chat_backend import (BACKENDS, SCHEMA_RETRIES, ChatBackend, ChatReply, LLMSettings, LLMSpec,
                                         chat_json, env_number, fresh_context, gives_likelihoods, reply_errors,
                                         schema_errors)
from vi.core.models.resolve import resolve

# The types every backend shares are defined in chat_backend, which the backends import; a stage
# imports them from here, with what picks the backend.
__all__ = ["BACKENDS", "SCHEMA_RETRIES", "ChatBackend", "ChatReply", "LLMConfig", "LLMSettings", "LLMSpec",
           "UsesLLM", "chat_json", "check_llm", "env_number", "fresh_context", "gives_likelihoods", "load_llm",
           "reply_errors", "schema_errors"]

LLM_PANEL = "LLM backend (every LLM stage)"
LLM_HELP = (
    "The chat LLM. REF (or llama.cpp:REF): a GGUF model run here by llama.cpp, as an alias from `vi models`, "
    "a .gguf path or a cached hub id (the default, offline). transformers:REF: a model run here by "
    "transformers, batched on a GPU with --concurrency. openai:MODEL@URL: an OpenAI-compatible server "
    "(vLLM, SGLang, TGI, llama.cpp's server, a hosted API), like openai:NAME@http://host:8000/v1 "
    "(NAME as the server lists it, e.g. Qwen/Qwen2.5-7B-Instruct); its key from VI_LLM_API_KEY or "
    "OPENAI_API_KEY. The records' model field says which one wrote them.")


@dataclass(frozen=True, kw_only=True)
class LLMConfig:
    """The options every LLM stage shares, declared once: a stage's config subclasses this (a stage
    whose context window is smaller says so with `vi.core.config.with_default`), and gains
    `llm_settings` and `load_llm()`."""

    llm: str = option(DEFAULT_LLM, flag="--llm", hidden_aliases=("--model",), panel=LLM_PANEL, help=LLM_HELP)
    n_ctx: int = option(4096, panel=LLM_PANEL,
                        help="The LLM's context window, in tokens: the prompt and the reply together.")
    threads: int | None = option(
        None, min=1, panel=LLM_PANEL,
        help="CPU threads of llama.cpp (default: the cores this process may use, e.g. a Slurm task's, at most 8). "
             "On a busy machine fewer threads than cores avoid threads that wait on each other.")
    concurrency: int = option(
        1, min=1, panel=LLM_PANEL,
        help="Records worked on at once: requests in flight to an openai: server, the largest batch of a "
             "transformers: model. Output order stays the input order; --resume stays exactly-once. "
             "llama.cpp in this process runs one request at a time whatever this says.")
    device: str = option("auto", help="Where an in-process LLM runs: auto, cpu, cuda, cuda:N or mps.")
    seed: int = option(0, help="The LLM's sampling seed: same input + same seed = same output.")

    @property
    def llm_settings(self) -> LLMSettings:
        return LLMSettings(self.llm, n_ctx=self.n_ctx, device=self.device, seed=self.seed,
                           threads=self.threads, concurrency=self.concurrency)

    def load_llm(self) -> ChatBackend:
        """The LLM `llm` names, loaded once per process (UsesLLM's `llm()`: `llm` is the field here)."""
        return load_llm(self.llm_settings)


class UsesLLM:
    """What a stage's config dataclass gains for its LLM: `llm_settings` and `llm()`, from its
    fields n_ctx, device, seed, threads, concurrency and the one LLM_FIELD names (the spec).
    Being replaced by LLMConfig: a config that subclasses that declares the fields too."""

    LLM_FIELD: ClassVar[str] = "model"

    @property
    def llm_settings(self) -> LLMSettings:
        return LLMSettings(getattr(self, self.LLM_FIELD), n_ctx=self.n_ctx, device=self.device,
                           seed=self.seed, threads=self.threads, concurrency=self.concurrency)

    def llm(self) -> ChatBackend:
        return load_llm(self.llm_settings)


def check_llm(settings: LLMSettings) -> LLMSpec:
    """Fail before any record: a bad spec or --device is a ValueError (exit 2), a missing model or
    a server that does not answer a SetupError (exit 5). Loads nothing."""
    spec = LLMSpec.parse(settings.spec)
    if spec.backend == "llama.cpp":
        from vi.core.models.llm import llama_gpu_layers

        llama_gpu_layers(settings.device)
    elif spec.backend == "transformers":
        from vi.core.devices import resolve_placement

        resolve_placement(settings.device, "auto", engine="torch")
    resolve(settings.spec, "llm")
    if spec.backend == "openai":
        from vi.core.models.openai_chat import check_server

        check_server(spec)
    return spec


def load_llm(settings: LLMSettings) -> ChatBackend:
    """The LLM `settings.spec` names, built on first use and shared by every caller in this process."""
    spec = LLMSpec.parse(settings.spec)
    if spec.backend == "llama.cpp":
        from vi.core.models.llm import load_chat_llm

        return load_chat_llm(spec.model, n_ctx=settings.n_ctx, device=settings.device, seed=settings.seed,
                             threads=settings.threads)
    if spec.backend == "transformers":
        from vi.core.models.hf_chat import load_hf_chat

        return load_hf_chat(spec.model, n_ctx=settings.n_ctx, device=settings.device,
                            max_batch=settings.concurrency)
    from vi.core.models.openai_chat import load_openai_chat

    return load_openai_chat(spec, n_ctx=settings.n_ctx, in_flight=settings.concurrency)
