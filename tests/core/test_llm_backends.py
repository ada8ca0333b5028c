"""The LLM backends behind every LLM stage: --llm specs, the OpenAI-compatible client against a
small local HTTP server that misbehaves on purpose (500s, slow replies, bad JSON, refusing a
response_format), concurrency with the output still in input order, kill + resume, a server
that is down; and the transformers backend against transformers' own generate.

The same client against a real llama.cpp server is tests/core/test_llm_server.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import VI, jsonl, run_vi
from vi.core.models.chat import LLMSettings, LLMSpec, chat_json, check_llm, reply_errors
from vi.core.models.llm import ChatReply
from vi.core.models.openai_chat import OpenAIChat, image_part

ANSWER = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["Yes", "No"]},
                                           "explanation": {"type": "string"}},
          "required": ["answer", "explanation"]}


class StubLLM:
    """An OpenAI-compatible chat server on 127.0.0.1 whose behaviour a test sets: `fail_first`
    requests answer 500, `delay(body)` seconds before each reply, `refuse` a response_format
    type with 422, `bad_first` replies that are not JSON. It answers Yes with the record's title."""

    def __init__(self, **behaviour):
        self.fail_first, self.bad_first = behaviour.get("fail_first", 0), behaviour.get("bad_first", 0)
        self.delay = behaviour.get("delay", lambda body: 0.0)
        self.refuse = behaviour.get("refuse", ())
        self.requests: list[dict] = []
        self.headers: list[str] = []
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, {"data": [{"id": "stub", "owned_by": "test"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": "no such endpoint"})
                with stub.lock:
                    stub.requests.append(body)
                    stub.headers.append(self.headers.get("Authorization", ""))
                    count = len(stub.requests)
                    stub.in_flight += 1
                    stub.most_in_flight = max(stub.most_in_flight, stub.in_flight)
                try:
                    time.sleep(stub.delay(body))
                    kind = (body.get("response_format") or {}).get("type")
                    if count <= stub.fail_first:
                        return self._send(500, {"error": "overloaded"})
                    if kind in stub.refuse:
                        return self._send(422, {"error": f"response_format {kind} unsupported"})
                    content = body["messages"][-1]["content"]
                    if isinstance(content, list):  # a multimodal message: its text parts
                        content = " ".join(p.get("text", "") for p in content)
                    title = re.search(r"Title: (.*)", content)
                    text = json.dumps({"answer": "Yes", "explanation": title.group(1) if title else "?"})
                    if count <= stub.fail_first + stub.bad_first:
                        text = "Sure! " + text
                    self._send(200, {"choices": [{"message": {"role": "assistant", "content": text},
                                                  "finish_reason": "stop"}],
                                     "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
                finally:
                    with stub.lock:
                        stub.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StubLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def records(n: int) -> str:
    return "".join(json.dumps({"id": f"v{i}", "title": f"video {i}", "transcript": {"segments": [
        {"start": 0, "end": 3, "text": f"Step one of task {i}: take the lid off the jar."}]}}) + "\n"
        for i in range(n))


FAST = {"VI_LLM_RETRIES": "3", "VI_LLM_TIMEOUT": "20"}


def filter_through(stub: StubLLM, *args: str, stdin: str, env: dict | None = None):
    """vi filter-instructional on the stub server, one request per record (--ask paper: these tests count
    the server backend's requests and retries; the filter's second question is tests/showhowto's)."""
    return run_vi("filter-instructional", "-q", "--ask", "paper", "--llm", f"openai:stub@{stub.url}", *args,
                  stdin=stdin,
                  env={**FAST, **(env or {})}, timeout=120)


# --- specs and schema checks ------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("smollm2-135m", LLMSpec("llama.cpp", "smollm2-135m")),
    ("llama.cpp:/m/x.gguf", LLMSpec("llama.cpp", "/m/x.gguf")),
    ("transformers:smollm2-135m", LLMSpec("transformers", "smollm2-135m")),
    ("openai:Qwen/Qwen2-VL-7B@http://h:8000/v1/", LLMSpec("openai", "Qwen/Qwen2-VL-7B", "http://h:8000/v1")),
    ("openai:a@b@https://x/v1", LLMSpec("openai", "a@b", "https://x/v1")),
])
def test_llm_specs_parse(text, expected):
    assert LLMSpec.parse(text) == expected


@pytest.mark.parametrize("text, message", [
    ("openai:model", "openai:MODEL@URL"), ("openai:m@ftp://x", "openai:MODEL@URL"),
    ("transformers:", "name the model"), ("openai:m@http://user:pw@host/v1", "carries credentials"),
])
def test_bad_llm_specs_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        LLMSpec.parse(text)


def test_reply_errors_name_what_breaks_the_schema():
    assert reply_errors('{"answer": "Yes", "explanation": "x"}', ANSWER) == []
    assert reply_errors('{"answer": "Maybe"}', ANSWER) == ["reply has no 'explanation'",
                                                           "reply.answer is 'Maybe', not one of ['Yes', 'No']"]
    assert reply_errors("Sure!", ANSWER)[0].startswith("not JSON")


def test_chat_json_asks_again_with_what_was_wrong_and_gives_up_on_a_cut_reply():
    asked: list[list[dict]] = []

    def ask(messages, **options):
        asked.append(messages)
        good = len(asked) == 2
        return ChatReply('{"answer": "No", "explanation": "e"}' if good else "nope", 1, 1, "stop")

    reply = chat_json(ask, [{"role": "user", "content": "q"}], ANSWER, max_tokens=9)
    assert reply.text.startswith('{"answer": "No"') and len(asked) == 2
    assert "not JSON" in asked[1][-1]["content"] and asked[1][-2] == {"role": "assistant", "content": "nope"}
    asked.clear()
    chat_json(lambda m, **o: asked.append(m) or ChatReply("{", 1, 9, "length"), [], ANSWER)
    assert len(asked) == 1  # cut off by max_tokens: asking again cannot help


# --- the OpenAI-compatible client against a local HTTP server -----------------------------------

def test_requests_in_flight_at_once_and_the_output_in_input_order():
    # the first records are the slowest, so replies arrive in another order than asked
    with StubLLM(delay=lambda body: 0.4 if "video 0" in json.dumps(body) else 0.05) as stub:
        done = filter_through(stub, "--concurrency", "4", stdin=records(8))
    assert done.returncode == 0, done.stderr
    out = jsonl(done.stdout)
    assert [r["id"] for r in out] == [f"v{i}" for i in range(8)]
    assert [r["instructional"]["reason"] for r in out] == [f"video {i}" for i in range(8)]
    assert out[0]["instructional"]["model"] == f"openai:stub@{stub.url}"
    assert stub.most_in_flight == 4
    assert stub.requests[0]["response_format"]["type"] == "json_schema"
    assert stub.requests[0]["temperature"] == 0.0 and isinstance(stub.requests[0]["seed"], int)


def test_a_killed_run_resumes_exactly_once(tmp_path):
    out = tmp_path / "out.jsonl"
    with StubLLM(delay=lambda body: 0.15) as stub:
        args = [VI, "filter-instructional", "-q", "--llm", f"openai:stub@{stub.url}", "--concurrency", "2",
                "-o", str(out)]
        proc = subprocess.Popen([*args], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env={**os.environ, **FAST}, text=True)
        proc.stdin.write(records(40))
        proc.stdin.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 8):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        first = out.read_text().count("\n")
        assert 8 <= first < 40
        done = run_vi(*args[1:], "--resume", stdin=records(40), env=FAST, timeout=120)
    assert done.returncode == 0, done.stderr
    ids = [r["id"] for r in jsonl(out.read_text())]
    assert sorted(ids) == sorted(f"v{i}" for i in range(40)) and len(ids) == 40


def test_a_500_is_retried_and_the_record_succeeds():
    with StubLLM(fail_first=2) as stub:
        done = filter_through(stub, stdin=records(1))
    assert done.returncode == 0, done.stderr
    assert jsonl(done.stdout)[0]["instructional"]["reason"] == "video 0" and len(stub.requests) == 3


def test_a_server_that_keeps_failing_gives_an_error_record_after_the_last_try():
    with StubLLM(fail_first=10**6) as stub:
        done = filter_through(stub, stdin=records(2), env={"VI_LLM_RETRIES": "1"})
    assert done.returncode == 3
    out = jsonl(done.stdout)
    assert [r["errors"][0]["kind"] for r in out] == ["llm_unavailable"] * 2
    assert "failed 2 tries (last: HTTP 500" in out[0]["errors"][0]["message"]
    assert "--resume" in out[0]["errors"][0]["message"] and len(stub.requests) == 4


def test_a_server_that_is_down_at_start_stops_the_stage_before_any_record():
    with StubLLM() as stub:
        url = stub.url
    done = run_vi("filter-instructional", "--llm", f"openai:stub@{url}", stdin=records(2), timeout=60)
    assert done.returncode == 5 and done.stdout == ""
    assert f"the LLM server {url} does not answer" in done.stderr


def test_a_refused_response_format_falls_back_and_replies_are_validated_and_asked_again():
    with StubLLM(refuse=("json_schema",), bad_first=2) as stub:
        done = filter_through(stub, stdin=records(2))
    assert done.returncode == 0, done.stderr
    kinds = [(r.get("response_format") or {}).get("type") for r in stub.requests]
    # json_schema refused, json_object kept from then on; the first reply was not JSON: asked again
    assert kinds == ["json_schema", "json_object", "json_object", "json_object"]
    assert "does not match the required JSON schema" in stub.requests[2]["messages"][-1]["content"]
    assert [r["instructional"]["label"] for r in jsonl(done.stdout)] == [True, True]


def test_the_key_comes_from_the_environment_and_is_never_printed():
    with StubLLM(fail_first=1) as stub:
        done = filter_through(stub, "-v", stdin=records(1), env={"VI_LLM_API_KEY": "sk-secret-123"})
    assert done.returncode == 0, done.stderr
    assert set(stub.headers) == {"Bearer sk-secret-123"}
    assert "sk-secret-123" not in done.stderr + done.stdout


def test_images_go_as_base64_data_urls_in_the_standard_message_format():
    import numpy as np

    part = image_part(np.zeros((4, 6, 3), dtype=np.uint8))
    assert part["type"] == "image_url" and part["image_url"]["url"].startswith("data:image/jpeg;base64,/9j/")
    with StubLLM() as stub:
        chat = OpenAIChat(LLMSpec("openai", "vlm", stub.url), n_ctx=4096)
        messages = [{"role": "user", "content": [part, {"type": "text", "text": "Title: a frame"}]}]
        assert "a frame" in chat.chat(messages, max_tokens=8).text
        assert stub.requests[0]["messages"][0]["content"][0] == part
        assert chat.count_message_tokens(messages) > 0  # text parts counted (estimated: no tokenizer)


def test_bad_llm_settings_fail_before_any_record():
    with pytest.raises(ValueError, match="--concurrency must be at least 1"):
        LLMSettings("smollm2-135m", concurrency=0)
    done = run_vi("extract-steps", "--llm", "openai:nothing", stdin=records(1))
    assert done.returncode == 2 and "openai:MODEL@URL" in done.stderr and done.stdout == ""
    with pytest.raises(Exception, match="no-such-model"):
        check_llm(LLMSettings("transformers:no-such-model"))


def test_likelihood_scoring_refuses_a_server_backend_with_the_reason():
    from vi.core.models.llm import gguf_path

    with pytest.raises(ValueError, match="likelihoods, which a chat server does not give"):
        gguf_path("openai:m@http://127.0.0.1:1/v1")  # vi predict --method socratic --llm ...
    assert gguf_path("llama.cpp:smollm2-135m") == gguf_path("smollm2-135m")
