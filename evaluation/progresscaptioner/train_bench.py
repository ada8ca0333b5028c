"""`make bench`, train captioner: training samples per second with `--cache-images` (each image file decoded
once, kept in memory) against re-reading every image for every batch (the default), for SFT and for DPO, on a
tiny random LLaVA-OneVision (the paper's family; `caption_bench.build_tiny_vlm`).

The data: `records` records of 2 frames each, drawn from `frames` distinct solid-colour JPEGs of 640x360 (the
size `vi frames` writes), so over `steps` x `batch_size` samples each file is read several times without the
cache (`reads_per_frame`) and once with it. Both sides run `vi train captioner`'s own trainer
(`build_trainer`, then `train()`; the trainer built before the clock starts), same data, same steps, same
seed, alternating A B B A A B, on the CPU. The cache saves the decoding only (about 2 x decode_ms_per_frame a
sample): the processor's resizing and tiling (process_ms_per_frame, several times more) still runs every batch.
The model being tiny, the step is cheap and the input side weighs more than on a 7B model: the ratio says what
the cache saves of this step, not of a real run's.

DPO with precomputed reference log-probabilities is not measured: TRL 1.16 refuses `precompute_ref_log_probs`
for vision datasets. What it could save at most is reported instead: the share of a DPO step spent in the
reference model's forward.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

FRAME_SIZE = (640, 360)
PROMPT = "Describe each frame."


def write_frames_data(folder: Path, frames: int, records: int, size: tuple[int, int] = FRAME_SIZE) -> dict:
    """`frames` solid-colour JPEGs of `size` and sft.jsonl / dpo.jsonl of `records` 2-frame records in vi
    captioner-data's format (all split train); returns the two files' paths."""
    import colorsys

    from PIL import Image

    (folder / "frames").mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(frames):
        rgb = tuple(round(255 * c) for c in colorsys.hsv_to_rgb(i / frames, 0.8, 0.9))
        name = f"frames/{i:04d}.jpg"
        Image.new("RGB", size, rgb).save(folder / name, quality=90)
        names.append(name)

    def reply(text: str) -> list[dict]:
        return [{"role": "assistant", "content": [{"type": "text", "text": text}]}]

    sft, dpo = [], []
    for i in range(records):
        a, b = i % frames, (i + 1 + i // frames) % frames
        common = {"id": f"r{i}", "split": "train", "images": [names[a], names[b]],
                  "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "image"},
                                                          {"type": "text", "text": PROMPT}]}]}
        chosen = f"<Frame 1>: colour {a}\n<Frame 2>: the frame turns colour {b}"
        sft.append({**common, "completion": reply(chosen)})
        dpo.append({**common, "chosen": reply(chosen), "rejected": reply(f"<Frame 1>: colour {b}\n<Frame 2>: the "
                                                                         f"frame stays colour {b}")})
    paths = {}
    for method, rows in (("sft", sft), ("dpo", dpo)):
        paths[method] = folder / f"{method}.jsonl"
        paths[method].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return paths


def bench_train_captioner(records: int = 32, frames: int = 16, steps: int = 20, batch_size: int = 4,
                          dpo_steps: int = 10, repeats: int = 3, size: tuple[int, int] = FRAME_SIZE,
                          threads: int = 1, work: Path | None = None) -> dict:
    """Training samples per second with --cache-images and without, SFT (`steps` steps) and DPO (`dpo_steps`),
    each the median of `repeats` alternating runs after an untimed warm-up, timed from the Trainer's
    train-begin to its train-end event (its setup left out); plus the DPO reference forward's share of that
    time and the milliseconds to decode and to process (the model's image processor) one frame. CPU, with
    `threads` torch threads (restored after): a model this small runs fastest on one, and more threads than
    free cores on a shared machine make the timing noise, not the data work."""
    import torch
    from transformers import AutoProcessor, TrainerCallback
    from vi.evaluation.bench.tools import alternate, time_spent_in
    from vi.evaluation.progresscaptioner.caption_bench import build_tiny_vlm
    from vi.pipelines.progresscaptioner import train_captioner as tc
    from vi.pipelines.progresscaptioner.train_captioner_data import decode_image

    class Clock(TrainerCallback):
        def __init__(self, into: list[float]):
            self.into = into

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_train_end(self, args, state, control, **kwargs):
            self.into.append(time.perf_counter() - self.start)

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            root = Path(tmp)
            model = build_tiny_vlm("llava_onevision", root / "llava_onevision")
            data = write_frames_data(root / "data", frames, records, size)
            paths = [str(p) for p in sorted((root / "data" / "frames").iterdir())]
            decode_image(paths[0])  # its imports
            start = time.perf_counter()
            images = [decode_image(p) for p in paths]
            decode_s = (time.perf_counter() - start) / frames
            image_processor = AutoProcessor.from_pretrained(str(model)).image_processor
            image_processor(images[:1])
            start = time.perf_counter()
            for image in images:
                image_processor([image])
            process_s = (time.perf_counter() - start) / frames
            built = 0

            def trainer(method: str, cache: bool, max_steps: int, clock: list[float] | None = None):
                nonlocal built
                built += 1
                output = root / "runs" / f"{built}"
                output.mkdir(parents=True)
                config = tc.CaptionerTrainConfig(
                    output=output, data=data[method], model=str(model), method=method, device="cpu", quiet=True,
                    batch_size=batch_size, max_steps=max_steps, lr=1e-4, vision_lr=2e-5, warmup_ratio=0.0,
                    scheduler="constant", gradient_checkpointing=False, save_every=10**9, log_every=10**9,
                    cache_images=cache)
                job = tc.build_trainer(config)[0]
                if clock is not None:
                    job.add_callback(Clock(clock))
                return job

            result: dict = {"arch": "llava_onevision", "device": "cpu", "torch_threads": threads,
                            "frame_size": list(size), "frames": frames, "records": records, "batch_size": batch_size,
                            "repeats": repeats, "decode_ms_per_frame": round(decode_s * 1e3, 2),
                            "process_ms_per_frame": round(process_s * 1e3, 2)}
            for method, count in (("sft", steps), ("dpo", dpo_steps)):
                trainer(method, True, 1).train()  # warm-up: first-call costs on neither side
                clocks: dict[str, list[float]] = {"cached": [], "reread": []}
                ready = {name: [trainer(method, name == "cached", count, clocks[name]) for _ in range(repeats)]
                         for name in clocks}
                ref_s: list[float] = []

                def run(name: str):
                    job = ready[name].pop()
                    if method == "dpo" and name == "cached":  # the reference forward's time, on one side
                        with time_spent_in(job.ref_model, "forward", ref_s):
                            job.train()
                    else:
                        job.train()

                alternate({"cached": lambda: run("cached"), "reread": lambda: run("reread")}, repeats)
                wall = {name: statistics.median(times) for name, times in clocks.items()}
                samples = count * batch_size
                result[method] = {"steps": count, "samples": samples,
                                  "reads_per_frame": round(samples * 2 / frames, 2),
                                  "cached_samples_per_s": round(samples / wall["cached"], 2),
                                  "reread_samples_per_s": round(samples / wall["reread"], 2),
                                  "speedup": round(wall["reread"] / wall["cached"], 3)}
                if method == "dpo":
                    result[method]["ref_forward_ms_per_step"] = round(sum(ref_s) / repeats / count * 1e3, 2)
                    result[method]["cached_ms_per_step"] = round(wall["cached"] / count * 1e3, 2)
    finally:
        torch.set_num_threads(before)
    return result


def train_bench_rows(result: dict) -> list:
    """make bench's rows: ms per training sample with --cache-images vs re-reading the frames, SFT and DPO, and
    the DPO reference forward's share of a step (the most precomputed reference log-probs could save)."""
    from vi.evaluation.bench.tools import Row

    w, h = result["frame_size"]
    rows = []
    for method in ("sft", "dpo"):
        part = result[method]
        rows.append(Row(f"train captioner {method.upper()} --cache-images ({result['arch']}, {result['device']})",
                        1e3 / part["cached_samples_per_s"], 1e3 / part["reread_samples_per_s"], "ms", None,
                        f"ms/sample, baseline re-reads every frame; {result['frames']} {w}x{h} JPEGs "
                        f"({result['decode_ms_per_frame']} ms to decode one, {result['process_ms_per_frame']} ms to "
                        f"process it: not cached), each read {part['reads_per_frame']}x without the cache; "
                        f"tiny random model, {result['torch_threads']} thread"))
    dpo = result["dpo"]
    rows.append(Row("  DPO reference forward, of a step", dpo["ref_forward_ms_per_step"], dpo["cached_ms_per_step"],
                    "ms", None, "ratio = its share of a cached DPO step: the most precomputed reference log-probs "
                    "could save; TRL 1.16 refuses precompute_ref_log_probs for vision datasets"))
    return rows


if __name__ == "__main__":
    # python -m vi.evaluation.progresscaptioner.train_bench     the bench, its result as one JSON line
    print(json.dumps(bench_train_captioner()))
