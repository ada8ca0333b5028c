"""An OpenAI-compatible chat server as a vi LLM: `--llm openai:MODEL@URL`.

Real HTTP (httpx), one connection pool shared by the stage's threads, so `--concurrency N`
keeps N requests in flight; the stage driver still writes records in input order.

- **Key**: VI_LLM_API_KEY, else OPENAI_API_KEY, sent as a Bearer token; never on the command
  line, never in a message or a log line (httpx's request log is silenced).
- **Retries**: a 429, a 5xx, a timeout or a dropped connection is retried with exponential
  backoff (0.5 s doubling, at most 30 s, or the server's Retry-After), VI_LLM_RETRIES times
  (default 4); then the record gets an `llm_unavailable` error. Timeout per request:
  VI_LLM_TIMEOUT seconds (default 600: a long reply on a busy server is slow, not dead).
- **JSON schema**: sent as `response_format: {type: json_schema}` (vLLM, SGLang, llama.cpp's
  C++ server, OpenAI); a server that refuses that shape is asked with `{type: json_object,
  schema}` (llama-cpp-python's server), then without; what worked is kept for the next
  requests. Replies are validated whatever the server promised, and asked again when wrong.
- **Images** (VLM servers, hosted models): `image_part` turns a frame into a base64 data URL in
  the standard multimodal message format.
- **Token counts**: the server's tokenizer where it has an endpoint (llama-cpp-python's
  /extras/tokenize, vLLM's and llama.cpp's /tokenize), else a conservative estimate (one
  token per 2 UTF-8 bytes; real tokenizers average 3 to 4 on English), which at worst cuts a
  long transcript into more chunks than it needed.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import logging
import os
import random
import threading
import time
from typing import Any

from vi.core.errors import RecordError, SetupError
from vi.core.models.cache import load_once
from vi.core.models.chat_backend import MESSAGE_OVERHEAD_TOKENS, ChatReply, LLMSpec, chat_json, env_number

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
BYTES_PER_TOKEN_ESTIMATE = 2
FORMATS = ("json_schema", "json_object", None)  # response_format shapes, tried in this order
LLAMA_CPP_OWNERS = ("me", "llamacpp")  # /models' owned_by: llama-cpp-python's server, llama.cpp's
COUNT_CACHE = 4096  # token counts kept: extract-steps counts the same prompt for every record

logging.getLogger("httpx").setLevel(logging.WARNING)  # its INFO lines name every request
log = logging.getLogger(__name__)


def api_key() -> str | None:
    return os.environ.get("VI_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def _headers() -> dict[str, str]:
    key = api_key()
    return {"Authorization": f"Bearer {key}"} if key else {}


def check_server(spec: LLMSpec, timeout_s: float = 10.0) -> None:
    """The server answers GET /models (a SetupError, exit 5, otherwise); a model it does not list
    is only warned about, since some servers route any name to the one model they serve."""
    import httpx

    try:
        response = httpx.get(f"{spec.url}/models", headers=_headers(), timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise SetupError(f"the LLM server {spec.url} does not answer ({type(exc).__name__}: {exc}); start it, "
                         "or fix the URL in --llm openai:MODEL@URL") from None
    if response.status_code in (401, 403):
        raise SetupError(f"the LLM server {spec.url} refused the key ({response.status_code}); set "
                         "VI_LLM_API_KEY (or OPENAI_API_KEY) to a key it accepts")
    if response.status_code >= 500:
        raise SetupError(f"the LLM server {spec.url} answered {response.status_code} to GET /models: "
                         f"{response.text[:200]}")
    try:
        served = [m.get("id") for m in response.json().get("data", [])]
    except (ValueError, AttributeError):
        return
    if served and spec.model not in served:
        log.warning("the LLM server %s lists %s, not %r; asking for %r anyway", spec.url,
                    ", ".join(map(str, served[:5])), spec.model, spec.model)


def image_part(frame: Any, quality: int = 90) -> dict[str, Any]:
    """A message content part holding `frame` (an HxWx3 uint8 array, a PIL image or encoded
    JPEG/PNG bytes) as a base64 data URL, the format OpenAI, vLLM and SGLang read."""
    if isinstance(frame, (bytes, bytearray)):
        data, mime = bytes(frame), "image/png" if bytes(frame[:4]) == b"\x89PNG" else "image/jpeg"
    else:
        from PIL import Image

        image = frame if isinstance(frame, Image.Image) else Image.fromarray(frame)
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="JPEG", quality=quality)
        data, mime = buffer.getvalue(), "image/jpeg"
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}


class OpenAIChat:
    """Chat completions from one model of one server; safe to call from many threads at once."""

    def __init__(self, spec: LLMSpec, n_ctx: int, in_flight: int = 1):
        import httpx

        self.spec, self.name, self._n_ctx = spec, f"{spec.model}@{spec.url}", n_ctx
        self.retries = int(env_number("VI_LLM_RETRIES", 4))
        timeout = env_number("VI_LLM_TIMEOUT", 600.0)
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 30.0)),
                                   limits=httpx.Limits(max_connections=max(in_flight, 1) + 2))
        self.format = FORMATS[0]
        self._tokenize: str | None = ""  # "" not probed yet; None: the server has no tokenizer endpoint
        self._counts: dict[str, int] = {}
        self._extra: dict[str, Any] | None = None
        self._lock = threading.Lock()

    @property
    def n_ctx(self) -> int:
        return self._n_ctx  # the server's own context is not reported by the API: --n-ctx says it

    # --- tokens ------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        if text not in self._counts:
            count = self._server_count(text)
            if count is None:
                count = -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN_ESTIMATE)
            if len(self._counts) < COUNT_CACHE:
                self._counts[text] = count
            return count
        return self._counts[text]

    def count_message_tokens(self, messages: list[dict[str, Any]]) -> int:
        def text(content: Any) -> str:
            if isinstance(content, str):
                return content
            return " ".join(p.get("text", "") for p in content or [] if p.get("type") == "text")

        return sum(self.count_tokens(text(m["content"])) + MESSAGE_OVERHEAD_TOKENS for m in messages)

    def _server_count(self, text: str) -> int | None:
        import httpx

        root = self.spec.url.removesuffix("/v1")
        endpoints = ([self._tokenize] if self._tokenize else [] if self._tokenize is None
                     else [f"{root}/extras/tokenize", f"{root}/tokenize"])
        for endpoint in endpoints:
            try:
                response = self.client.post(endpoint, headers=_headers(), json={
                    "model": self.spec.model, "input": text, "prompt": text, "content": text})
                tokens = response.json().get("tokens") if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError, AttributeError):
                tokens = None
            if isinstance(tokens, list):
                self._tokenize = endpoint
                return len(tokens)
        if self._tokenize == "":
            self._tokenize = None
            log.info("the LLM server %s has no tokenize endpoint: token counts are estimated (%d bytes a "
                     "token)", self.spec.url, BYTES_PER_TOKEN_ESTIMATE)
        return None

    # --- chat ----------------------------------------------------------------------------------
    def chat(self, messages: list[dict[str, Any]], *, schema: dict[str, Any] | None = None,
             max_tokens: int = 512, temperature: float = 0.0, seed: int = 0) -> ChatReply:
        options = {"max_tokens": max_tokens, "temperature": temperature, "seed": seed}
        if schema is None:
            return self._ask(messages, schema=None, **options)
        return chat_json(functools.partial(self._ask, schema=schema), messages, schema, **options)

    def _ask(self, messages: list[dict[str, Any]], *, schema: dict[str, Any] | None, max_tokens: int,
             temperature: float, seed: int) -> ChatReply:
        body = {"model": self.spec.model, "messages": messages, "max_tokens": max_tokens,
                "temperature": temperature, "seed": seed, **self._extra_body()}
        if schema is None:
            return self._reply(self._post(body))
        mode = self.format
        while True:
            response = self._post({**body, **_response_format(mode, schema)})
            if not _refused_format(response) or mode is None:
                break
            # Refused: the format's shape, or the request itself? A lesser format tells.
            lesser = FORMATS[FORMATS.index(mode) + 1]
            log.info("the LLM server %s refused response_format %s (%d); trying %s", self.spec.url, mode,
                     response.status_code, lesser or "none (replies validated)")
            mode = lesser
        if response.status_code == 200 and mode != self.format:
            with self._lock:
                self.format = mode
        return self._reply(response)

    def _extra_body(self) -> dict[str, Any]:
        """VI_LLM_EXTRA_BODY (a JSON object) merged into every request; and for llama.cpp's servers,
        whose repeat_penalty defaults to 1.1 where OpenAI's API has none, repeat_penalty 1.0, so that
        temperature 0 means the plain greedy decoding vi's in-process llama.cpp does."""
        if self._extra is None:
            import httpx

            extra: dict[str, Any] = {}
            try:
                served = httpx.get(f"{self.spec.url}/models", headers=_headers(), timeout=10).json()["data"]
                if any(m.get("owned_by") in LLAMA_CPP_OWNERS for m in served):
                    extra["repeat_penalty"] = 1.0
            except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
                pass
            text = os.environ.get("VI_LLM_EXTRA_BODY")
            if text:
                try:
                    extra.update(json.loads(text))
                except (ValueError, TypeError):
                    raise SetupError(f"VI_LLM_EXTRA_BODY is not a JSON object: {text[:100]!r}") from None
            self._extra = extra
        return self._extra

    def _post(self, body: dict[str, Any]):
        """The server's answer to one request, after retrying what a retry can fix."""
        import httpx

        url, why = f"{self.spec.url}/chat/completions", ""
        for attempt in range(self.retries + 1):
            wait = min(30.0, 0.5 * 2**attempt) * (0.75 + 0.5 * random.random())
            try:
                response = self.client.post(url, json=body, headers=_headers())
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                why = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code not in RETRY_STATUS or _refused_format(response):
                    return response
                why = f"HTTP {response.status_code}: {response.text[:200]}"
                wait = _retry_after(response, wait)
            if attempt < self.retries:
                log.info("LLM server %s: %s; retrying in %.1f s", self.spec.url, why, wait)
                time.sleep(wait)
        raise RecordError("llm_unavailable", f"the LLM server {self.spec.url} failed {self.retries + 1} tries "
                          f"(last: {why}); once it is back, rerun with --resume --retry-errors")

    def _reply(self, response) -> ChatReply:
        if response.status_code != 200:
            raise RecordError("llm_request_refused", f"the LLM server {self.spec.url} refused the request "
                              f"(HTTP {response.status_code}: {response.text[:300]})")
        try:
            out = response.json()
            choice, usage = out["choices"][0], out.get("usage") or {}
            text = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise RecordError("llm_output_invalid", f"the LLM server {self.spec.url} sent no chat completion "
                              f"({type(exc).__name__}: {response.text[:200]})") from None
        return ChatReply(text=text, prompt_tokens=usage.get("prompt_tokens") or 0,
                         completion_tokens=usage.get("completion_tokens") or 0,
                         finish_reason=choice.get("finish_reason") or "stop")

    def close(self) -> None:
        self.client.close()


def _response_format(mode: str | None, schema: dict[str, Any]) -> dict[str, Any]:
    if mode == "json_schema":  # strict false: OpenAI's strict mode wants every property required
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "reply", "schema": schema, "strict": False}}}
    if mode == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    return {}


def _refused_format(response) -> bool:
    """A refusal that may be of response_format's shape: a 400/422, or any error that names it
    (llama-cpp-python's server answers 500 to a request its schema does not validate)."""
    return response.status_code in (400, 422) or (
        response.status_code >= 400 and "response_format" in response.text)


def _retry_after(response, default: float) -> float:
    try:
        return min(60.0, max(0.0, float(response.headers.get("retry-after", ""))))
    except ValueError:
        return default


def load_openai_chat(spec: LLMSpec, *, n_ctx: int, in_flight: int = 1) -> OpenAIChat:
    return load_once(("openai", spec, n_ctx, in_flight), lambda: OpenAIChat(spec, n_ctx, in_flight))
