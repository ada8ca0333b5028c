"""StepDiff's model in `make bench` (`vi.evaluation.bench.run`, section f), as ratios measured in one run:

- training throughput (samples per second) when the encoder's tokens come from a feature store
  (`vi encode-videos` once, then `vi train stepdiff`) against decoding and encoding every clip
  again at every step, as a training loop without a store does. Same model, batches and steps;
- DiffMCQ scoring throughput (candidate pairs per second): the 4 option pairs of a row in one
  batched forward pass (what `vi predict --method stepdiff` does) against one pass per option.

Real models, all embedded: EfficientNet-Lite0 tokens of 8 frames (8 x 49 x 1280) from the how-to
samples' narrated clips, and SmolLM2-135M as the frozen LLM, on the bench machine's device.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from vi.evaluation.bench.tools import Row, alternate, median, progress, show_sample

SAMPLES = ("fruit_salad", "fruit_salad_peeler", "garden_wildlife", "ball_games")
QUESTION = "What does the person say in the second video?"
BATCH, STEPS, ROWS = 2, 2, 4  # small: on 2 CPU cores one step of SmolLM2 with 2 x 32 video tokens takes seconds


def sample_clips(sample_dir: Path, videos: tuple[str, ...] = SAMPLES) -> list[dict]:
    """One clip per narrated sentence of the how-to samples (what vi clips makes of their steps)."""
    clips = []
    for name in videos:
        script = json.loads((sample_dir / f"{name}.json").read_text())
        for i, sentence in enumerate(script["sentences"]):
            clips.append({"id": f"{name}_{i}", "video": str(sample_dir / f"{name}.mp4"), "start": sentence["start"],
                          "end": sentence["end"], "narration": sentence["text"]})
    return clips


def bench_stepdiff(sample_dir: Path, out_dir: Path, repeats: int = 3, device: str = "cpu", steps: int = STEPS,
                   rows: int = ROWS, videos: tuple[str, ...] = SAMPLES, clips: int | None = None,
                   batch: int = BATCH) -> list[Row]:
    """`steps`, `rows`, `videos`, `clips` (the first so many of the videos' clips; None: all) and `batch`
    smaller than the defaults: the bench's smoke run."""
    import torch
    from vi.core.devices import resolve_placement
    from vi.core.features import FeatureStore, FeatureWriter
    from vi.pipelines.stepdiff.model import StepDiffModel
    from vi.core.models.catalog import DEFAULT_IMAGE_CLASSIFIER, SMALL_LLM
    from vi.core.models.resolve import resolve
    from vi.pipelines.stepdiff.video_encoder import encode_video, load_video_encoder

    placement = resolve_placement(device)
    clips = sample_clips(sample_dir, videos)[:clips]
    encoder = load_video_encoder(resolve(DEFAULT_IMAGE_CLASSIFIER, "video-encoder"), placement)
    torch.manual_seed(0)
    model = StepDiffModel.build(SMALL_LLM, encoder.info, placement, dim=256)
    optimizer = torch.optim.AdamW(model.projector.parameters(), lr=1e-4)
    pairs = [(clips[i], clips[(i + 5) % len(clips)]) for i in range(len(clips))]
    sequences = {(a["id"], b["id"]): model.format.finished(model.format.pair_question(
        QUESTION, (a["id"], b["id"]), answer=b["narration"])[0]) for a, b in pairs}
    progress.print(f"  StepDiff: {len(clips)} clips, {encoder.info['encoder']} tokens "
                   f"{encoder.info.get('frames')}x{encoder.info.get('tokens_per_frame')}x{encoder.info['dim']}, "
                   f"SmolLM2-135M, projector width 256, batch {batch}, {steps} steps and {rows} DiffMCQ rows per sample, "
                   f"{placement.device}")
    with tempfile.TemporaryDirectory(prefix="vi-bench-stepdiff-") as tmp:
        writer = FeatureWriter(Path(tmp), encoder.info)
        writer.write({c["id"]: encode_video(encoder, c["video"], c["start"], c["end"]) for c in clips})
        store = FeatureStore(Path(tmp))
        position = [0]

        def step(features_of) -> None:
            chosen = [pairs[(position[0] + k) % len(pairs)] for k in range(batch)]
            position[0] += batch
            features = {c["id"]: features_of(c) for pair in chosen for c in pair}
            loss = model.loss([sequences[(a["id"], b["id"])] for a, b in chosen], features)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        def cached():
            for _ in range(steps):
                step(lambda c: store.get(c["id"]))

        def re_encoded():
            for _ in range(steps):
                step(lambda c: encode_video(encoder, c["video"], c["start"], c["end"]))

        cached()  # first calls: allocator, kernels
        train_runs = alternate({"cached features": cached, "re-encoding": re_encoded}, repeats, show_sample)

        scoring = [(a["id"], b["id"]) for a, b in pairs[:rows]]
        options = {pair: [model.format.pair_question(QUESTION, pair, seed="In Video 2,", answer=f" {text}")[0]
                          for text in ("the person cuts.", "the person peels.", "the person mixes.",
                                       "the person waits.")] for pair in scoring}
        features = {c: store.get(c) for pair in scoring for c in pair}

        def batched():
            for pair in scoring:
                model.scores(options[pair], features)

        def one_by_one():
            for pair in scoring:
                for sequence in options[pair]:
                    model.scores([sequence], features)

        score_runs = alternate({"batched": batched, "one by one": one_by_one}, repeats, show_sample)
    samples = batch * steps
    cached_s = median([s.wall for s in train_runs["cached features"]])
    encode_s = median([s.wall for s in train_runs["re-encoding"]])
    batched_s = median([s.wall for s in score_runs["batched"]])
    single_s = median([s.wall for s in score_runs["one by one"]])
    option_pairs = 4 * len(scoring)
    table = [
        Row("train stepdiff, samples per second", samples / cached_s, samples / encode_s, "samples/s",
            note=f"baseline = decode + encode every clip at every step; median of {repeats}"),
        Row("  seconds per step, cached vs re-encoding", cached_s / steps, encode_s / steps, "s", 1.0,
            "the store must be faster"),
        Row("DiffMCQ scoring, candidate pairs per second", option_pairs / batched_s, option_pairs / single_s,
            "pairs/s", note="baseline = one forward pass per option pair"),
        Row("  seconds per row, batched vs one by one", batched_s / len(scoring), single_s / len(scoring), "s", 1.0,
            "batching the 4 options must be faster"),
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "stepdiff.json").write_text(json.dumps({
        "device": placement.device, "clips": len(clips), "batch": batch, "steps": steps,
        "train_s": {k: [s.wall for s in v] for k, v in train_runs.items()},
        "score_s": {k: [s.wall for s in v] for k, v in score_runs.items()},
        "rows": [row.as_dict() for row in table]}, indent=2) + "\n")
    return table
