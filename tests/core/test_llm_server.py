"""The LLM stages through a real OpenAI-compatible server: llama-cpp-python's own
(`python -m llama_cpp.server`, the [server] extra), started once for this module on 127.0.0.1
with the embedded SmolLM2-135M, and compared with the same model in process; and the
transformers backend against transformers' own generate."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import httpx
import pytest

from conftest import jsonl, run_vi
from vi.core.models.chat import LLMSettings, LLMSpec, load_llm
from vi.core.models.llm import gguf_path

pytestmark = pytest.mark.slow
SMOL = "smollm2-135m"
RECORDS = "".join(json.dumps(r) + "\n" for r in [
    {"id": "bike", "title": "How to fix a bike tire", "transcript": {"segments": [
        {"start": 0, "end": 4, "text": "First remove the wheel from the bike."},
        {"start": 4, "end": 9, "text": "Then take the tire off with two levers and find the hole."}]}},
    {"id": "vlog", "title": "My holiday vlog", "transcript": {"segments": [
        {"start": 0, "end": 4, "text": "Hi guys, today we went to the beach."},
        {"start": 4, "end": 9, "text": "It was sunny and we had ice cream."}]}},
])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("uvicorn", reason="llama-cpp-python's server needs the [server] extra (make install)")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path(SMOL)),
                             "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
                             "--n_ctx", "4096", "--n_threads", "1", "--verbose", "False"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("llama_cpp.server did not start")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_stage_through_the_server_matches_the_model_in_process(server):
    """Greedy, same prompt, same weights, same engine: the same reply, word for word, for the
    server's first request (this test runs first in the module). Later requests reuse the
    previous prompt's KV-cache prefix on llama-cpp-python's server, which vi in process does
    not (it resets per record): a different split of the same computation, whose rounding can
    change a tiny model's greedy reply, so for them only the answer words are compared. The labels
    are not: a server scores no answers, so filter-instructional decides there from both written
    answers, in process from their likelihoods (its decision says which)."""
    spec = f"openai:smollm2@{server}"
    first = RECORDS.splitlines(keepends=True)[0]
    remote_first = run_vi("filter-instructional", "-q", "--llm", spec, stdin=first, check=True)
    remote = run_vi("filter-instructional", "-q", "--llm", spec, "--concurrency", "2", stdin=RECORDS, check=True)
    local = run_vi("filter-instructional", "-q", "--model", SMOL, "--threads", "1", stdin=RECORDS, check=True)
    remote_out, local_out = jsonl(remote.stdout), jsonl(local.stdout)
    assert [r["instructional"]["model"] for r in remote_out] == [spec, spec]
    assert [r["instructional"]["model"] for r in local_out] == [SMOL, SMOL]
    paper = lambda r: r["instructional"]["decision"]["paper"]  # noqa: E731  (the paper's question, written)
    reply = lambda r: {k: paper(r)[k] for k in ("answer", "explanation")}  # noqa: E731
    assert reply(jsonl(remote_first.stdout)[0]) == reply(local_out[0])
    assert [r["id"] for r in remote_out] == ["bike", "vlog"]  # two in flight, written in input order
    assert [paper(r)["answer"] for r in remote_out] == [paper(r)["answer"] for r in local_out]
    assert all("log_odds" not in paper(r) for r in remote_out) and all("log_odds" in paper(r) for r in local_out)


def test_pair_qa_and_extract_steps_run_through_the_server(server):
    spec = f"openai:smollm2@{server}"
    pair = {"id": "p", "keystep": "cut the lemon", "reference": {"narration": "I cut the lemon in half."},
            "candidate": {"narration": "I slice the lemon into thin rounds."}}
    done = run_vi("pair-qa", "-q", "--llm", spec, "--types", "3", stdin=json.dumps(pair) + "\n", check=True)
    assert jsonl(done.stdout)[0]["qa_stats"]["model"] == spec
    done = run_vi("extract-steps", "-q", "--llm", spec, "--max-new-tokens", "200", stdin=RECORDS)
    assert done.returncode in (0, 3), done.stderr  # SmolLM2 may cite nonsense: an error record, not a crash
    for record in jsonl(done.stdout):
        assert record.get("steps", {}).get("model") == spec or record["errors"][0]["stage"] == "extract-steps"


def test_token_counts_come_from_the_servers_tokenizer(server):
    remote = load_llm(LLMSettings(f"openai:smollm2@{server}"))
    local = load_llm(LLMSettings(SMOL, threads=1))
    text = "Peel an orange and break it into segments."
    assert remote.count_tokens(text) in (local.count_tokens(text), local.count_tokens(text) + 1)  # + BOS
    assert remote._tokenize.endswith("/extras/tokenize")


def test_transformers_backend_matches_transformers_generate_alone_and_batched():
    import torch
    from concurrent.futures import ThreadPoolExecutor

    alone = load_llm(LLMSettings(f"transformers:{SMOL}", device="cpu"))
    batched = load_llm(LLMSettings(f"transformers:{SMOL}", device="cpu", concurrency=2))
    assert LLMSpec.parse(f"transformers:{SMOL}").backend == "transformers"
    questions = ["Name a fruit.", "How do I boil an egg? Answer in one sentence."]
    messages = [[{"role": "user", "content": q}] for q in questions]
    own = []
    for m in messages:  # transformers' own generate, one prompt at a time, greedy
        ids = torch.tensor([alone.prompt_ids(m)])
        out = alone.lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                                      do_sample=False, pad_token_id=alone.generation.pad_token_id)
        own.append(alone.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
    assert [alone.chat(m, max_tokens=12).text for m in messages] == own
    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(lambda m: batched.chat(m, max_tokens=12), messages))
    assert [r.text for r in replies] == own  # one left-padded batch of 2, same greedy replies here
    assert replies[0].finish_reason in ("stop", "length") and replies[0].prompt_tokens > 0


def test_a_stage_runs_on_the_transformers_backend():
    pair = {"id": "p", "keystep": "cut the lemon", "reference": {"narration": "I cut the lemon in half."},
            "candidate": {"narration": "I slice the lemon into thin rounds."}}
    done = run_vi("pair-qa", "-q", "--llm", f"transformers:{SMOL}", "--device", "cpu", "--types", "3",
                  "--max-new-tokens", "16", stdin=json.dumps(pair) + "\n", check=True)
    assert jsonl(done.stdout)[0]["qa_stats"]["model"] == f"transformers:{SMOL}"
