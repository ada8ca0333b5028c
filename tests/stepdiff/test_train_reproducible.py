"""Issue 17: the same data and seed train the same model wherever the data sits.

Each dataset's shuffle used to be seeded with `KIND:PATH` as typed, so a copy of the data in
another folder (or `./train.jsonl` for `train.jsonl`) gave another sample order and another model.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import run_vi
from stepdiff_fixtures import TINY_PROJECTOR, make_colour_task
from vi.pipelines.stepdiff.train_data import Dataset, Mixture, Sample

SHORT = ("--steps", "8", "--batch-size", "4", "--lr", "2e-3", "--warmup-steps", "2", "--eval-every", "4",
         "--save-every", "8", "--log-every", "2", "--device", "cpu", "--seed", "3", "-q", *TINY_PROJECTOR)


def _samples(count: int) -> list[Sample]:
    return [Sample(f"s{i}", "pair_qa", (f"r{i}", f"c{i}"), ("q", "a")) for i in range(count)]


def test_the_sample_order_depends_on_the_seed_and_the_data_not_on_the_path():
    here = Mixture([Dataset("pair_qa:/data/run1/qa.jsonl", "pair_qa", _samples(20))], seed=7)
    there = Mixture([Dataset("pair_qa:./qa.jsonl", "pair_qa", _samples(20))], seed=7)
    order = [s.id for s in here.take(60)]
    assert order == [s.id for s in there.take(60)]
    other_seed = Mixture([Dataset("pair_qa:./qa.jsonl", "pair_qa", _samples(20))], seed=8)
    assert order != [s.id for s in other_seed.take(60)]


def test_a_checkpoint_resumes_from_moved_data_but_not_from_other_or_reordered_data():
    mixture = Mixture([Dataset("pair_qa:/scratch/job1/qa.jsonl", "pair_qa", _samples(5)),
                       Dataset("caption:/scratch/job1/clips.jsonl", "caption", _samples(3))], seed=0)
    mixture.take(7)
    state = json.loads(json.dumps(mixture.state()))
    moved = Mixture([Dataset("pair_qa:/scratch/job2/qa.jsonl", "pair_qa", _samples(5)),
                     Dataset("caption:clips.jsonl", "caption", _samples(3))], seed=0)
    moved.load_state(state)  # a requeued job sees its data under another path: accepted
    assert [s.id for s in moved.take(9)] == [s.id for s in mixture.take(9)]
    with pytest.raises(ValueError, match="samples of pair_qa:qa.jsonl changed"):
        Mixture([Dataset("pair_qa:qa.jsonl", "pair_qa", _samples(6)),
                 Dataset("caption:clips.jsonl", "caption", _samples(3))]).load_state(state)
    with pytest.raises(ValueError, match="same --data in the same order"):
        Mixture([Dataset("caption:clips.jsonl", "caption", _samples(3)),
                 Dataset("pair_qa:qa.jsonl", "pair_qa", _samples(5))]).load_state(state)


def _train(run, folder, spelling, cwd):
    data = {"train": folder / "train.jsonl", "val": folder / "val.jsonl", "store": folder / "store"}
    if spelling == "relative":
        data = {k: v.relative_to(cwd) for k, v in data.items()}
    done = run_vi("train", "stepdiff", "-o", str(run), "--data", f"pair_qa:{data['train']}",
                  "--val", f"pair_qa:{data['val']}", "--features", str(data["store"]), *SHORT, cwd=cwd)
    assert done.returncode == 0, done.stderr
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    for entry in log:
        entry.pop("samples_per_s", None)  # wall-clock speed: the only thing allowed to differ
    return log, run / "checkpoints" / "step-0000008"


@pytest.mark.slow
def test_two_copies_of_the_data_at_different_paths_and_spellings_train_bit_identical_models(tmp_path):
    first = tmp_path / "experiments" / "a"
    make_colour_task(first, copies=2)
    second = tmp_path / "scratch" / "job-1234" / "copy"
    shutil.copytree(first, second)
    log_a, ckpt_a = _train(tmp_path / "run_a", first, "absolute", tmp_path)
    log_b, ckpt_b = _train(tmp_path / "run_b", second, "relative", tmp_path / "scratch")
    assert [e["loss"] for e in log_a if e["split"] == "val"] == [e["loss"] for e in log_b if e["split"] == "val"]
    assert log_a == log_b  # every train and val line, bit for bit
    assert (ckpt_a / "projector.safetensors").read_bytes() == (ckpt_b / "projector.safetensors").read_bytes()
    opt_a, opt_b = (torch.load(c / "optimizer.pt", map_location="cpu") for c in (ckpt_a, ckpt_b))
    for key, value in opt_a["state"].items():
        for name, tensor in value.items():
            assert torch.equal(tensor, opt_b["state"][key][name]), (key, name)
