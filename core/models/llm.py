"""Chat LLMs in GGUF format through llama.cpp (llama-cpp-python), loaded once per process.

Any GGUF chat model works: an alias from `vi models` (smollm2-135m, qwen2.5-coder-1.5b), a
.gguf path, or a hub id whose snapshot in the local cache holds one .gguf. The chat template
is the model's own (llama.cpp reads it from the GGUF metadata). Output can be constrained to
a JSON schema: llama.cpp compiles the schema into a grammar, so every token sampled keeps
the text a prefix of a valid document; only a reply cut off by `max_tokens` can be invalid.
"""

from __future__ import annotations

import atexit
import threading
from contextlib import contextmanager
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from vi.core.devices import passive_openmp, usable_cpus
from vi.core.errors import ModelNotAvailable, RecordError, SetupError
from vi.core.models.cache import load_once
from vi.core.models.catalog import local_weights
from vi.core.models.chat_backend import MESSAGE_OVERHEAD_TOKENS, ChatReply

GPU_KINDS = ("cuda", "mps")
DECODE_CHUNK = 256  # most tokens per scoring batch (and never more than the context's n_batch)


def _llama_cpp():
    """The llama_cpp module, its OpenMP threads passive between calls (core.devices.passive_openmp)."""
    passive_openmp()
    import llama_cpp

    return llama_cpp


def gpu_offload_supported() -> bool:
    return bool(_llama_cpp().llama_supports_gpu_offload())


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
    if not supported and not _machine_has(kind):  # the machine's lack first, as every stage says it
        raise ValueError(f"--device {device}: no {kind} device is available here")
    if not supported:
        raise ValueError(f"--device {device}: this llama-cpp-python build has no GPU backend; "
                         "reinstall it with CMAKE_ARGS='-DGGML_CUDA=on' (or -DGGML_METAL=on) "
                         "and `pip install --force-reinstall --no-cache-dir llama-cpp-python`")
    return -1


def _machine_has(kind: str) -> bool:
    """Whether this machine has a `kind` GPU at all (CTranslate2's count: lighter than importing torch)."""
    if kind == "mps":
        import platform
        import sys

        return sys.platform == "darwin" and platform.machine() == "arm64"
    from vi.core.devices import cuda_device_count

    try:
        return cuda_device_count("ctranslate2") > 0
    except Exception:  # noqa: BLE001 - no CTranslate2 or no driver: count as none only if torch agrees
        return cuda_device_count("torch") > 0


def gguf_path(ref: str) -> Path:
    """The .gguf file that `ref` names (alias, file, folder or cached hub id holding one)."""
    backend, colon, rest = ref.partition(":")
    if colon and backend in ("openai", "transformers"):  # what load_llm runs, not llama.cpp here
        raise ValueError(f"{ref!r}: this command runs its LLM in process through llama.cpp (it reads the "
                         "model's likelihoods, which a chat server does not give): name a GGUF model")
    ref = rest if colon and backend == "llama.cpp" else ref
    path = local_weights(ref, role="llm")
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


# llama-cpp-python frees a model in __del__, which at interpreter exit can run after the
# modules it calls are torn down ("TypeError: 'NoneType' object is not callable" on stderr).
# Models still open then are closed at exit, while everything still works.
_open_models: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_open_models() -> None:
    for model in list(_open_models):
        model.close()


