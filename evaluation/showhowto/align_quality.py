"""How often `vi align-frames` picks a frame that shows its step, on the bundled how-to samples.

    python -m vi.evaluation.showhowto.align_quality SAMPLE_DIR [--model imagenet-labels] [--seeds 20]

Each sample (`vi.evaluation.demo.samples.HOWTO_SAMPLES`: fruit_salad, garden_wildlife, ball_games;
made in SAMPLE_DIR if missing) shows one picture per step, a real photo for most of them,
over a known interval (`shown` in NAME.json). The aligner gets the true steps (text, start,
end) with ShowHowTo's settings (1 fps, eps 15 s: on these 25 s videos every step may pick
almost any frame), and a chosen frame is a hit when its time falls inside the step's `shown`
interval; an unaligned step is a miss. The random scorer's hit rate is the mean over seeds.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vi.evaluation.demo.samples import HOWTO_SAMPLES, make_howto_sample
from vi.pipelines.showhowto.align_frames import AlignConfig, align_record

FPS, EPS = 1.0, 15.0  # ShowHowTo's window


@dataclass
class Quality:
    model: str
    runs: int  # seeds averaged over (1 for a deterministic scorer)
    steps: int
    photo_steps: int
    hit_rate: float  # over all steps
    photo_hit_rate: float  # over the steps that show a real photo

    def as_row(self) -> list[str]:
        return [self.model, str(self.runs), f"{self.hit_rate:.2f} of {self.steps}",
                f"{self.photo_hit_rate:.2f} of {self.photo_steps}"]


def truth_records(sample_dir: Path) -> list[tuple[dict, list[dict]]]:
    """(input record with the true steps, the truth steps with `shown` and `photo`) per sample."""
    out = []
    for name in HOWTO_SAMPLES:
        video = make_howto_sample(sample_dir, name).resolve()
        truth = json.loads((sample_dir / f"{name}.json").read_text())
        items = [{"text": s["text"], "start": s["start"], "end": s["end"]} for s in truth["steps"]]
        out.append(({"id": name, "video": str(video), "steps": {"title": truth["title"], "items": items}},
                    truth["steps"]))
    return out


def hits(aligned: dict, truth: list[dict]) -> list[bool]:
    """Per step: the chosen frame lies inside the interval the step's picture is on screen."""
    return [item["frame"] is not None and step["shown"][0] <= item["frame"]["time"] <= step["shown"][1]
            for item, step in zip(aligned["steps"]["items"], truth)]


def evaluate(samples: list[tuple[dict, list[dict]]], config: AlignConfig) -> tuple[list[bool], list[bool]]:
    all_hits, photo_hits = [], []
    for record, truth in samples:
        result = hits(align_record(record, config), truth)
        all_hits += result
        photo_hits += [hit for hit, step in zip(result, truth) if step["photo"]]
    return all_hits, photo_hits


def align_quality(sample_dir: Path, models: Sequence[str] = ("imagenet-labels",), seeds: int = 20,
                  device: str = "auto") -> list[Quality]:
    """One Quality per model in `models`, then the random scorer's mean over `seeds` seeds."""
    samples = truth_records(sample_dir)
    results = []
    for model in models:
        all_hits, photo_hits = evaluate(samples, AlignConfig(model=model, fps=FPS, eps=EPS, device=device))
        results.append(Quality(model, 1, len(all_hits), len(photo_hits), sum(all_hits) / len(all_hits),
                               sum(photo_hits) / len(photo_hits)))
    rates, photo_rates = [], []
    for seed in range(seeds):
        all_hits, photo_hits = evaluate(samples, AlignConfig(model="random", fps=FPS, eps=EPS, seed=seed))
        rates.append(sum(all_hits) / len(all_hits))
        photo_rates.append(sum(photo_hits) / len(photo_hits))
    results.append(Quality("random", seeds, len(all_hits), len(photo_hits), sum(rates) / seeds,
                           sum(photo_rates) / seeds))
    return results


def table(results: list[Quality]):
    from rich.table import Table

    out = Table(title=f"align-frames: chosen frame shows its step (fps {FPS:g}, eps {EPS:g} s)",
                title_justify="left")
    for header in ("scorer", "runs", "hit rate, all steps", "hit rate, photo steps"):
        out.add_column(header, justify="left" if header == "scorer" else "right")
    for result in results:
        out.add_row(*result.as_row())
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.showhowto.align_quality",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("sample_dir", type=Path, help="folder of the how-to samples (made there if missing)")
    parser.add_argument("--model", action="append", dest="models",
                        help="a scorer to evaluate (repeatable; default imagenet-labels); random is always added")
    parser.add_argument("--seeds", type=int, default=20, help="seeds the random scorer is averaged over")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    results = align_quality(args.sample_dir, args.models or ["imagenet-labels"], args.seeds, args.device)
    Console(width=120).print(table(results))


if __name__ == "__main__":
    main()
