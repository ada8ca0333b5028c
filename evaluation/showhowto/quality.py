"""The ShowHowTo pipeline end to end on narrated clips whose steps are known.

    python -m vi.evaluation.showhowto.quality SAMPLE_DIR [--llm qwen2.5-coder-1.5b] [--seeds 20]

On each how-to sample (`vi.evaluation.demo.samples.HOWTO_SAMPLES`, made in SAMPLE_DIR if
missing) it runs probe, transcribe (whisper-tiny.en), filter-instructional and
extract-steps with the embedded models, then align-frames with the offline scorer and with
random scores, and reports:
- step recall / precision: a true step is found when an extracted step overlaps it in time
  with IoU >= 0.5 (each extracted step matches at most one true step);
- frames in segment: of the true steps, the fraction whose matched extracted step got a
  frame inside the interval the true step's picture is on screen (a missed step counts as
  a miss), for the offline scorer and for random choice (mean over seeds).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from vi.core.models.catalog import DEFAULT_LLM
from vi.evaluation.demo.samples import HOWTO_SAMPLES, make_howto_sample

IOU_MATCH = 0.5


def iou(a: tuple[float, float], b: tuple[float, float]) -> float:
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 0 else 0.0


def match_steps(extracted: list[dict], truth: list[dict]) -> list[int | None]:
    """For each true step, the index of its extracted step (greedy by IoU), or None."""
    pairs = sorted(((iou((e["start"], e["end"]), (t["start"], t["end"])), i, j)
                    for i, e in enumerate(extracted) for j, t in enumerate(truth)), reverse=True)
    found: list[int | None] = [None] * len(truth)
    used: set[int] = set()
    for score, i, j in pairs:
        if score >= IOU_MATCH and i not in used and found[j] is None:
            found[j] = i
            used.add(i)
    return found


def in_segment(aligned: list[dict], truth: list[dict], matches: list[int | None]) -> float:
    hits = [m is not None and aligned[m].get("frame") is not None
            and t["shown"][0] <= aligned[m]["frame"]["time"] <= t["shown"][1]
            for t, m in zip(truth, matches)]
    return sum(hits) / len(hits)


def run(sample_dir: Path, llm: str, seeds: int) -> list[dict]:
    from vi.pipelines.showhowto import align_frames, extract_steps, filter_instructional
    from vi.pipelines.common import probe, transcribe

    asr = transcribe.TranscribeConfig()
    filt = filter_instructional.FilterConfig(llm=llm)
    extract = extract_steps.ExtractConfig(llm=llm)
    rows = []
    for name in HOWTO_SAMPLES:
        video = make_howto_sample(sample_dir, name).resolve()
        truth = json.loads((sample_dir / f"{name}.json").read_text())["steps"]
        record = {"id": name, "video": str(video)}
        record |= probe.probe_record(record)
        record |= transcribe.transcribe_record(record, asr)
        record |= filter_instructional.classify(record, filt)
        record |= extract_steps.extract(record, extract)
        items = record["steps"]["items"]
        matches = match_steps(items, truth)
        found = sum(m is not None for m in matches)
        labels = align_frames.align_record(record, align_frames.AlignConfig(model="imagenet-labels"))
        offline = in_segment(labels["steps"]["items"], truth, matches)
        randoms = []
        for seed in range(seeds):
            config = align_frames.AlignConfig(model="random", seed=seed)
            randoms.append(in_segment(align_frames.align_record(record, config)["steps"]["items"],
                                      truth, matches))
        rows.append({"sample": name, "instructional": record["instructional"]["label"],
                     "true_steps": len(truth), "extracted": len(items), "found": found,
                     "recall": found / len(truth), "precision": found / max(1, len(items)),
                     "frames_in_segment_offline": offline,
                     "frames_in_segment_random": sum(randoms) / len(randoms)})
    return rows


def table(rows: list[dict]) -> Table:
    out = Table(title="ShowHowTo pipeline on narrated clips with known steps")
    for header in ("sample", "kept", "true/extracted", "recall", "precision",
                   "in segment: labels", "random"):
        out.add_column(header, justify="left" if header == "sample" else "right")
    for r in rows + [total(rows)]:
        out.add_row(r["sample"], str(r["instructional"]), f"{r['true_steps']}/{r['extracted']}",
                    f"{r['recall']:.2f}", f"{r['precision']:.2f}",
                    f"{r['frames_in_segment_offline']:.2f}", f"{r['frames_in_segment_random']:.2f}")
    return out


def total(rows: list[dict]) -> dict:
    n_true = sum(r["true_steps"] for r in rows)
    weight = [r["true_steps"] / n_true for r in rows]
    return {"sample": "all", "instructional": all(r["instructional"] for r in rows),
            "true_steps": n_true, "extracted": sum(r["extracted"] for r in rows),
            "recall": sum(r["found"] for r in rows) / n_true,
            "precision": sum(r["found"] for r in rows) / max(1, sum(r["extracted"] for r in rows)),
            "frames_in_segment_offline": sum(w * r["frames_in_segment_offline"] for w, r in zip(weight, rows)),
            "frames_in_segment_random": sum(w * r["frames_in_segment_random"] for w, r in zip(weight, rows))}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vi.evaluation.showhowto.quality",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("sample_dir", type=Path, nargs="?", default=Path("out/sample"))
    parser.add_argument("--llm", default=DEFAULT_LLM)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args(argv)
    rows = run(args.sample_dir, args.llm, args.seeds)
    Console().print(table(rows))
    print(json.dumps({"rows": rows, "all": total(rows)}))


if __name__ == "__main__":
    main()
