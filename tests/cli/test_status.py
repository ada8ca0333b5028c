"""vi status: done, failed by kind and left, per shard and in total, read while the run still writes."""

from __future__ import annotations

import json

from conftest import run_vi
from vi.core.sharding import shard_of


def test_status_of_a_sharded_run_per_shard_and_in_total_while_it_still_writes(tmp_path):
    from vi.core.sink import FileSink

    ids = [f"v{i}" for i in range(12)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "video": str(tmp_path / f"{i}.mp4")}) + "\n" for i in ids))
    outs = [tmp_path / f"out.{s}.jsonl" for s in range(3)]
    done_ids = {i for i in ids if shard_of(i, 3) != 2}  # shard 2 has not started
    for s in (0, 1):
        mine = [i for i in ids if shard_of(i, 3) == s]
        lines = [{"id": i, "x": 1} if k else {"id": i, "errors": [{"stage": "s", "kind": "llm_unavailable",
                                                                   "message": "m"}]}
                 for k, i in enumerate(mine)]
        outs[s].write_text("".join(json.dumps(r) + "\n" for r in lines))
    outs[1].write_bytes(outs[1].read_bytes() + b'{"id": "half-writ')  # a record being written now
    before = [p.read_bytes() for p in outs[:2]]
    holder = FileSink(outs[0], resume=True, overwrite=False)  # a shard's run holds its output's lock
    try:
        got = run_vi("status", str(tmp_path / "out.*.jsonl"), "--input", str(source), "--shards", "3", "--json")
    finally:
        holder.close()
    assert got.returncode == 0, got.stderr
    found = json.loads(got.stdout)
    assert [p.read_bytes() for p in outs[:2]] == before  # read only: the partial line is still there
    rows = {row["shard"]: row for row in found["files"]}
    assert set(rows) == {0, 1}
    for s in (0, 1):
        mine = sum(shard_of(i, 3) == s for i in ids)
        assert (rows[s]["done"], rows[s]["failed"], rows[s]["left"]) == (mine - 1, 1, 0)
        assert rows[s]["failed_by_kind"] == {"llm_unavailable": 1}
    assert rows[1]["partial"] == 1 and rows[0]["partial"] == 0
    total = found["total"]
    assert total["input"] == 12 and total["done"] + total["failed"] == len(done_ids)
    assert total["left"] == 12 - len(done_ids) and total["not_started"] == {"2/3": 12 - len(done_ids)}
    table = run_vi("status", str(outs[0]), str(outs[1]), env={"COLUMNS": "150"})
    assert table.returncode == 0 and "llm_unavailable 2" in table.stdout and "total" in table.stdout


def test_status_says_what_is_wrong_with_its_arguments(tmp_path):
    missing = run_vi("status", str(tmp_path / "nothing.*.jsonl"))
    assert missing.returncode == 2 and "matches no file" in missing.stderr
    folder = run_vi("status", str(tmp_path))
    assert folder.returncode == 2 and "is a folder" in folder.stderr