class ChatLLM:
    """One loaded GGUF model: chat completions, optionally constrained to a JSON schema."""

    def __init__(self, path: Path, n_ctx: int, gpu_layers: int, seed: int, threads: int,
                 gpu_index: int | None = None):
        llama_cpp = _llama_cpp()
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
        self._formatter = None
        # One context: --concurrency's threads take turns. Reentrant, so a caller holding a fresh_context can score.
        self._lock = threading.RLock()
        self._held = 0  # fresh_contexts open (by the thread holding the lock): scoring reuses their cache
        _open_models.add(self)

    def close(self) -> None:
        self.llama.close()

    @contextmanager
    def fresh_context(self):
        """This model's context to one caller (--concurrency's threads take turns), emptied
        first, so what is scored in it depends on nothing evaluated before it; inside, each call
        reuses the cache of what the caller evaluated before in it (a record's calls, grouped)."""
        with self._lock:
            self.llama.reset()
            self._held += 1
            try:
                yield self
            finally:
                self._held -= 1

    @contextmanager
    def scoring(self):
        """The context one scoring call runs in: the caller's fresh_context where one is open, else
        one emptied for this call alone. llama.cpp's numbers move with how its cache was filled
        (by up to half a nat on the judge's pairs, scored after another pair), so a call never
        reuses what an earlier call outside the caller's context left."""
        with self._lock:
            if self._held:
                yield self
            else:
                with self.fresh_context():
                    yield self

    @property
    def n_ctx(self) -> int:
        return self.llama.n_ctx()

    def option_log_probs(self, messages: list[dict[str, str]], options: Sequence[str],
                         reply_prefix: str = "") -> list[float]:
        """Each option's log-likelihood as the reply (`option_log_probs`): a stage asks a backend
        for this method to score answers where the backend can, and samples them where not."""
        return option_log_probs(self, messages, options, reply_prefix)

    def count_tokens(self, text: str) -> int:
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def count_message_tokens(self, messages: list[dict[str, str]]) -> int:
        return sum(self.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)

    def chat(self, messages: list[dict[str, str]], *, schema: dict[str, Any] | None = None,
             max_tokens: int = 512, temperature: float = 0.0, seed: int = 0) -> ChatReply:
        """Greedy at temperature 0; seeded sampling otherwise (same seed, same reply)."""
        with self._lock:
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
    threads = threads or usable_cpus()
    key = ("llama.cpp", str(path), n_ctx, gpu_layers, gpu_index, seed, threads)
    return load_once(key, lambda: ChatLLM(path, n_ctx, gpu_layers, seed, threads, gpu_index))


# --- likelihoods, for scoring answers rather than sampling them -----------------------------
# llama.cpp is not asked for logits_all (that holds n_ctx x vocabulary floats, 2.5 GB for
# Qwen2.5 at 4k): the context is evaluated with the logits of its last token only, then the
# answer in one batch that keeps the logits of each of its tokens. The KV cache of the longest
# prefix shared with the previous evaluation is kept: the chat template's start always, the
# whole reference description when one reference is scored against several targets.

def _chat_formatter(llm: ChatLLM):
    """The model's own chat template (GGUF metadata), as llama-cpp-python renders it for chat."""
    if llm._formatter is None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = llm.llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise SetupError(f"{llm.name} has no chat template in its GGUF metadata; scoring answers "
                             "needs a chat model")

        def text(token: int) -> str:
            return llm.llama.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

        llm._formatter = Jinja2ChatFormatter(template=template, eos_token=text(llm.llama.token_eos()),
                                             bos_token=text(llm.llama.token_bos()))
    return llm._formatter


def chat_prompt_tokens(llm: ChatLLM, messages: list[dict[str, str]], reply_prefix: str = "") -> list[int]:
    """The tokens of `messages` in the model's chat template, up to the assistant's turn, then
    `reply_prefix` (the start of the answer: "In Video 2," seeds it as StepDiff does)."""
    return _tokens(llm, _chat_formatter(llm)(messages=messages), reply_prefix)


def _tokens(llm: ChatLLM, rendered, text: str) -> list[int]:
    """The tokens of a rendered chat prompt followed by `text`."""
    return llm.llama.tokenize((rendered.prompt + text).encode("utf-8"), add_bos=not rendered.added_special,
                              special=True)


