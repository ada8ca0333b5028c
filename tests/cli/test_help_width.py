"""--help at 80 columns keeps what a user copies whole: rich cuts a word longer than the help column."""

from __future__ import annotations

import pytest

from conftest import run_vi


@pytest.mark.parametrize("stage", ["extract-steps", "filter-instructional"])
def test_the_llm_server_example_is_whole_at_80_columns(stage):
    shown = run_vi(stage, "--help", env={"COLUMNS": "80", "TERM": "dumb"})
    assert shown.returncode == 0
    assert "openai:NAME@http://host:8000/v1" in shown.stdout
    assert not [line for line in shown.stdout.splitlines() if "openai:" in line and "…" in line]
