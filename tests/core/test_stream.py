"""The stage driver: pass-through, error records, counts, --strict, resume, shards."""

import json

import pytest

from vi.core.errors import EXIT_OK, EXIT_RECORDS_FAILED, EXIT_STRICT_STOP, RecordError, SetupError
from vi.core.sharding import Shard
from vi.core.sink import recover
from vi.core.stream import Stage, StreamOptions, run_stage


def double(record):
    if record.get("x") == "boom":
        raise RecordError("bad_value", "field 'x' is 'boom'")
    if record.get("x") == "crash":
        raise ZeroDivisionError("division by zero")
    return {"y": record["x"] * 2}


STAGE = Stage("double", writes=("y",), process=double)


def run(records, tmp_path, **options):
    out = tmp_path / "out.jsonl"
    options.setdefault("overwrite", True)
    report = run_stage(STAGE, records, StreamOptions(output=out, quiet=True, **options))
    return report, [json.loads(line) for line in out.read_text().splitlines()]


def test_fields_pass_through_in_order_and_new_fields_come_last(tmp_path):
    report, out = run([{"id": "a", "z": 1, "x": 3, "m": {"k": [1]}}], tmp_path)
    assert list(out[0]) == ["id", "z", "x", "m", "y"]
    assert out[0] == {"id": "a", "z": 1, "x": 3, "m": {"k": [1]}, "y": 6}
    assert report.exit_code == EXIT_OK


def test_rerunning_a_stage_replaces_its_field_in_place(tmp_path):
    _, out = run([{"id": "a", "y": 0, "x": 2, "w": 1}], tmp_path)
    assert list(out[0]) == ["id", "y", "x", "w"] and out[0]["y"] == 4


def test_failures_become_error_records_and_nothing_is_lost(tmp_path):
    records = [{"id": "a", "x": 1}, {"id": "b", "x": "boom"}, {"id": "c", "x": "crash"},
               {"id": "d", "x": 2}]
    report, out = run(records, tmp_path)
    assert [r["id"] for r in out] == ["a", "b", "c", "d"]
    assert out[1] == {"id": "b", "x": "boom", "errors": [
        {"stage": "double", "kind": "bad_value", "message": "field 'x' is 'boom'"}]}
    assert out[2]["errors"][0]["kind"] == "internal"
    assert "ZeroDivisionError" in out[2]["errors"][0]["message"]
    assert (report.ok, report.failed, report.skipped) == (2, 2, 0)
    assert report.exit_code == EXIT_RECORDS_FAILED


def test_records_with_upstream_errors_pass_untouched(tmp_path):
    upstream = {"id": "u", "x": 5, "errors": [{"stage": "probe", "kind": "k", "message": "m"}]}
    report, out = run([upstream, {"id": "v", "x": 1}], tmp_path)
    assert out[0] == upstream
    assert (report.ok, report.failed, report.skipped) == (1, 0, 1)
    assert report.exit_code == EXIT_OK


def test_strict_stops_at_first_failure(tmp_path):
    records = [{"id": "a", "x": 1}, {"id": "b", "x": "boom"}, {"id": "c", "x": 2}]
    report, out = run(records, tmp_path, strict=True)
    assert [r["id"] for r in out] == ["a", "b"]
    assert report.exit_code == EXIT_STRICT_STOP


def test_setup_errors_are_not_swallowed_into_records(tmp_path):
    def needs_model(record):
        raise SetupError("model 'x' is not installed")

    with pytest.raises(SetupError):
        run_stage(Stage("m", ("y",), process=needs_model), [{"id": "a"}],
                  StreamOptions(output=tmp_path / "o.jsonl", quiet=True))


def test_batched_stage_gets_only_error_free_records(tmp_path):
    seen = []

    def batch(records):
        seen.append([r["id"] for r in records])
        return [{"n": len(records)} if r["id"] != "c" else RecordError("k", "no")
                for r in records]

    stage = Stage("b", ("n",), process_batch=batch, batch_size=3)
    records = [{"id": i} for i in "abcde"]
    records[1]["errors"] = [{"stage": "s", "kind": "k", "message": "m"}]
    report = run_stage(stage, records, StreamOptions(output=tmp_path / "o.jsonl", quiet=True))
    out = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert seen == [["a", "c"], ["d", "e"]]
    assert [r["id"] for r in out] == list("abcde")
    assert out[2]["errors"][0]["kind"] == "k" and out[0]["n"] == 2
    assert (report.ok, report.failed, report.skipped) == (3, 1, 1)


