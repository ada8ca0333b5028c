"""`make bench`, LLM backends: an LLM stage through a local server with 1, 4 and 8 requests in
flight, against the same model in process; on a GPU, transformers batched against one at a time.

    python -m vi.evaluation.bench.llm_server --records 12

The stage is filter-instructional on the same records, run by the stage driver (`run_stage`,
output to a file) in this process. The in-process side is llama.cpp with --threads = the
cores; the server side is llama-cpp-python's OpenAI-compatible server (`python -m
llama_cpp.server`, the same llama.cpp, as many threads) started here on 127.0.0.1. That
server runs one request at a time, so requests in flight overlap only the HTTP and the
client's work with the model's: it measures the client's overhead and that concurrency costs
nothing, not what vLLM's continuous batching gains. Ratios are seconds per record, server /
in process (below 1: the server side is faster).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vi.core.models.catalog import SMALL_LLM
from vi.evaluation.bench.tools import Row, progress

MODEL = SMALL_LLM
IN_FLIGHT = (1, 4, 8)
TOPICS = [("How to fix a bike tire", "First remove the wheel. Then lever the tire off and find the hole."),
          ("My holiday vlog", "Hi guys, today we went to the beach and had ice cream."),
          ("How to brew green tea", "Heat the water to eighty degrees. Steep the leaves for two minutes."),
          ("Phone review", "This phone has a great screen but the battery is disappointing."),
          ("How to plant tomatoes", "Dig a deep hole, put the seedling in and water it well."),
          ("Our research talk", "In this talk I present our results on protein folding.")]


def bench_records(count: int) -> list[dict]:
    return [{"id": f"r{i}", "title": TOPICS[i % len(TOPICS)][0] + f" ({i})", "transcript": {"segments": [
        {"start": 0.0, "end": 6.0, "text": TOPICS[i % len(TOPICS)][1]}]}} for i in range(count)]


def run_filter(spec: str, records: list[dict], concurrency: int, threads: int, out: Path, **options) -> float:
    """Seconds for filter-instructional over `records` with the LLM `spec` (loaded before timing);
    `options` are FilterConfig's (the bench's smoke run: short prompts)."""
    from vi.core.stream import Stage, StreamOptions, run_stage
    from vi.pipelines.showhowto import filter_instructional as fi

    config = fi.FilterConfig(llm=spec, threads=threads, concurrency=concurrency, **options)
    config.load_llm()  # loaded, or the server checked, outside the timing
    stage = Stage(fi.STAGE, writes=("instructional",), process=lambda r: fi.classify(r, config),
                  concurrency=concurrency)
    start = time.perf_counter()
    report = run_stage(stage, iter(records), StreamOptions(output=out, overwrite=True, quiet=True))
    seconds = time.perf_counter() - start
    if report.ok != len(records):
        raise RuntimeError(f"{spec}: {report.failed} of {len(records)} records failed: {report.failures[:2]}")
    return seconds


def start_server(model_path: Path, threads: int) -> tuple[subprocess.Popen, str]:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model_path),
                             "--model_alias", "bench", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
                             "--n_threads", str(threads), "--verbose", "False"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("llama_cpp.server did not start (is the [server] extra installed? make install)")


def bench_llm_server(count: int = 12, threads: int | None = None, **options) -> dict:
    """`threads` (default: the cores this process may run on) on both sides; `options` are FilterConfig's,
    both sides (the bench's smoke run: short prompts; the packaged prompt's worked examples are most of
    a call's cost)."""
    from vi.core.devices import usable_cpus
    from vi.core.models.resolve import resolve

    threads, records = threads or usable_cpus(), bench_records(count)
    result: dict = {"model": MODEL, "records": count, "threads": threads, "seconds": {},
                    "options": {k: str(v) for k, v in options.items()}}
    proc, url = start_server(resolve(MODEL, "llm"), threads)
    try:
        with tempfile.TemporaryDirectory(prefix="vi-bench-llm-") as tmp:
            out = Path(tmp) / "out.jsonl"
            sides = [("in process", MODEL, 1)] + [(f"server x{n}", f"openai:bench@{url}", n) for n in IN_FLIGHT]
            for name, spec, n in sides:
                progress.print(f"  {name}: {count} records")
                result["seconds"][name] = run_filter(spec, records, n, threads, out, **options)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result["gpu"] = bench_transformers_gpu(records, **options)
    return result


def bench_transformers_gpu(records: list[dict], **options) -> dict | None:
    """transformers batched (8 in flight) against one at a time, on a GPU only."""
    import torch

    if not torch.cuda.is_available():
        return None
    spec = f"transformers:{MODEL}"
    with tempfile.TemporaryDirectory(prefix="vi-bench-llm-") as tmp:
        out = Path(tmp) / "out.jsonl"
        return {"one at a time": run_filter(spec, records, 1, 1, out, **options),
                "batched x8": run_filter(spec, records, 8, 1, out, **options)}


def llm_server_rows(result: dict) -> list[Row]:
    count, seconds = result["records"], result["seconds"]
    local = seconds["in process"] / count
    rows = []
    for n in IN_FLIGHT:
        remote = seconds[f"server x{n}"] / count
        rows.append(Row(f"LLM stage via a server, {n} in flight", remote, local, "s", None,
                        f"s/record, {MODEL}, filter-instructional on {count} records; {1 / remote:.2f} vs "
                        f"{1 / local:.2f} records/s in process (llama.cpp, {result['threads']} threads both "
                        "sides); llama-cpp-python's server runs one request at a time"))
    gpu = result.get("gpu")
    if gpu:
        rows.append(Row("transformers on GPU, batched x8", gpu["batched x8"] / count, gpu["one at a time"] / count,
                        "s", None, f"s/record, {MODEL}; baseline one record at a time"))
    else:
        rows.append(Row("transformers on GPU, batched x8", None, None, "s", None, "no GPU on this machine: not measured"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=12)
    args = parser.parse_args()
    result = bench_llm_server(args.records)
    for row in llm_server_rows(result):
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else "-"
        vi_s = f"{row.vi:.3f}" if row.vi is not None else "-"
        base = f"{row.baseline:.3f}" if row.baseline is not None else "-"
        print(f"{row.what:42s} {vi_s:>8s} {base:>8s}  ratio {ratio:>5s}  {row.note}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
