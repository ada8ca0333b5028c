"""`make bench`, extract-steps: vi's LLM call against the raw llama.cpp call, same prompt.

vi's side is `extract_steps.extract(record)` with `--segmentation model`, the same one request
(prompt rendering, token counting for the chunk plan, the schema-constrained call, parsing and
repair); the raw side is one
`Llama.create_chat_completion` on the same messages with the same JSON schema, greedy,
from a fresh context like vi's (vi resets the context per record, so a record's steps do
not depend on the record before it). Both share one loaded model and alternate. The stage's
default (`--segmentation filtered`: a label pass reading every line twice, the steps grounded on
the lines, a second request for missed steps) does more than that one request; with
`with_default` it is a third side, its row what that work costs against the one call (no target).
"""

from __future__ import annotations

import json
from pathlib import Path

from vi.evaluation.bench.tools import Row, alternate, median, progress, show_sample, walls

TARGET_RATIO = 1.10


def transcript_record(truth_path: Path) -> dict:
    """A record whose transcript is the sample's exact script, timed as it is spoken."""
    truth = json.loads(truth_path.read_text())
    segments = [{"start": s["start"], "end": s["end"], "text": s["text"]} for s in truth["sentences"]]
    return {"id": truth_path.stem, "title": truth["title"], "transcript": {"segments": segments},
            "duration": segments[-1]["end"] + 1.0}


def bench_extract_steps(sample_dir: Path, repeats: int = 2, model: str | None = None, with_default: bool = False,
                        **options) -> dict:
    """`options` are ExtractConfig's, --segmentation model unless given (the bench's smoke run: a
    short reply too). A reply that is no steps (cut off by a small max_new_tokens) is timed all the
    same, and its error kept. `with_default`: the stage's default segmentation as a third side."""
    import dataclasses

    from vi.core.config import defaults
    from vi.core.errors import RecordError
    from vi.pipelines.showhowto import extract_steps as es

    config = es.ExtractConfig(**({"llm": model} if model else {}), **{"segmentation": "model", **options})
    record = transcript_record(sample_dir / "fruit_salad.json")
    llm = config.load_llm()
    # the very prompt and schema vi's one chunk sends (ask_for_steps): its speech lines, numbered from 1
    lines, _ = es.speech_lines(record)
    messages = config.template.render(title=record["title"], transcript="\n".join(es.numbered_lines(lines)))
    schema = es.steps_schema(list(range(1, len(lines) + 1)))
    tokens: dict[str, int | str] = {}

    def vi_side():
        try:
            tokens["vi_steps"] = len(es.extract(record, config)["steps"]["items"])
        except RecordError as exc:
            tokens["vi_error"] = exc.kind

    default = dataclasses.replace(config, segmentation=defaults(es.ExtractConfig)["segmentation"]) \
        if with_default else None

    def default_side():
        try:
            tokens["default_steps"] = len(es.extract(record, default)["steps"]["items"])
        except RecordError as exc:
            tokens["default_error"] = exc.kind

    def raw_side():
        llm.llama.reset()
        out = llm.llama.create_chat_completion(
            messages=messages, max_tokens=config.max_new_tokens, temperature=0.0,
            response_format={"type": "json_object", "schema": schema})
        tokens["prompt"] = out["usage"]["prompt_tokens"]
        tokens["completion"] = out["usage"]["completion_tokens"]

    progress.print(f"  extract-steps on {record['id']} with {config.llm}, {repeats} runs per side")
    vi_side()  # warm-up: the model is loaded and the first call's allocations are done
    sides, shown = {"vi": vi_side, "raw": raw_side}, {}
    if default:
        sides["vi_default"], shown["vi_default"] = default_side, f"vi, {default.segmentation}"
    samples = alternate(sides, repeats, on_sample=lambda name, s: show_sample(shown.get(name, name), s))
    return {"model": config.llm, "record": record["id"], "segmentation": config.segmentation, **tokens,
            **({"default": default.segmentation} if default else {}),
            **{name: [s.__dict__ for s in runs] for name, runs in samples.items()}}


def extract_steps_rows(result: dict) -> list[Row]:
    from vi.evaluation.bench.tools import Sample

    vi_s = median(walls([Sample(**s) for s in result["vi"]]))
    raw_s = median(walls([Sample(**s) for s in result["raw"]]))
    generated = result.get("completion", 0)
    rate = (f"{generated / vi_s:.1f} vs {generated / raw_s:.1f} generated tokens per second of the call"
            if generated else "")
    rows = [Row("extract-steps, one video", vi_s, raw_s, "s", TARGET_RATIO,
                f"{result['model']}, --segmentation {result.get('segmentation', 'model')}: the same one request; "
                f"{result.get('prompt', '?')} prompt + {generated} generated tokens, JSON-schema constrained; "
                f"{rate}; raw = create_chat_completion"
                f"{'; vi failed: ' + result['vi_error'] if result.get('vi_error') else ''}")]
    if result.get("vi_default"):
        rows.append(Row(f"  the default, --segmentation {result['default']}", median(walls(
            [Sample(**s) for s in result["vi_default"]])), raw_s, "s", None,
            "what the label pass (every line read twice), the grounding and a request for missed steps cost "
            f"against the one call; {result.get('default_steps', '?')} steps"
            f"{'; failed: ' + result['default_error'] if result.get('default_error') else ''}"))
    return rows
