"""The training scaffold every trainer shares (vi.core.training): the run folder (claimed, resumed,
overwritten; checkpoints put in place whole, the newest kept), the one log format, and the step loop,
on a linear regression a CPU trains in a moment: a killed and resumed run continues the same loss curve."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from vi.core import config as options
from vi.core.training import (RunConfig, RunLog, TrainingLoop, checkpoint_step, claim_run, latest_checkpoint,
                              publish_checkpoint, run_option)


@dataclass(kw_only=True)
class TinyConfig(RunConfig):
    steps: int = options.option(12, help="Optimizer steps.")
    batch_size: int = options.option(4, help="Samples per step.")
    eval_every: int = options.with_default(RunConfig, "eval_every", 4)
    seed: int = run_option("seed", help="Seed of the tiny task.")


class TinyLoop(TrainingLoop):
    """y = 3x - 1 from batches drawn from (seed, step): what makes a resumed run continue the same curve."""

    name = "train tiny"

    def __init__(self, config: TinyConfig, accelerator):
        import torch

        super().__init__(config, accelerator)
        torch.manual_seed(config.seed)
        self.model = torch.nn.Linear(1, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.5)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: 1.0)

    @property
    def trained(self):
        return self.model

    @property
    def samples_per_step(self) -> int:
        return self.config.batch_size

    def _batch(self, *key):
        import torch

        from vi.core.seeding import record_seed

        x = torch.rand(self.config.batch_size, 1, generator=torch.Generator().manual_seed(record_seed(0, key)))
        return x, 3 * x - 1

    def train_step(self) -> float:
        x, y = self._batch(self.config.seed, self.step)
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        self.step += 1
        return float(loss.detach())

    def held_out(self):
        x, y = self._batch("val")
        return float(((self.model(x) - y) ** 2).mean()), {"samples": len(x)}

    def save_model(self, folder: Path) -> None:
        import torch

        torch.save(self.model.state_dict(), folder / "model.pt")

    def load_model(self, checkpoint: Path, state: dict) -> None:
        import torch

        self.model.load_state_dict(torch.load(checkpoint / "model.pt"))


def _train(config: TinyConfig) -> dict:
    from vi.core.training import make_accelerator

    accelerator = make_accelerator("cpu", "no")
    config.check()
    checkpoint = claim_run(config, True)
    loop = TinyLoop(config, accelerator)
    if checkpoint is not None:
        loop.restore(checkpoint)
    return loop.run()


def _rows(run: Path, split: str) -> list[dict]:
    return [r for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if r["split"] == split]


def test_the_config_declares_each_run_option_once_with_a_trainers_own_defaults_and_help():
    fields = {f.name: f for f in options.cli_fields(TinyConfig)}
    assert options.defaults(TinyConfig)["eval_every"] == 4 and options.defaults(RunConfig)["eval_every"] == 100
    assert fields["eval_every"].metadata["help"] == "Held-out evaluation every N steps."
    assert fields["seed"].metadata["help"] == "Seed of the tiny task." and fields["seed"].metadata["panel"] == "Run"
    assert fields["output"].default is options.MISSING and fields["output"].metadata["short"] == "-o"
    with pytest.raises(ValueError, match="give one"):
        TinyConfig(output=Path("x"), resume=True, overwrite=True).check()


def test_the_loop_logs_one_format_and_a_resumed_run_continues_the_same_curve(tmp_path):
    whole = tmp_path / "whole"
    result = _train(TinyConfig(output=whole, save_every=6, log_every=5, quiet=True))
    assert result["step"] == 12 and result["checkpoint"].endswith("step-0000012")
    train, val = _rows(whole, "train"), _rows(whole, "val")
    assert [r["step"] for r in train] == [5, 10, 12] and [r["step"] for r in val] == [0, 4, 8, 12]
    assert set(train[0]) == {"split", "step", "loss", "lr", "samples_per_s"} and val[0]["samples"] == 4
    assert val[-1]["loss"] < 0.5 * val[0]["loss"]
    state = json.loads((whole / "checkpoints" / "step-0000006" / "trainer_state.json").read_text())
    assert state["step"] == 6 and state["config"]["output"] == str(whole)

    cut = tmp_path / "cut"  # killed after the checkpoint of step 6: its log runs on past it
    shutil.copytree(whole, cut)
    shutil.rmtree(cut / "checkpoints" / "step-0000012")
    with pytest.raises(ValueError, match="holds an earlier run: give --resume .* or --overwrite"):
        _train(TinyConfig(output=cut, save_every=6, log_every=5, quiet=True))
    _train(TinyConfig(output=cut, save_every=6, log_every=5, quiet=True, resume=True))
    for split in ("train", "val"):
        original, resumed = _rows(whole, split), _rows(cut, split)
        assert [r["step"] for r in resumed] == [r["step"] for r in original]  # the old lines after 6 dropped
        for a, b in zip(original, resumed):
            assert b["loss"] == pytest.approx(a["loss"], abs=1e-6), (split, a, b)

    _train(TinyConfig(output=cut, steps=4, quiet=True, overwrite=True))  # replaced: a new run's folder
    assert [r["step"] for r in _rows(cut, "val")] == [0, 4]
    assert [p.name for p in (cut / "checkpoints").iterdir()] == ["step-0000004"]


def test_resume_without_a_checkpoint_starts_again_with_a_fresh_log(tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    RunLog(run / "log.jsonl").write("val", 0, 1.0)
    _train(TinyConfig(output=run, steps=2, eval_every=2, quiet=True, resume=True))
    assert [r["step"] for r in _rows(run, "val")] == [0, 2]


def test_checkpoints_are_found_complete_newest_by_step_and_the_newest_kept(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (9, 10, 100):
        (root / f"checkpoint-{step}").mkdir(parents=True)
        (root / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (root / "checkpoint-200").mkdir()  # half written: no state yet
    assert latest_checkpoint(tmp_path, prefix="checkpoint-").name == "checkpoint-100"  # not by name: 9 > 100
    assert checkpoint_step(root / "step-0000020") == 20
    for step in (1, 2, 3):
        partial = root / f".step-{step:07d}.partial"
        partial.mkdir()
        publish_checkpoint(partial, root / f"step-{step:07d}", keep=2)
    assert sorted(p.name for p in root.glob("step-*")) == ["step-0000002", "step-0000003"]
    assert not list(root.glob(".*partial"))


def test_the_log_writes_one_format_and_is_cut_back_to_a_step(tmp_path):
    log = RunLog(tmp_path / "log.jsonl")
    log.write("train", 1, 0.1234567891, lr=1.23456789e-7)
    log.write("val", 2, None, samples=3)
    assert [json.loads(line) for line in log.path.read_text().splitlines()] == [
        {"split": "train", "step": 1, "loss": 0.123457, "lr": 1.23457e-7}, {"split": "val", "step": 2, "samples": 3}]
    log.trim(1)
    assert len(log.path.read_text().splitlines()) == 1
    RunLog(tmp_path / "log.jsonl", main=False).clear()  # only the main process changes the folder
    assert log.path.is_file()
