"""`--shard I/N`: a stable partition of records by a hash of their id.

The hash is SHA-1 of the id (not Python's salted `hash`), so every process, machine and
Python version puts a record in the same shard, and the N shards of one input are disjoint
and cover it exactly.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        try:
            left, right = text.split("/")
            index, count = int(left), int(right)
        except ValueError:
            raise ValueError(f"--shard must look like I/N (e.g. 0/8), got {text!r}") from None
        if count < 1 or not 0 <= index < count:
            raise ValueError(f"--shard {text}: need N >= 1 and 0 <= I < N")
        return cls(index, count)

    @classmethod
    def from_slurm(cls, env: dict[str, str] | None = None) -> Shard | None:
        """The shard of this Slurm array task, or None outside an array job.

        Array indices need not start at 0 (`--array=1-8`) nor be consecutive
        (`--array=0-30:2`), so the task's position is (ID - MIN) / STEP among COUNT tasks.
        """
        env = os.environ if env is None else env
        if "SLURM_ARRAY_TASK_ID" not in env or "SLURM_ARRAY_TASK_COUNT" not in env:
            return None
        offset = int(env["SLURM_ARRAY_TASK_ID"]) - int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
        step = int(env.get("SLURM_ARRAY_TASK_STEP", "1")) or 1
        count = int(env["SLURM_ARRAY_TASK_COUNT"])
        task, remainder = divmod(offset, step)
        if remainder or not 0 <= task < count:
            raise ValueError(
                f"Slurm array task {env['SLURM_ARRAY_TASK_ID']} (min "
                f"{env.get('SLURM_ARRAY_TASK_MIN', '0')}, step {step}) is not one of {count} "
                "evenly spaced tasks; pass --shard I/N explicitly")
        return cls(task, count)

    def contains(self, record_id: object) -> bool:
        return shard_of(record_id, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(record_id: object, count: int) -> int:
    text = str(record_id)
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate outside surrogateescape's range (\ud800)
        data = text.encode("utf-8", "surrogatepass")
    digest = hashlib.sha1(data).digest()
    return int.from_bytes(digest[:8], "big") % count
