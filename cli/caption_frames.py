"""`vi caption-frames`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from vi.cli.app import app
from vi.cli.llm_options import ConcurrencyOption
from vi.cli.stage import stage_command
from vi.core.models.vlm import KNOWN_VLMS
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.progresscaptioner import caption_frames as cf
from vi.pipelines.progresscaptioner import offline_captioner as oc


@stage_command(
    app, "caption-frames",
    summary="One caption per frame of a sequence, progress-aware (ProgressCaptioner): a VLM sees the frames "
            "as T images and answers <Frame i>: lines.",
    reads="[cyan]frames[/cyan] = [{time, path}] (vi frames) and [cyan]action[/cyan] when present (else the "
          "prompt without an action).",
    writes="[cyan]captions[/cyan] (or --into FIELD) = {model, kind, window, prompt, items: [{frame, text}], "
           "repairs}: [cyan]frame[/cyan] indexes [cyan]frames[/cyan]; [cyan]kind[/cyan] is vlm, openai or "
           f"{oc.KIND} (the offline captioner: ImageNet labels and view changes, no actions); windowed runs "
           "add [cyan]from[/cyan] (the window's frames) to each item, and a frame's first item is its caption. "
           "[cyan]repairs[/cyan] lists what the reply parser fixed. A sequence --window full cannot take (1 "
           "frame, or more than --max-frames), missing frame files, or a reply lacking a frame's caption after "
           "one retry are error records.",
    example="vi frames -i clips.jsonl --select kmeans | vi caption-frames --window full -o captions.jsonl",
    models=True,
)
def caption_frames_command(
    opts: StreamOptions,
    vlm: Annotated[str, typer.Option(
        help="The captioner. A transformers VLM folder or hub id in the local cache (LLaVA-OneVision, "
             "Qwen2-VL/Qwen2.5-VL, Idefics3/SmolVLM, a vi train captioner checkpoint), optionally written "
             "transformers:REF; openai:MODEL@URL for an OpenAI-compatible server (vLLM, SGLang, a hosted "
             "model; key from VI_LLM_API_KEY); offline: EfficientNet-Lite0's ImageNet labels and whether the "
             f"view changed, said as such; auto: the first cached of {', '.join(KNOWN_VLMS)}, else offline."
    )] = cf.AUTO,
    window: Annotated[str, typer.Option(
        help="full: the whole sequence in one request (2 to --max-frames frames); N: N-frame sliding windows, "
             "frame t captioned by the window ending at t (2: (v_{t-1}, v_t), frame 0 from (v0, v1)); 1: "
             "each frame alone (the image-captioning baseline).")] = "full",
    keep_both: Annotated[bool, typer.Option(
        help="With --window 2 or more: also keep the captions from the other windows holding a frame (with 2, "
             "the one from (v_t, v_{t+1})).")] = False,
    into: Annotated[str, typer.Option(
        help="The field to write, so that several captioners can sit in one record (captions_b, ...).")
    ] = "captions",
    prompt: Annotated[Path | None, typer.Option(
        help="Your own prompt (see the packaged prompt_templates/progress_caption.txt); it must use "
             "${frame_lines} and may use ${n_frames} and ${action}.")] = None,
    max_new_tokens: Annotated[int, typer.Option(
        help="Longest reply per request, in tokens.")] = cf.CaptionConfig.max_new_tokens,
    batch_size: Annotated[int, typer.Option(
        help="Requests per generate call of a transformers VLM (left-padded; a batch that fails, out of "
             "memory say, is redone one at a time).")] = 4,
    max_frames: Annotated[int, typer.Option(
        help="The most frames --window full sends at once; longer sequences are error records that say to "
             "use --window N.")] = cf.MAX_FULL_FRAMES,
    top_k: Annotated[int, typer.Option(help="Offline: ImageNet labels named per frame.")] = oc.TOP_K,
    change_threshold: Annotated[float, typer.Option(
        help="Offline: image-feature cosine distance above which a frame counts as a changed view.")
    ] = oc.CHANGE_THRESHOLD,
    missing: Annotated[str, typer.Option(
        help="A reply without some frame's caption, also after its retry: error (the record is an error "
             "record) or keep (the field keeps the captions given and lists the others in 'missing'; for "
             "records several captioners share, so a weak one costs only its own captions).")] = "error",
    device: str = "auto",
    dtype: str = "auto",
    concurrency: ConcurrencyOption = 1,
):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as vi describe: torch's spinning threads starve others
    config = cf.CaptionConfig(vlm=vlm, window=window, keep_both=keep_both, into=into, prompt=prompt,
                              max_new_tokens=max_new_tokens, batch_size=batch_size, max_frames=max_frames,
                              top_k=top_k, change_threshold=change_threshold, device=device, dtype=dtype,
                              seed=opts.seed, concurrency=concurrency, missing=missing)
    records = batch_size if config.backend == "vlm" else 4 * concurrency if config.backend == "openai" else 8
    stage = Stage(cf.STAGE, writes=(into,), process_batch=lambda batch: cf.caption_batch(batch, config),
                  batch_size=records)
    return run_stage(stage, read_records(opts.input, cf.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