def _evaluate(llm: ChatLLM, tokens: Sequence[int]) -> None:
    """Run `tokens` through the model, reusing the cache of the prefix shared with the last run."""
    if len(tokens) > llm.n_ctx:
        raise RecordError("context_too_small", f"the prompt has {len(tokens)} tokens, more than the "
                          f"{llm.n_ctx} of the LLM's context; raise --n-ctx")
    done = llm.llama.input_ids[: llm.llama.n_tokens]
    limit = min(len(done), len(tokens) - 1)  # evaluate at least one token: its logits are needed
    differ = np.flatnonzero(done[:limit] != np.asarray(tokens[:limit], dtype=done.dtype))
    shared = int(differ[0]) if len(differ) else limit
    llm.llama.n_tokens = shared  # llama.cpp drops the cache past this point on the next eval
    llm.llama.eval(list(tokens[shared:]))


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    logits = logits.astype(np.float64)
    top = logits.max(axis=-1, keepdims=True)
    return logits - (top + np.log(np.exp(logits - top).sum(axis=-1, keepdims=True)))


def _last_logits(llm: ChatLLM) -> np.ndarray:
    import llama_cpp

    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.llama.ctx, -1), shape=(llm.llama.n_vocab(),))


def _decode_keeping_logits(llm: ChatLLM, tokens: Sequence[int]) -> np.ndarray:
    """Append `tokens` in one batch, returning the logits after each: (len(tokens), vocabulary).
    One batch, not one call per token: faster, and the numbers llama.cpp gives a whole prompt."""
    import llama_cpp

    start, count, vocabulary = llm.llama.n_tokens, len(tokens), llm.llama.n_vocab()
    batch = llama_cpp.llama_batch_init(count, 0, 1)
    try:
        batch.n_tokens = count
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, start + i, 1, True
            batch.seq_id[i][0] = 0
        status = llama_cpp.llama_decode(llm.llama.ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama.cpp could not decode {count} tokens (status {status})")
        logits = np.stack([np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.llama.ctx, i), shape=(vocabulary,))
                           for i in range(count)])
    finally:
        llama_cpp.llama_batch_free(batch)
    llm.llama.input_ids[start:start + count] = tokens  # what the prefix reuse of _evaluate compares
    llm.llama.n_tokens = start + count
    return logits


def _split_tokens(llm: ChatLLM, messages: list[dict[str, str]], reply_prefix: str, continuation: str
                  ) -> tuple[list[int], list[int]]:
    """(context tokens, continuation tokens), cut from the tokens of the whole text: tokenised
    alone, a continuation would gain SentencePiece's leading space (Llama-2, Mistral, Phi-3)."""
    rendered = _chat_formatter(llm)(messages=messages)
    context, whole = _tokens(llm, rendered, reply_prefix), _tokens(llm, rendered, reply_prefix + continuation)
    shared = 0  # where the two differ, if a token straddles the boundary: score from there
    while shared < min(len(context), len(whole)) and context[shared] == whole[shared]:
        shared += 1
    return whole[:shared], whole[shared:]


def continuation_log_probs(llm: ChatLLM, messages: list[dict[str, str]], continuation: str,
                           reply_prefix: str = "") -> list[float]:
    """log P(token | everything before) for each token of `continuation`, which follows the
    chat prompt and `reply_prefix` in the assistant's turn."""
    return _continuations_log_probs(llm, messages, [continuation], reply_prefix)[0]


