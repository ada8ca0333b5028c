"""A StepDiff benchmark of the sample clips, in the official formats, to run the baselines end
to end (`make stepdiff-baselines`): `vi predict` writes predictions and `vi eval` scores them.

The clips are the keysteps of fruit_salad and fruit_salad_peeler (`samples.STEPDIFF_KEYSTEPS`),
with the ids `vi clips` gives them, so `vi describe`'s records from `make stepdiff-demo`
describe them. The differences are known, because the samples were made to have them (the
scripts in `samples`): fruit_salad is the reference, fruit_salad_peeler the candidate.
Fourteen rows are a check that the whole path works and that the numbers are not those of chance
on a case this plain; it is no measure of a method.

    python -m vi.evaluation.stepdiff.sample_benchmark OUT/sample OUTDIR   # OUTDIR/diff{cap,mcq,rank}.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vi.evaluation.demo.samples import STEPDIFF_ANNOTATION
from vi.pipelines.stepdiff.clips import clip_id

REFERENCE, CANDIDATE = "fruit_salad", "fruit_salad_peeler"
CUT, PEEL, SQUEEZE = "cut the fruit", "peel the fruit", "squeeze juice over the fruit"
# (keystep, category, "<candidate> instead of <reference>"), as the annotators wrote them.
DIFFERENCES = (
    (CUT, "Ingredients", "The person slices an orange instead of an apple."),
    (CUT, "Technique", "The person cuts the fruit into thin rounds instead of cubes."),
    (PEEL, "Ingredients", "The person peels a green apple instead of an orange."),
    (PEEL, "Tools/Equipment", "The person peels with a vegetable peeler instead of by hand."),
    (SQUEEZE, "Ingredients", "The person squeezes an orange instead of a lemon."),
    (SQUEEZE, "Tools/Equipment", "The person squeezes the fruit with a juicer instead of by hand."),
)


def sample_clips(sample_dir: Path) -> dict[tuple[str, str], str]:
    """{(video, keystep): clip id} from the keystep annotation `make sample` writes."""
    clips = {}
    for line in (sample_dir / STEPDIFF_ANNOTATION).read_text().splitlines():
        record = json.loads(line)
        for item in record["steps"]["items"]:
            clips[(record["id"], item["text"])] = clip_id(record["id"], item["start"], item["end"])
    return clips


def benchmark(sample_dir: Path) -> dict[str, list[dict]]:
    clips = sample_clips(sample_dir)
    pair = {k: [clips[(REFERENCE, k)], clips[(CANDIDATE, k)]] for k in (CUT, PEEL, SQUEEZE)}
    diffcap = [{"reference": pair[k][0], "candidate": pair[k][1], "category": category, "text": [text]}
               for k, category, text in DIFFERENCES]
    # Options: the three keystep pairs, and the answer's pair the other way round (whose
    # "instead of" is backwards); the answer's place moves from row to row.
    diffmcq = []
    for row, (k, category, text) in enumerate(DIFFERENCES):
        options = [pair[CUT], pair[PEEL], pair[SQUEEZE], pair[k][::-1]]
        options.insert(row % 4, options.pop(options.index(pair[k])))
        diffmcq.append({"difference": text, "category": category, "options": options, "answer": pair[k]})
    # Ranked against the orange peeled by hand: by fruit (Ingredients) and by what is done (Actions).
    reference = clips[(REFERENCE, PEEL)]
    targets = [clips[(CANDIDATE, PEEL)], clips[(CANDIDATE, CUT)], clips[(CANDIDATE, SQUEEZE)], clips[(REFERENCE, CUT)]]
    diffrank = [  # apple peeled, orange sliced, orange squeezed, apple cubed
        {"reference": reference, "targets": targets, "category": "Ingredients", "scores": [1, 5, 4, 0]},
        {"reference": reference, "targets": targets, "category": "Actions", "scores": [5, 2, 1, 0]},
    ]
    return {"diffcap": diffcap, "diffmcq": diffmcq, "diffrank": diffrank}


def main(sample_dir: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for task, rows in benchmark(sample_dir).items():
        path = out_dir / f"{task}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"{path}: {len(rows)} rows")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m vi.evaluation.stepdiff.sample_benchmark SAMPLE_DIR OUT_DIR")
    main(Path(sys.argv[1]), Path(sys.argv[2]))
