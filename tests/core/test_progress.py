"""Progress in a batch log: when stderr is no terminal (Slurm, a pipe), a line every N seconds."""

from __future__ import annotations

import json
import re

from conftest import run_vi
from vi.core.progress import LogProgress


def test_a_log_line_every_n_seconds_with_count_rate_and_eta(capsys):
    now = [0.0]
    progress = LogProgress(every=10, clock=lambda: now[0])
    with progress:
        task = progress.add_task("extract-steps", total=100)
        for _ in range(40):
            now[0] += 1
            progress.advance(task)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["vi extract-steps: 10/100 records, 1.00 rec/s, 0m10s elapsed, eta 1m30s",
                     "vi extract-steps: 20/100 records, 1.00 rec/s, 0m20s elapsed, eta 1m20s",
                     "vi extract-steps: 30/100 records, 1.00 rec/s, 0m30s elapsed, eta 1m10s",
                     "vi extract-steps: 40/100 records, 1.00 rec/s, 0m40s elapsed, eta 1m00s"]


def test_a_stage_whose_stderr_is_a_file_logs_progress_lines_and_quiet_silences_them(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": f"v{i}", "video": str(tmp_path / "none.mp4")}) + "\n"
                              for i in range(5)))
    loud = run_vi("probe", "-i", str(source), env={"VI_PROGRESS_SECONDS": "0"})
    lines = [line for line in loud.stderr.splitlines() if re.match(r"vi probe: \d+/5 records, ", line)]
    assert len(lines) == 5 and lines[-1].startswith("vi probe: 5/5 records")
    quiet = run_vi("probe", "-q", "-i", str(source), env={"VI_PROGRESS_SECONDS": "0"})
    assert "records, " not in quiet.stderr