def _continuations_log_probs(llm: ChatLLM, messages: list[dict[str, str]], continuations: Sequence[str],
                             reply_prefix: str) -> list[list[float]]:
    """continuation_log_probs of each continuation after the same prompt. The prompt is evaluated
    once and every continuation is decoded from its end in the same batches, so a text scores the
    same wherever it stands among the others (re-evaluating the prompt's last token alone for each
    later one moved the default LLM's scores by up to 0.16 nats against the first's)."""
    pieces = [_split_tokens(llm, messages, reply_prefix, continuation) for continuation in continuations]
    for (context, target), continuation in zip(pieces, continuations):
        if not target or not continuation or not context:
            raise ValueError("an empty continuation (or prompt) has no likelihood")
        if len(context) + len(target) > llm.n_ctx:
            raise RecordError("context_too_small", f"prompt and answer take {len(context) + len(target)} tokens, "
                              f"more than the {llm.n_ctx} of the LLM's context; raise --n-ctx")
    out = []
    chunk = max(1, min(DECODE_CHUNK, llm.llama.n_batch))  # llama.cpp aborts on a batch over n_batch
    with llm.scoring():
        evaluated: tuple[list[int], np.ndarray] | None = None  # a context and the logits after it
        for context, target in pieces:
            if evaluated is None or evaluated[0] != context:
                _evaluate(llm, context)
                evaluated = (context, _last_logits(llm).copy())
            else:  # the same context (a token may straddle it and the text): drop the text before
                _truncate(llm, len(context))
            logits = [evaluated[1]]
            for first in range(0, len(target) - 1, chunk):
                logits += list(_decode_keeping_logits(llm, target[first:min(first + chunk, len(target) - 1)]))
            log_probs = _log_softmax(np.stack(logits))
            out.append([float(log_probs[i, token]) for i, token in enumerate(target)])
    return out


def _truncate(llm: ChatLLM, length: int) -> None:
    """Keep the first `length` tokens of the cache; what followed them is dropped."""
    import llama_cpp

    llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llm.llama.ctx), 0, length, -1)
    llm.llama.n_tokens = length


def next_token_log_probs(llm: ChatLLM, text: str) -> np.ndarray:
    """log P(next token | `text`) over the vocabulary, `text` taken as plain text (no chat
    template). Inside a caller's `fresh_context` the cache of the prefix shared with the last
    evaluation is reused, so text that grows a line at a time costs only its new tokens; outside
    one, each call starts from an emptied context (`ChatLLM.scoring`)."""
    with llm.scoring():
        _evaluate(llm, llm.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))
        return _log_softmax(_last_logits(llm).copy()[None])[0]


def option_log_probs(llm: ChatLLM, messages: list[dict[str, str]], options: Sequence[str],
                     reply_prefix: str = "") -> list[float]:
    """log P(option | chat prompt, `reply_prefix`) for each option, summed over its tokens: the
    answer a model would give, scored instead of sampled, for every option alike. The prompt is
    evaluated once (the options reuse its cache); --concurrency's threads take turns."""
    return [sum(log_probs) for log_probs in _continuations_log_probs(llm, messages, options, reply_prefix)]


def answer_probability(llm: ChatLLM, messages: list[dict[str, str]], yes: str = "YES", no: str = "NO",
                       reply_prefix: str = "") -> float:
    """P(yes) / (P(yes) + P(no)) for the two whole answers (each may be several tokens)."""
    log_yes, log_no = option_log_probs(llm, messages, [yes, no], reply_prefix)
    return float(1.0 / (1.0 + np.exp(log_no - log_yes)))


def complete_reply(llm: ChatLLM, messages: list[dict[str, str]], reply_prefix: str = "", *,
                   max_tokens: int = 64, temperature: float = 0.0, seed: int = 0) -> ChatReply:
    """The assistant's reply, continuing `reply_prefix` (which is not repeated in the text)."""
    rendered = _chat_formatter(llm)(messages=messages)
    prompt = _tokens(llm, rendered, reply_prefix)
    if len(prompt) + max_tokens > llm.n_ctx:
        raise RecordError("context_too_small", f"the prompt has {len(prompt)} tokens; with {max_tokens} "
                          f"to generate that is more than the {llm.n_ctx} of the LLM's context; raise --n-ctx")
    with llm.scoring():  # the reply depends on nothing evaluated before it, as a scored answer does
        out = llm.llama.create_completion(prompt=prompt, max_tokens=max_tokens, temperature=temperature,
                                          seed=seed, stop=rendered.stop)
    choice, usage = out["choices"][0], out.get("usage", {})
    return ChatReply(text=choice["text"], prompt_tokens=usage.get("prompt_tokens", 0),
                     completion_tokens=usage.get("completion_tokens", 0),
                     finish_reason=choice.get("finish_reason") or "stop")