def test_existing_output_is_not_clobbered_without_a_flag(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n')
    with pytest.raises(FileExistsError, match="--resume"):
        run_stage(STAGE, [], StreamOptions(output=out, quiet=True))


def test_resume_skips_done_ids_and_cuts_a_torn_line(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "x": 1, "y": 2}\n{"id": "b", "x": 2, "y"')  # killed mid-write
    records = [{"id": k, "x": v} for k, v in [("a", 1), ("b", 2), ("c", 3)]]
    report = run_stage(STAGE, records, StreamOptions(output=out, resume=True, quiet=True))
    lines = out.read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["a", "b", "c"]
    assert report.resumed == 1 and report.ok == 2


def test_resume_refuses_a_file_with_a_garbled_complete_line(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\nhand-edited garbage\n{"id": "b"}\n')
    with pytest.raises(ValueError, match="line 2 is not a JSON record"):
        recover(out)
    assert out.read_text().count("\n") == 3  # nothing was cut


def test_resume_on_stdout_is_a_usage_error():
    with pytest.raises(ValueError, match="--output"):
        run_stage(STAGE, [], StreamOptions(resume=True, quiet=True))


def test_shards_partition_the_input_exactly(tmp_path):
    records = [{"id": f"video-{i}", "x": i} for i in range(500)]
    seen: list[str] = []
    for index in range(7):
        _, out = run(records, tmp_path, shard=Shard(index, 7))
        assert 40 < len(out) < 105  # roughly balanced
        seen += [r["id"] for r in out]
    assert sorted(seen) == sorted(r["id"] for r in records)


def test_a_stage_cannot_write_fields_it_does_not_own(tmp_path):
    sneaky = Stage("sneaky", writes=("y",), process=lambda r: {"y": 1, "id": "other"})
    report = run_stage(sneaky, [{"id": "a"}], StreamOptions(output=tmp_path / "o.jsonl", quiet=True))
    (out,) = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert out["id"] == "a" and "y" not in out
    assert "does not own: id" in out["errors"][0]["message"] and report.failed == 1


def test_a_batch_stage_returning_too_few_results_fails_its_records(tmp_path):
    short = Stage("short", writes=("y",), process_batch=lambda rs: [{"y": 1}], batch_size=2)
    report = run_stage(short, [{"id": "a"}, {"id": "b"}],
                       StreamOptions(output=tmp_path / "o.jsonl", quiet=True))
    assert report.failed == 2 and report.ok == 0


def test_lines_this_stage_could_not_read_count_as_its_failures(tmp_path):
    import io

    from vi.core.records import iter_records

    lines = b'{"id": "a", "x": 1}\nnot json\n{"x": 2}\n'
    records = list(iter_records(io.BytesIO(lines), stage="double"))
    report, out = run(records, tmp_path)
    assert [r.get("raw") for r in out] == [None, "not json", None]
    assert out[2]["errors"][0]["kind"] == "missing_id"
    assert (report.ok, report.failed, report.skipped) == (1, 2, 0)
    assert report.exit_code == EXIT_RECORDS_FAILED


def test_a_tail_of_nul_bytes_after_a_node_crash_is_cut_like_a_torn_line(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"id": "a"}\n' + b"\0" * 4096 + b"\n" + b"\0" * 100)
    assert recover(out) == {"a"}
    assert out.read_bytes() == b'{"id": "a"}\n'


def test_a_result_json_cannot_hold_fails_only_that_record(tmp_path):
    nan = Stage("nan", writes=("y",), process=lambda r: {"y": float("nan") if r["id"] == "b" else 1})
    report = run_stage(nan, [{"id": "a"}, {"id": "b"}, {"id": "c"}],
                       StreamOptions(output=tmp_path / "o.jsonl", quiet=True))
    out = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["id"] for r in out] == ["a", "b", "c"]
    assert out[1]["errors"][0]["kind"] == "unserialisable" and "y" not in out[1]
    assert (report.ok, report.failed) == (2, 1)


def test_input_and_output_may_not_be_the_same_file(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"id": "a", "x": 1}\n')
    with pytest.raises(ValueError, match="same file"):
        run_stage(STAGE, [], StreamOptions(input=path, output=path, overwrite=True, quiet=True))
    assert path.read_text() == '{"id": "a", "x": 1}\n'


def test_errors_from_an_earlier_run_of_the_same_stage_count_as_skipped(tmp_path):
    earlier = {"id": "a", "errors": [{"stage": "double", "kind": "k", "message": "m"}]}
    report, out = run([earlier, {"id": "b", "x": 1}], tmp_path)
    assert out[0] == earlier and (report.ok, report.failed, report.skipped) == (1, 0, 1)


def test_the_progress_total_is_not_counted_when_no_bar_is_shown(tmp_path):
    def count():
        raise AssertionError("counted the input for a bar nobody sees")

    report = run_stage(STAGE, [{"id": "a", "x": 1}],
                       StreamOptions(output=tmp_path / "o.jsonl", quiet=True), total=count)
    assert report.ok == 1
