"""Reading records: bad lines become error records, ids are checked, output is strict JSON."""

import io
import json
import math

import pytest

from vi.core.records import dumps, iter_records


def parse(text: str):
    return list(iter_records(io.BytesIO(text.encode()), stage="test"))


def test_valid_lines_pass_through_blank_lines_skipped():
    records = parse('{"id": "a", "x": 1}\n\n{"id": "b"}\n')
    assert records == [{"id": "a", "x": 1}, {"id": "b"}]


def test_invalid_json_becomes_error_record_with_raw_line():
    records = parse('{"id": "a"}\nnot json at all\n{"id": "c"}\n')
    assert [r["id"] for r in records][0] == "a" and records[2]["id"] == "c"
    bad = records[1]
    assert bad["raw"] == "not json at all"
    assert bad["errors"][0]["kind"] == "invalid_json"
    assert "line 2" in bad["errors"][0]["message"]


def test_non_object_json_is_an_error_record():
    (bad,) = parse("[1, 2, 3]\n")
    assert bad["errors"][0]["kind"] == "invalid_json" and bad["raw"] == "[1, 2, 3]"


def test_identical_bad_lines_stay_distinct_records():
    a, b = parse("oops\noops\n")
    assert a["id"] != b["id"]


def test_record_without_id_gets_stable_derived_id_and_an_error():
    (first,) = parse('{"video": "x.mp4"}\n')
    (again,) = parse('{"video": "x.mp4"}\n')
    assert first["id"] == again["id"] and first["id"].startswith("no-id-")
    assert first["video"] == "x.mp4"
    assert first["errors"][0]["kind"] == "missing_id"
    assert "id" in first["errors"][0]["message"]


@pytest.mark.parametrize("bad_id", ['""', "null", "[1]", "1.5", "true"])
def test_unusable_ids_are_replaced_and_flagged(bad_id):
    (record,) = parse(f'{{"id": {bad_id}, "k": 1}}\n')
    assert record["id"].startswith("no-id-") and record["k"] == 1
    assert record["errors"][0]["kind"] == "missing_id"
    assert f"got {json.loads(bad_id)!r}" in record["errors"][0]["message"]


def test_nan_in_input_is_an_invalid_line_not_a_crash_later():
    (record,) = parse('{"id": "a", "x": NaN}\n')
    assert record["errors"][0]["kind"] == "invalid_json" and "NaN" in record["errors"][0]["message"]


def test_undecodable_bytes_and_lone_surrogates_survive():
    records = list(iter_records(io.BytesIO(b'\xff\xfe\n{"id": "s", "t": "\\ud800"}\n'), "test"))
    assert records[0]["raw"] == "\\xff\\xfe" and records[0]["errors"][0]["kind"] == "invalid_utf8"
    assert records[0]["raw_base64"] == "//4="  # the exact bytes
    assert json.loads(dumps(records[1])) == {"id": "s", "t": "\ud800"}


def test_dumps_refuses_nan_rather_than_writing_invalid_json():
    with pytest.raises(ValueError):
        dumps({"id": "a", "score": math.nan})
    assert dumps({"id": "é"}) == '{"id": "é"}\n'.encode()
