"""`vi transcribe` refuses what cannot work before the first record, and never loads a model
to find out: a bad option is one usage error (exit 2), a missing or wrong aligner one setup
error (exit 5), not one error record per input record."""

import json
import time

import pytest

from conftest import jsonl, run_vi
from vi.core import devices
from vi.core.errors import SetupError
from vi.core.models import cache as model_cache
from vi.pipelines.common import transcribe


@pytest.fixture(scope="module")
def three_records(tea) -> str:
    return "".join(json.dumps({"id": f"tea-{i}", "video": str(tea)}) + "\n" for i in range(3))


def run_quickly(*args: str, stdin: str, env: dict | None = None):
    start = time.perf_counter()
    done = run_vi("transcribe", "-q", *args, stdin=stdin, env=env, timeout=120)
    done.stderr = " ".join(done.stderr.split())  # undo the console's line wrapping
    return done, time.perf_counter() - start


def test_a_gpu_that_is_not_there_stops_before_any_record(three_records, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "out.jsonl"
    done, seconds = run_quickly("--device", "cuda", "-o", str(out), stdin=three_records)
    assert done.returncode == 2, done.stderr
    assert "--device cuda" in done.stderr and "no cuda device" in done.stderr
    assert done.stdout == "" and (not out.exists() or out.read_text() == "")
    assert seconds < 30  # no model was loaded to find out


@pytest.mark.parametrize("option,value,named", [
    ("--dtype", "fp8", "--dtype"), ("--language", "xx", "--language"),
    ("--beam-size", "0", "--beam-size"), ("--backend", "whisper.cpp", "--backend")])
def test_a_bad_option_is_a_usage_error_with_no_records(three_records, option, value, named):
    done, seconds = run_quickly(option, value, stdin=three_records)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and value in done.stderr
    assert jsonl(done.stdout) == [] and seconds < 30


def test_an_align_model_of_another_role_is_refused_up_front(three_records):
    done, seconds = run_quickly("--align-model", "whisper-tiny.en", stdin=three_records)
    assert done.returncode == 5, done.stderr
    assert "whisper-tiny.en" in done.stderr and "alignment" in done.stderr
    assert jsonl(done.stdout) == [] and seconds < 30


def test_an_aligner_that_does_not_load_is_one_setup_error(tmp_path, monkeypatch):
    """A folder that is not a wav2vec2 model resolves (it exists) but cannot load."""
    monkeypatch.setenv("VI_CACHE_DIR", str(tmp_path / "cache"))  # vi's minimal punkt goes here
    folder = tmp_path / "not-an-aligner"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    config = transcribe.TranscribeConfig(align_model=str(folder), device="cpu")
    with pytest.raises(SetupError, match="could not load alignment model .*not-an-aligner"):
        transcribe._load_aligner(config, "en")


def test_a_record_without_audio_does_not_load_the_asr_model(broken_media):
    config = transcribe.TranscribeConfig(device="cpu", dtype="float32", seed=7)
    out = transcribe.transcribe_record({"id": "x", "video": str(broken_media["no_audio"])},
                                       config)["transcript"]
    assert out == {"language": None, "segments": [], "backend": "whisperx",
                   "model": "whisper-tiny.en", "word_timing": None, "note": "no audio track"}
    assert ("transcriber", config) not in model_cache.load_counts


def test_the_config_resolves_its_placement_once_and_never_to_mps(pretend_mps):
    """CTranslate2, the decoder of both backends, has no mps backend."""
    assert devices.resolve_placement("auto", engine="ctranslate2").device == "cpu"
    assert transcribe.TranscribeConfig().placement == devices.Placement("cpu", "int8")
    with pytest.raises(ValueError, match="--device mps"):
        transcribe.TranscribeConfig(device="mps")


def test_untimed_words_fall_back_to_the_segment_start_not_zero():
    raw = [{"word": "1990", "start": None, "end": None},
           {"word": "was", "start": 5.2, "end": 5.4, "score": 0.9},
           {"word": "42", "start": None, "end": None}]
    words = transcribe._words(raw, fallback=5.0)
    assert [(w["start"], w["end"]) for w in words] == [(5.0, 5.0), (5.2, 5.4), (5.4, 5.4)]


def test_a_segment_of_numerals_keeps_its_own_times():
    """whisperx's aligner times no character of "1 2 3": the segment stays where it was."""
    numerals = {"start": 12.5, "end": 14.0, "text": " 1 2 3",
                "words": [{"word": w} for w in ("1", "2", "3")]}
    segment = transcribe._aligned_segment(numerals)
    assert (segment["start"], segment["end"]) == (12.5, 14.0)
    assert all((w["start"], w["end"]) == (12.5, 12.5) for w in segment["words"])
    mixed = {"start": 10.0, "end": 13.0, "text": "at 9 sharp",
             "words": [{"word": "at", "start": 10.4, "end": 10.6, "score": 0.8}, {"word": "9"},
                       {"word": "sharp", "start": 11.0, "end": 11.5, "score": 0.7}]}
    segment = transcribe._aligned_segment(mixed)
    assert (segment["start"], segment["end"]) == (10.4, 11.5)  # from the timed words only
    assert [w["start"] for w in segment["words"]] == [10.4, 10.6, 11.0]


def test_rms_matches_the_float64_definition():
    import numpy as np

    audio = np.random.default_rng(0).uniform(-0.5, 0.5, 160_000).astype(np.float32)
    expected = float(np.sqrt(np.mean(audio.astype(np.float64) ** 2)))
    assert transcribe.rms(audio) == pytest.approx(expected, rel=1e-5)
    assert transcribe.rms(np.zeros(0, np.float32)) == 0.0


def test_records_that_need_no_model_do_not_pay_for_torch(broken_media):
    # The driver's memory (make bench) is measured on such records: start-up must stay light.
    import subprocess
    import sys

    code = ("import sys; from vi.pipelines.common import transcribe as t; "
            "c = t.TranscribeConfig(); "
            f"t.transcribe_record({{'id': 'x', 'video': {str(broken_media['no_audio'])!r}}}, c); "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
