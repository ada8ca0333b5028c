"""What every chat backend is and shares: the reply, the protocol, the `--llm` spec and the
settings, and the JSON-schema check of backends that cannot constrain decoding.

The backends (llm.py: llama.cpp, hf_chat.py: transformers, openai_chat.py: a server) import
this module and nothing of `chat`, which picks among them: so `chat` can import them and no
module imports back the module that imports it.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

BACKENDS = ("llama.cpp", "transformers", "openai")
SCHEMA_RETRIES = 2  # further asks after a reply that breaks the schema (unconstrained backends)
MESSAGE_OVERHEAD_TOKENS = 8  # role markers and separators the chat template adds per message


@dataclass(frozen=True)
class ChatReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop", or "length" when max_tokens cut the reply off


class ChatBackend(Protocol):
    name: str

    @property
    def n_ctx(self) -> int: ...

    def count_tokens(self, text: str) -> int: ...

    def count_message_tokens(self, messages: list[dict[str, Any]]) -> int: ...

    def chat(self, messages: list[dict[str, Any]], *, schema: dict[str, Any] | None = None,
             max_tokens: int = 512, temperature: float = 0.0, seed: int = 0) -> ChatReply: ...


def gives_likelihoods(llm: object) -> bool:
    """The backend scores given text (llama.cpp's `option_log_probs`); a server or transformers only samples."""
    return callable(getattr(llm, "option_log_probs", None))


def fresh_context(llm: object):
    """`llm`'s context, emptied and held for one caller's group of calls (llama.cpp: what they score
    depends on nothing evaluated before, and each reuses the cache of the ones before it in the group);
    a backend without a context of its own (a server, transformers) has nothing to empty or hold."""
    fresh = getattr(llm, "fresh_context", None)
    return fresh() if callable(fresh) else nullcontext()


@dataclass(frozen=True)
class LLMSpec:
    backend: str  # one of BACKENDS
    model: str  # alias/path/hub id (in process) or the server's model name
    url: str | None = None  # openai only: the API's base URL, like http://127.0.0.1:8000/v1

    @classmethod
    def parse(cls, text: str) -> LLMSpec:
        """`REF`, `llama.cpp:REF`, `transformers:REF` or `openai:MODEL@URL`; a bad one is a ValueError."""
        backend, colon, rest = text.partition(":")
        if not colon or backend not in BACKENDS:  # a bare reference (a Windows drive never reaches vi)
            return cls("llama.cpp", text)
        if not rest:
            raise ValueError(f"--llm {text!r}: name the model after '{backend}:'")
        if backend != "openai":
            return cls(backend, rest)
        found = re.fullmatch(r"(.+?)@(https?://.+)", rest)  # the first @http: a model name may hold an @
        model, url = found.groups() if found else ("", "")
        if not found:
            raise ValueError(f"--llm {text!r}: a server is named openai:MODEL@URL, like "
                             "openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1")
        from urllib.parse import urlsplit

        if urlsplit(url).username or urlsplit(url).password:
            raise ValueError(f"--llm: the URL {url.split('@')[-1]!r} carries credentials; give the key in "
                             "VI_LLM_API_KEY (or OPENAI_API_KEY) instead, never on the command line")
        return cls(backend, model, url.rstrip("/"))


@dataclass(frozen=True)
class LLMSettings:
    """How to run the LLM a stage names: everything but the prompt."""

    spec: str
    n_ctx: int = 4096
    device: str = "auto"
    seed: int = 0
    # llama.cpp's CPU threads (None: usable_cpus(), the cores this process may use, at most 8)
    threads: int | None = None
    concurrency: int = 1  # requests in flight (server) or the largest batch (transformers)

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"--threads must be at least 1, got {self.threads}")
        if self.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {self.concurrency}")


# --- JSON replies from backends that cannot constrain decoding ---------------------------------

def schema_errors(value: Any, schema: dict[str, Any], where: str = "reply") -> list[str]:
    """What in `value` breaks `schema`, for the keywords vi's prompts use (type, enum, properties,
    required, items, prefixItems, const, minItems/maxItems, minimum/maximum, maxLength): empty when it conforms."""
    kind = schema.get("type")
    checks = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    if kind in ("integer", "number"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
            kind == "number" or float(value).is_integer())
        if not ok:
            return [f"{where} is not a{'n integer' if kind == 'integer' else ' number'}"]
    elif kind in checks and not isinstance(value, checks[kind]):
        return [f"{where} is not a{'n' if kind[0] in 'ao' else ''} {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where} is {value!r}, not one of {schema['enum']}"]
    if "const" in schema and value != schema["const"]:
        return [f"{where} is {value!r}, not {schema['const']!r}"]
    errors: list[str] = []
    if isinstance(value, dict):
        errors += [f"{where} has no {key!r}" for key in schema.get("required", []) if key not in value]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                errors += schema_errors(value[key], sub, f"{where}.{key}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            errors.append(f"{where} has {len(value)} items")
        fixed = schema.get("prefixItems", [])  # a tuple: item i has its own schema
        for i, item in enumerate(value):
            sub = fixed[i] if i < len(fixed) else schema.get("items", {})
            errors += schema_errors(item, sub if isinstance(sub, dict) else {}, f"{where}[{i}]")
    if isinstance(value, str) and len(value) > schema.get("maxLength", len(value)):
        errors.append(f"{where} is longer than {schema['maxLength']} characters")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            errors.append(f"{where} is {value}, outside [{schema.get('minimum')}, {schema.get('maximum')}]")
    return errors


def reply_errors(text: str, schema: dict[str, Any]) -> list[str]:
    try:
        return schema_errors(json.loads(text), schema)
    except ValueError as exc:
        return [f"not JSON ({exc})"]


def chat_json(ask, messages: list[dict[str, Any]], schema: dict[str, Any], **options) -> ChatReply:
    """`ask(messages, **options)` until the reply conforms to `schema`, telling the model what was
    wrong (a changed prompt, so greedy decoding can answer differently). The last reply is returned
    either way, and one cut off by max_tokens at once: the stage's parser reports it."""
    reply = ask(messages, **options)
    for _ in range(SCHEMA_RETRIES):
        errors = reply_errors(reply.text, schema)
        if not errors or reply.finish_reason == "length":
            break
        messages = [*messages, {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": "That reply does not match the required JSON schema ("
                     + "; ".join(errors[:5]) + "). Reply again with only a JSON document matching this "
                     "schema:\n" + json.dumps(schema)}]
        reply = ask(messages, **options)
    return reply


def env_number(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number") from None
