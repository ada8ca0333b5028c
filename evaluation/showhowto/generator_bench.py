"""`make bench`, ShowHowTo's generator on the tiny model (generator_tiny) at 32x32, on the CPU:

- generation: images per second with `batch` sequences per model call against one sequence at a
  time (what the release's inference script does), same sequences, same DDIM steps and seeds. The
  images must agree (each sequence has its own noise generator; batched float sums may differ in the
  last bits, so the check is a tolerance);
- training: samples per second with `--cache-latents` (VAE, CLIP image and text encoders run once
  per frame and prompt) against running them at every step (the default), same batches.

Both sides alternate A B B A after an untimed warm-up. The model being tiny, the frozen encoders weigh
more of a step than next to a 1.4 B U-Net: the ratios say what caching and batching save here.

    python -m vi.evaluation.showhowto.generator_bench
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

SIZE = 32


def bench_generator(sequences: int = 8, frames: int = 4, batch: int = 8, ddim_steps: int = 10, train_steps: int = 8,
                    train_batch: int = 4, repeats: int = 3, threads: int = 1, work: Path | None = None) -> dict:
    import numpy as np
    import torch

    from vi.core.training import make_accelerator
    from vi.evaluation.bench.tools import alternate
    from vi.evaluation.showhowto import generator_tiny as tiny
    from vi.pipelines.showhowto import train_generator as tg
    from vi.pipelines.showhowto.generator import Guidance, ShowHowToGenerator
    from vi.pipelines.showhowto.generator_data import read_dataset
    from vi.pipelines.showhowto.generator_model import load_parts

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="vi-bench-gen-", dir=work) as tmp:
            folder = Path(tmp)
            model = tiny.build_tiny(folder / "tiny", size=SIZE)
            data = tiny.make_colour_dataset(folder / "data", sequences=max(sequences, 16), size=SIZE,
                                            lengths=(frames, frames))
            found = read_dataset(data)[:sequences]
            generator = ShowHowToGenerator(load_parts(model)).eval()
            pixels = torch.stack([torch.from_numpy(np.asarray(s.tiles(SIZE)[0], np.float32)).permute(2, 0, 1)
                                  for s in found]) / 127.5 - 1
            prompts = [s.prompts for s in found]
            guidance = Guidance(steps=ddim_steps)

            def noise():
                return [torch.Generator().manual_seed(i) for i in range(len(found))]

            def one_at_a_time():
                return torch.cat([generator.generate(pixels[i:i + 1], prompts[i:i + 1], guidance, [g])
                                  for i, g in enumerate(noise())])

            def batched():
                gens = noise()
                return torch.cat([generator.generate(pixels[i:i + batch], prompts[i:i + batch], guidance,
                                                     gens[i:i + batch]) for i in range(0, len(found), batch)])

            agree = float((one_at_a_time() - batched()).abs().max())  # also the warm-up
            gen = alternate({"batched": batched, "single": one_at_a_time}, repeats)
            images = len(found) * (frames - 1)

            def trainer(cache: bool) -> tg.Trainer:
                config = tg.GeneratorTrainConfig(output=folder / f"run-{cache}", model=model, data=[data],
                                                 batch_size=train_batch, min_frames=frames, max_frames=frames,
                                                 cache_latents=cache, quiet=True)
                return tg.Trainer(config, ShowHowToGenerator(load_parts(model)), read_dataset(data), [],
                                  make_accelerator("cpu", "no"))

            trainers = {"cached": trainer(True), "encoded": trainer(False)}

            def train(name: str):
                def run():
                    t = trainers[name]
                    t.step = 0  # the same batches every time (the draw depends on the step)
                    for _ in range(train_steps):
                        t.train_step()
                return run

            for name in trainers:  # warm-up; fills the cache
                train(name)()
            fit = alternate({name: train(name) for name in trainers}, repeats)
    finally:
        torch.set_num_threads(before)

    def per_s(samples, count):
        return round(count / statistics.median(s.wall for s in samples), 3)

    return {"device": "cpu", "threads": threads, "size": SIZE, "frames": frames, "ddim_steps": ddim_steps,
            "batch": batch, "sequences": len(found), "max_abs_difference": agree,
            "images_per_s": {k: per_s(v, images) for k, v in gen.items()},
            "train_samples_per_s": {k: per_s(v, train_steps * train_batch) for k, v in fit.items()},
            "train_steps": train_steps, "train_batch": train_batch}


def generator_bench_rows(result: dict) -> list:
    from vi.evaluation.bench.tools import Row

    gen, fit = result["images_per_s"], result["train_samples_per_s"]
    return [
        Row(f"generate: {result['batch']} sequences per call (tiny, {result['device']})", 1e3 / gen["batched"],
            1e3 / gen["single"], "ms", None,
            f"ms/image, baseline one sequence per call; {result['sequences']} sequences of {result['frames']} frames, "
            f"{result['size']}x{result['size']}, {result['ddim_steps']} DDIM steps; largest pixel difference "
            f"{result['max_abs_difference']:.1e}"),
        Row(f"train showhowto --cache-latents (tiny, {result['device']})", 1e3 / fit["cached"],
            1e3 / fit["encoded"], "ms", None,
            f"ms/sample, baseline runs the VAE and CLIP encoders every step; batch {result['train_batch']}, "
            f"{result['frames']} frames"),
    ]


if __name__ == "__main__":
    started = time.perf_counter()
    print(json.dumps({**bench_generator(), "seconds": round(time.perf_counter() - started, 1)}))
