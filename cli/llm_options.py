"""The options every LLM stage shares, spelled the same in each: --llm, --threads, --concurrency.

A stage declares them as parameters (`llm: LLMOption = DEFAULT_LLM, threads: ThreadsOption =
None, concurrency: ConcurrencyOption = 1`) and turns them into `LLMSettings` with `settings`.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from vi.core.models.chat import LLMSettings

LLM_PANEL = "LLM backend (every LLM stage)"
DEFAULT_LLM = "qwen2.5-coder-1.5b"

LLM_HELP = (
    "The chat LLM. REF (or llama.cpp:REF): a GGUF model run here by llama.cpp, as an alias from `vi models`, "
    "a .gguf path or a cached hub id (the default, offline). transformers:REF: a model run here by "
    "transformers, batched on a GPU with --concurrency. openai:MODEL@URL: an OpenAI-compatible server "
    "(vLLM, SGLang, TGI, llama.cpp's server, a hosted API), like openai:Qwen/Qwen2.5-7B-Instruct@"
    "http://127.0.0.1:8000/v1; its key from VI_LLM_API_KEY or OPENAI_API_KEY. The records' model field "
    "says which one wrote them.")

LLMOption = Annotated[str, typer.Option("--llm", "--model", help=LLM_HELP, rich_help_panel=LLM_PANEL)]
# describe's --model would be ambiguous beside --vlm: it takes --llm only
LLMOnlyOption = Annotated[str, typer.Option("--llm", help=LLM_HELP, rich_help_panel=LLM_PANEL)]
ThreadsOption = Annotated[Optional[int], typer.Option(
    "--threads", min=1, rich_help_panel=LLM_PANEL,
    help="CPU threads of llama.cpp (default: the cores this process may use, e.g. a Slurm task's, at most 8). "
         "On a busy machine fewer threads than cores avoid threads that wait on each other.")]
ConcurrencyOption = Annotated[int, typer.Option(
    "--concurrency", min=1, rich_help_panel=LLM_PANEL,
    help="Records worked on at once: requests in flight to an openai: server, the largest batch of a "
         "transformers: model. Output order stays the input order; --resume stays exactly-once. "
         "llama.cpp in this process runs one request at a time whatever this says.")]


def settings(spec: str, *, n_ctx: int, device: str, seed: int, threads: int | None,
             concurrency: int) -> LLMSettings:
    return LLMSettings(spec=spec, n_ctx=n_ctx, device=device, seed=seed, threads=threads,
                       concurrency=concurrency)
