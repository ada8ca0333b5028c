"""`make bench`, ShowHowTo's generator (DynamiCrafter's architecture) on tiny models at 16x16, on the CPU:

- generation: images per second with `batch` sequences per `generate` call (one U-Net call holds every
  frame of every sequence, conditional and unconditional) against one sequence at a time (what the
  release's predict.py does), same sequences, same DDIM steps and seeds, on generator_tiny's model.
  The images must agree (each sequence has its own noise generator; batched float sums may differ in
  the last bits, so the check is a tolerance: the largest difference is reported);
- training: samples per second with `--cache-latents` (the autoencoder, the OpenCLIP image and text
  encoders and the Resampler run once per frame and prompt) against running them at every step (the
  default), same batches (`Trainer.train_step`, one length per step);
- the sampler against the release's own: with SHOWHOWTO_RELEASE set to a checkout of
  github soCzech/ShowHowTo at 29700e2 (its dependencies in SHOWHOWTO_RELEASE_DEPS, default
  /work/release/deps, put on PYTHONPATH for the release's process only), a subprocess runs
  evaluation/showhowto/dynamicrafter_golden.py --bench: predict.py's `image_guided_synthesis` (DDIM,
  guidance 7.5, eta 1) on one sequence with the test fixture's weights (tests/showhowto/data/
  dynamicrafter/tiny_release.pt, config evaluation/showhowto/tiny_model/tiny.yaml), with the same
  thread count; vi's side times `generate` on the same weights and inputs (`bench_inputs`, the same
  seed) before and after it. The ratio is release seconds / vi seconds (>= 1: vi at least as fast),
  and the two sides' frames of the timed runs must agree to 1e-3.

Both sides of the first two alternate A B B A after an untimed warm-up. The model being tiny, the
frozen encoders weigh more of a step than next to a 1.4 B U-Net: the ratios say what caching and
batching save here.

    python -m vi.evaluation.showhowto.generator_bench
    SHOWHOWTO_RELEASE=/path/to/ShowHowTo python -m vi.evaluation.showhowto.generator_bench
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZE = 16
ROOT = Path(__file__).resolve().parents[2]
GOLDEN_SCRIPT = Path(__file__).resolve().parent / "dynamicrafter_golden.py"
RELEASE_WEIGHTS = ROOT / "tests" / "showhowto" / "data" / "dynamicrafter" / "tiny_release.pt"
RELEASE_CONFIG = Path(__file__).resolve().parent / "tiny_model"
RELEASE_DEPS = "/work/release/deps"
RELEASE_SEED = 1234
AGREEMENT = 1e-3  # vi's frames against the release's, same seed (fp32; the parity tests hold 1e-4 at 5 steps)
SKIPPED = "skipped: set SHOWHOWTO_RELEASE to a checkout of soCzech/ShowHowTo at 29700e2"


def bench_generator(sequences: int = 8, frames: int = 4, batch: int = 8, ddim_steps: int = 10, train_steps: int = 8,
                    train_batch: int = 4, repeats: int = 3, threads: int = 1, work: Path | None = None,
                    release: str | None = None, release_deps: str | None = None) -> dict:
    """`release` (default: $SHOWHOWTO_RELEASE) a checkout of the release to time its sampler against vi's;
    None and no variable: that part is skipped."""
    import numpy as np
    import torch

    from vi.core.training import make_accelerator
    from vi.evaluation.bench.tools import alternate
    from vi.evaluation.showhowto import generator_tiny as tiny
    from vi.pipelines.showhowto import train_generator as tg
    from vi.pipelines.showhowto.generator import Sampling, generate
    from vi.pipelines.showhowto.generator_data import read_dataset
    from vi.pipelines.showhowto.generator_model import load, resolve_source

    release = release if release is not None else os.environ.get("SHOWHOWTO_RELEASE") or None
    release_deps = release_deps or os.environ.get("SHOWHOWTO_RELEASE_DEPS") or RELEASE_DEPS
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="vi-bench-gen-", dir=work) as tmp:
            folder = Path(tmp)
            source = resolve_source(tiny.build_tiny(folder / "tiny", size=SIZE))
            data = tiny.make_colour_dataset(folder / "data", sequences=max(sequences, 16), size=SIZE,
                                            lengths=(frames, frames))
            found = read_dataset(data)[:sequences]
            model = load(source).place("cpu")
            pixels = torch.stack([torch.from_numpy(np.asarray(s.tiles(SIZE)[0], np.float32)).permute(2, 0, 1)
                                  for s in found]) / 127.5 - 1
            prompts = [list(s.prompts) for s in found]
            sampling = Sampling(steps=ddim_steps)

            def noise():
                return [torch.Generator().manual_seed(i) for i in range(len(found))]

            def one_at_a_time():
                return torch.cat([generate(model, pixels[i:i + 1], prompts[i:i + 1], sampling, [g])
                                  for i, g in enumerate(noise())])

            def batched():
                gens = noise()
                return torch.cat([generate(model, pixels[i:i + batch], prompts[i:i + batch], sampling,
                                           gens[i:i + batch]) for i in range(0, len(found), batch)])

            agree = float((one_at_a_time() - batched()).abs().max())  # also the warm-up
            gen = alternate({"batched": batched, "single": one_at_a_time}, repeats)
            images = len(found) * (frames - 1)

            def trainer(cache: bool) -> tg.Trainer:
                config = tg.GeneratorTrainConfig(output=folder / f"run-{cache}", init=source.weights, data=[data],
                                                 batch_size=train_batch, min_frames=frames, max_frames=frames,
                                                 cache_latents=cache, quiet=True)
                trained = load(source).place("cpu")
                trained.unet.requires_grad_(True)
                trained.train()
                t = tg.Trainer(config, trained, source, read_dataset(data), [], make_accelerator("cpu", "no"))
                t.model = tg._Loss(trained)  # what run_training hands accelerate: the loss as a module's forward
                return t

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

            against = (compare_release(Path(release), release_deps, ddim_steps, frames, threads, repeats, folder)
                       if release else SKIPPED)
    finally:
        torch.set_num_threads(before)

    def per_s(samples, count):
        return round(count / statistics.median(s.wall for s in samples), 3)

    return {"device": "cpu", "threads": threads, "size": SIZE, "frames": frames, "ddim_steps": ddim_steps,
            "batch": batch, "sequences": len(found), "max_abs_difference": agree,
            "images_per_s": {k: per_s(v, images) for k, v in gen.items()},
            "train_samples_per_s": {k: per_s(v, train_steps * train_batch) for k, v in fit.items()},
            "train_steps": train_steps, "train_batch": train_batch, "release": against}


def compare_release(release: Path, deps: str, steps: int, frames: int, threads: int, repeats: int,
                    folder: Path) -> dict | str:
    """The release's image_guided_synthesis (a subprocess running dynamicrafter_golden.py --bench) against
    vi's `generate`, one sequence, same weights, inputs, seed and threads: vi's runs before and after the
    release's (A B A), the median of each side. A string says why there is no comparison."""
    import torch

    from vi.evaluation.showhowto.dynamicrafter_golden import bench_inputs
    from vi.pipelines.showhowto.generator import Sampling, generate
    from vi.pipelines.showhowto.generator_model import Source, load

    if not (release / "predict.py").is_file():
        return f"skipped: SHOWHOWTO_RELEASE={release} has no predict.py (a checkout of soCzech/ShowHowTo at 29700e2)"
    if not RELEASE_WEIGHTS.is_file():
        return f"skipped: {RELEASE_WEIGHTS} is missing (the parity fixtures)"
    model = load(Source(RELEASE_WEIGHTS, RELEASE_CONFIG / "tiny.yaml")).place("cpu")
    size = model.spec.image_size
    image, prompts = bench_inputs(RELEASE_SEED, frames, size)
    sampling = Sampling(steps=steps, guidance=7.5, eta=1.0)

    def vi_run() -> tuple[float, torch.Tensor]:
        start = time.perf_counter()
        out = generate(model, image, [list(prompts)], sampling, [torch.Generator().manual_seed(RELEASE_SEED)])
        return time.perf_counter() - start, out[0]

    vi_run()  # warm-up
    vi_seconds = [vi_run()[0] for _ in range(repeats)]

    saved = folder / "release_frames.pt"
    command = [sys.executable, str(GOLDEN_SCRIPT), "--release", str(release), "--bench", "--weights",
               str(RELEASE_WEIGHTS), "--config", str(RELEASE_CONFIG), "--steps", str(steps), "--frames", str(frames),
               "--threads", str(threads), "--repeats", str(repeats), "--seed", str(RELEASE_SEED), "--save", str(saved)]
    env = {**os.environ, "PYTHONPATH": deps, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return f"failed: the release's bench exited {done.returncode}: {' | '.join(tail)}"
    theirs = json.loads(lines[-1])

    for _ in range(repeats):
        seconds, ours = vi_run()
        vi_seconds.append(seconds)
    difference = float((ours - torch.load(saved, map_location="cpu", weights_only=True)).abs().max())
    vi_s, release_s = statistics.median(vi_seconds), float(theirs["seconds_per_sequence"])
    return {"vi_seconds_per_sequence": round(vi_s, 4), "release_seconds_per_sequence": round(release_s, 4),
            "ratio_release_over_vi": round(release_s / vi_s, 3), "max_abs_difference": difference,
            "agrees": difference <= AGREEMENT, "tolerance": AGREEMENT, "vi_samples": [round(s, 4) for s in vi_seconds],
            "release_samples": [round(s, 4) for s in theirs["samples"]], "steps": steps, "frames": frames,
            "size": size, "threads": threads, "seed": RELEASE_SEED, "guidance": 7.5, "eta": 1.0,
            "release_commit": theirs.get("release_commit"), "weights": str(RELEASE_WEIGHTS.relative_to(ROOT)),
            "command": " ".join(["PYTHONPATH=" + deps, "python", *command[1:]])}


def generator_bench_rows(result: dict) -> list:
    from vi.evaluation.bench.tools import Row

    gen, fit = result["images_per_s"], result["train_samples_per_s"]
    rows = [
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
    release = result.get("release")
    if isinstance(release, dict):
        rows.append(Row(
            f"generate: vi's sampler vs the release's, sequences/s (tiny, {result['device']})",
            1 / release["vi_seconds_per_sequence"], 1 / release["release_seconds_per_sequence"], "seq/s", None,
            f"ratio = release s / vi s (>= 1: vi at least as fast); baseline predict.py's image_guided_synthesis "
            f"at {release['release_commit'][:7]}, one sequence of {release['frames']} frames, {release['size']}x"
            f"{release['size']}, {release['steps']} DDIM steps, {release['threads']} thread(s); largest pixel "
            f"difference {release['max_abs_difference']:.1e}" + ("" if release["agrees"] else " (over 1e-3!)")))
    return rows


if __name__ == "__main__":
    started = time.perf_counter()
    print(json.dumps({**bench_generator(), "seconds": round(time.perf_counter() - started, 1)}))
