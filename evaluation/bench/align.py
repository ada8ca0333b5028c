"""`vi align-frames` against the raw libraries, for `make bench` (`vi.evaluation.bench.run`).

On the how-to samples (`vi.evaluation.demo.samples.HOWTO_SAMPLES`, with their true steps), in one
run, alternating (A B C, C B A, ...):
- decoding: the frames per second the stage's decoding delivers (only the candidate frames,
  each once, at the encoder's size) against decord decoding every frame of the same videos at
  the same size; and the seconds each takes, which is what a user waits for;
- encoding: images per second through the stage's scorer (`encode_frames`, timed inside the
  stage) against the bare classifier forward pass on the same frames, preprocessed the same
  way, in the same batches.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from vi.core import media
from vi.evaluation.showhowto.align_quality import truth_records
from vi.evaluation.bench.tools import Row, alternate, median, progress, show_sample, time_spent_in
from vi.pipelines.common import frame_scorers
from vi.pipelines.showhowto.align_frames import AlignConfig, align_record, candidate_windows, scorer_for, video_geometry

TARGET_RATIO = 1.10


def decode_every_frame(path: Path, width: int, height: int) -> int:
    """What a script without candidate selection does: decord reads the whole video."""
    from decord import VideoReader, cpu

    reader = VideoReader(str(path), ctx=cpu(0), width=width, height=height)
    for _ in range(len(reader)):
        reader.next()
    return len(reader)


def raw_encoder(scorer):
    """The bare model forward pass on frames as the stage decodes them, batched the same."""
    import torch

    if isinstance(scorer, frame_scorers.ImageNetLabelScorer):
        def forward(frames: np.ndarray):
            x = frame_scorers.fit(frame_scorers.to_tensor(frames, scorer.placement), scorer.size,
                                  frame_scorers.IMAGENET_RESIZE)
            return scorer.classifier.model((x - 127.0) / 128.0)
    elif isinstance(scorer, frame_scorers.ClipScorer):
        def forward(frames: np.ndarray):
            return scorer.clip.model.encode_image(scorer._pixels(frames))
    else:
        raise TypeError(f"no raw encoder to compare the {scorer.name} scorer with")

    def run(frames: np.ndarray) -> None:
        with torch.inference_mode(), frame_scorers._autocast(scorer.placement):
            for start in range(0, len(frames), scorer.batch_size):
                forward(frames[start:start + scorer.batch_size])
    return run


def bench_align_frames(sample_dir: Path, out_dir: Path, repeats: int = 3, model: str = "imagenet-labels",
                       device: str = "cpu", videos: int | None = None) -> list[Row]:
    """`videos`: the first so many how-to samples (None: all; fewer: the bench's smoke run)."""
    samples = [record for record, _ in truth_records(sample_dir)][:videos]
    config = AlignConfig(model=model, device=device)
    scorer = scorer_for(config.scorer, config.placement, config.batch_size)
    progress.print(f"  align-frames on {len(samples)} how-to samples, scorer {config.scorer.name}")
    outputs = [align_record(record, config) for record in samples]  # untimed: loads and first calls
    candidates = sum(out["alignment"]["candidates"] for out in outputs)
    geometry = [video_geometry(record) for record in samples]
    sizes = [scorer.decode_size(width, height) for _, _, width, height in geometry]
    # The very frames the stage encodes, decoded once up front for the bare encoder.
    frames = [media.read_frames(path, candidate_windows(record["steps"]["items"], config.fps, config.eps,
                                                        duration)[1], w, h)
              for record, (path, duration, *_), (w, h) in zip(samples, geometry, sizes)]
    encode = raw_encoder(scorer)
    decode_s: list[float] = []
    encode_s: list[float] = []
    total_frames = [0]

    def stage():
        spent_decode, spent_encode = [], []
        with time_spent_in(media, "read_frames", spent_decode), \
                time_spent_in(scorer, "encode_frames", spent_encode):
            for record in samples:
                align_record(record, config)
        decode_s.append(sum(spent_decode))
        encode_s.append(sum(spent_encode))

    def full_decode():
        total_frames[0] = sum(decode_every_frame(path, w, h) for (path, *_), (w, h) in zip(geometry, sizes))

    def bare_encoder():
        for chunk in frames:
            encode(chunk)

    samples_by_run = alternate({"stage": stage, "decord, every frame": full_decode,
                                "bare encoder": bare_encoder}, repeats, show_sample)
    full_s = [s.wall for s in samples_by_run["decord, every frame"]]
    raw_s = [s.wall for s in samples_by_run["bare encoder"]]
    vi_decode, raw_decode = median(decode_s), median(full_s)
    vi_encode, raw_encode = median(encode_s), median(raw_s)
    note = f"{candidates} candidate frames of {total_frames[0]}; median of {repeats}"
    rows = [
        Row("align-frames, frames decoded per second", candidates / vi_decode, total_frames[0] / raw_decode,
            "frames/s", note=f"{note}; baseline = decord, every frame, same size"),
        Row("  decoding, seconds", vi_decode, raw_decode, "s", 1.0, "only the frames a step needs: no slower"),
        Row("align-frames, encoder images per second", candidates / vi_encode, candidates / raw_encode,
            "img/s", note=f"{config.scorer.name}, batch {config.batch_size}; baseline = bare forward pass"),
        Row("  encoding, ms per image", 1000 * vi_encode / candidates, 1000 * raw_encode / candidates, "ms",
            TARGET_RATIO, "top-5 + features to numpy on top of the forward pass"),
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "align_frames.json").write_text(json.dumps({
        "model": config.scorer.name, "device": config.placement.device, "candidates": candidates,
        "frames_in_videos": total_frames[0], "stage_decode_s": decode_s, "stage_encode_s": encode_s,
        "samples": {name: [asdict(s) for s in runs] for name, runs in samples_by_run.items()},
        "rows": [row.as_dict() for row in rows]}, indent=2) + "\n")
    return rows

