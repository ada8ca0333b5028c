"""The bench's helpers (timing, ratios, peak memory, the table) and the transcript viewer."""

import io
import json
import sys
import types

import pytest
from rich.console import Console

from vi.evaluation.bench import run as bench, tools as benchtools
from vi.evaluation.demo import show_transcript
from vi.evaluation.bench.tools import Row, Sample


def render(renderable, width=200) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def test_median_and_ratio():
    assert benchtools.median([3.0, 1.0, 2.0]) == 2.0
    assert benchtools.median([1.0, 4.0]) == 2.5
    assert benchtools.ratio(3.0, 2.0) == 1.5
    assert benchtools.ratio(1.0, 0.0) is None  # nothing to compare with: no ratio, no crash
    assert benchtools.ratio(None, 2.0) is None


def test_alternate_reverses_the_order_every_round_and_keeps_samples_per_side():
    calls = []
    samples = benchtools.alternate({"vi": lambda: calls.append("vi"),
                               "raw": lambda: calls.append("raw")}, repeats=3)
    assert calls == ["vi", "raw", "raw", "vi", "vi", "raw"]
    assert [len(samples["vi"]), len(samples["raw"])] == [3, 3]
    assert all(isinstance(s, Sample) and s.wall >= 0 for s in samples["vi"])


def test_measure_times_the_call_and_counts_cpu_spent():
    def spin():
        total = 0
        for i in range(2_000_000):
            total += i
        return total

    sample, result = benchtools.measure(spin)
    assert result == sum(range(2_000_000))
    assert sample.wall > 0.01 and sample.cpu > 0.01


def test_time_spent_in_times_each_call_and_restores_the_original():
    module = types.ModuleType("fake")
    module.work = lambda x: x * 2
    original = module.work
    spent = []
    with benchtools.time_spent_in(module, "work", spent):
        assert module.work(4) == 8 and module.work(1) == 2
    assert len(spent) == 2 and all(s >= 0 for s in spent)
    assert module.work is original

    class Model:
        def align(self):
            return "aligned"

    model, spent = Model(), []
    with benchtools.time_spent_in(model, "align", spent):
        assert model.align() == "aligned"
    assert len(spent) == 1
    assert "align" not in vars(model)  # the inherited method shows through again


def test_row_ratio_and_verdict_against_the_target():
    assert Row("x", 1.05, 1.0, "s", target=1.10).verdict == "ok"
    over = Row("x", 1.5, 1.0, "s", target=1.10)
    assert over.ratio == pytest.approx(1.5) and over.verdict == "over"
    assert Row("x", 1.5, 1.0, "s").verdict == ""  # no target: informative only
    assert over.as_dict()["ratio"] == pytest.approx(1.5)


def test_table_shows_values_ratios_and_verdicts():
    text = render(benchtools.build_table([
        Row("transcribe, in process", 12.0, 10.0, "s", 1.10, "median of 3"),
        Row("probe, per file", 70.25, 71.0, "ms", 1.10),
        Row("peak RSS", 60.0, 59.9, "MiB"),
    ]))
    assert "transcribe, in process" in text and "12.00 s" in text and "10.00 s" in text
    assert "1.20x" in text and "over" in text and "median of 3" in text
    assert "70.2 ms" in text and "0.99x" in text and "ok" in text
    assert "60 MiB" in text and "<= 1.10" in text


def test_peak_rss_sees_a_child_that_allocates_50_mb():
    small = benchtools.peak_rss_kib([sys.executable, "-c", "pass"])
    large = benchtools.peak_rss_kib([sys.executable, "-c", "x = bytearray(50_000_000)"])
    assert small > 1_000  # an interpreter is at least a few MB
    assert large - small > 40_000  # KiB: the 48 MiB buffer shows


def test_peak_rss_reports_a_failing_command():
    with pytest.raises(RuntimeError, match="exited 3"):
        benchtools.peak_rss_kib([sys.executable, "-c", "raise SystemExit(3)"])


def test_memory_rows_compare_many_records_with_few():
    rows = bench.memory_rows({"counts": [10, 1000], "peak_rss_kib": {
        "probe": {"10": 51_200, "1000": 102_400},
        "transcribe_no_audio": {"10": 51_200, "1000": 51_712}}})
    assert rows[0].ratio == pytest.approx(2.0) and rows[0].verdict == "over"
    assert rows[1].verdict == "ok" and rows[1].vi == pytest.approx(50.5)


def test_make_links_gives_distinct_names_for_one_file(tmp_path):
    target = tmp_path / "clip.mp4"
    target.write_bytes(b"data")
    links = benchtools.make_links(target, tmp_path / "links", 5)
    assert len({p.name for p in links}) == 5
    assert all(p.is_symlink() and p.read_bytes() == b"data" for p in links)


def test_show_transcript_prints_segments_errors_and_notes_then_the_path(tmp_path):
    records = [
        {"id": "tea", "video": "/v/tea.mp4", "transcript": {"language": "en", "segments": [
            {"start": 0.77, "end": 64.5, "text": "Boil the water.", "words": []}]}},
        {"id": "gone", "video": "/v/gone.mp4",
         "errors": [{"stage": "transcribe", "kind": "missing_media", "message": "no such file"}]},
        {"id": "mute", "video": "/v/mute.mp4",
         "transcript": {"language": None, "segments": [], "note": "no audio track"}},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    console = Console(file=io.StringIO(), width=200, color_system=None)
    assert show_transcript.show(path, console) == 3
    text = console.file.getvalue()
    assert "0:00.77" in text and "1:04.50" in text and "Boil the water." in text
    assert "failed in transcribe (missing_media): no such file" in text
    assert "no audio track" in text
    assert text.rstrip().endswith(str(path.resolve()))


def test_format_time():
    assert show_transcript.format_time(0.0) == "0:00.00"
    assert show_transcript.format_time(125.456) == "2:05.46"
    assert show_transcript.format_time(None) == "-"


def test_busy_note_only_when_the_load_exceeds_the_cpus():
    idle = {"cpus": 2, "load_average": [0.5, 0.5, 0.5]}
    busy = {"cpus": 2, "load_average": [3.2, 2.0, 1.0]}
    assert bench.busy_note(idle, idle) is None
    assert "3.2" in bench.busy_note(idle, busy)
