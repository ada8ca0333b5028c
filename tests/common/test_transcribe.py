"""`vi transcribe` with the embedded whisper tiny.en on narrated audio with known words."""

import json
import re
from pathlib import Path

import pytest

from conftest import jsonl, run_vi, shared

pytestmark = pytest.mark.slow
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def recall(reference: str, hypothesis: str) -> float:
    hyp = tokens(hypothesis)
    ref = tokens(reference)
    return sum(1 for w in ref if w in hyp) / len(ref)


@pytest.fixture(scope="module")
def transcribed(tea, broken_media):
    """One `vi transcribe` run over every input: the model loads once for all the tests."""
    records = [{"id": "tea", "video": str(tea)}]
    records += [{"id": k, "video": str(broken_media[k])}
                for k in ("no_audio", "silent", "missing", "truncated")]
    if LIBRIVOX.exists():
        records += [{"id": p.stem, "audio": str(p)} for p in sorted(LIBRIVOX.glob("*.wav"))]
    stdin = "".join(json.dumps(r) + "\n" for r in records)
    done = run_vi("transcribe", "-q", stdin=stdin)
    return done, {r["id"]: r for r in jsonl(done.stdout)}


def test_sample_words_and_sentence_times_match_what_was_said(transcribed, tea_truth):
    _, out = transcribed
    transcript = out["tea"]["transcript"]
    assert transcript["language"] == "en" and transcript["model"] == "whisper-tiny.en"
    segments = transcript["segments"]
    said = " ".join(s["text"] for s in tea_truth["sentences"])
    heard = " ".join(s["text"] for s in segments)
    assert recall(said, heard) > 0.85
    # sentence-level: one segment per spoken sentence, each inside its sentence's time span
    assert len(segments) == len(tea_truth["sentences"])
    for segment, truth in zip(segments, tea_truth["sentences"]):
        assert abs(segment["start"] - truth["start"]) < 0.5, (segment, truth)
        assert abs(segment["end"] - truth["end"]) < 1.0, (segment, truth)
        assert recall(truth["text"], segment["text"]) > 0.6


def test_words_have_ordered_times_inside_their_segment_and_scores(transcribed):
    _, out = transcribed
    for segment in out["tea"]["transcript"]["segments"]:
        previous_end = segment["start"]
        for word in segment["words"]:
            assert set(word) == {"word", "start", "end", "score"}
            assert segment["start"] <= word["start"] <= word["end"] <= segment["end"]
            assert word["start"] >= previous_end - 1e-6
            assert 0.0 <= word["score"] <= 1.0
            previous_end = word["end"]
        assert segment["text"] == " ".join(w["word"] for w in segment["words"])


def test_real_read_speech_is_recognised(transcribed):
    if not LIBRIVOX.exists():
        pytest.skip("pocketsphinx-testdata is not installed (make install installs it)")
    _, out = transcribed
    references = {}
    for line in (LIBRIVOX / "transcription").read_text().splitlines():
        text, file_id = re.match(r"<s> (.*) </s> \((.*)\)", line).groups()
        references[file_id] = text
    scores = {k: recall(v, " ".join(s["text"] for s in out[k]["transcript"]["segments"]))
              for k, v in references.items()}
    assert sum(scores.values()) / len(scores) > 0.8, scores


def test_no_audio_and_silence_give_empty_transcripts_with_a_note(transcribed):
    _, out = transcribed
    # the same keys as a transcript with speech: nothing to time, so no word_timing
    empty = {"language": None, "segments": [], "backend": "whisperx",
             "model": "whisper-tiny.en", "word_timing": None}
    assert out["no_audio"]["transcript"] == {**empty, "note": "no audio track"}
    assert out["silent"]["transcript"] == {**empty, "note": "audio is silent"}
    assert list(out["no_audio"]["transcript"])[:5] == list(out["tea"]["transcript"])
    assert "errors" not in out["no_audio"] and "errors" not in out["silent"]


def test_unreadable_media_are_error_records_and_the_rest_still_runs(transcribed):
    done, out = transcribed
    assert out["missing"]["errors"][0]["kind"] == "missing_media"
    assert out["truncated"]["errors"][0]["kind"] == "unreadable_media"
    assert done.returncode == 3 and "2 failed" in done.stderr
    assert out["tea"]["transcript"]["segments"]


def test_a_long_real_talk_comes_back_sentence_level_not_in_30_s_chunks():
    talk = shared("laion_talk", "laion_talk.mp4")
    record = json.dumps({"id": "talk", "video": str(talk)})
    (out,) = jsonl(run_vi("transcribe", "-q", stdin=record + "\n", check=True).stdout)
    segments = out["transcript"]["segments"]
    assert len(segments) > 15
    durations = [s["end"] - s["start"] for s in segments]
    assert max(durations) < 25 and sorted(durations)[len(durations) // 2] < 12
    starts = [s["start"] for s in segments]
    assert starts == sorted(starts) and segments[-1]["end"] <= 123.0
    assert sum(1 for s in segments if s["text"].rstrip()[-1] in ".?!") > 0.7 * len(segments)
    assert "image text pairs" in " ".join(s["text"] for s in segments).lower()


def test_faster_whisper_backend_gives_the_same_schema(tea, tea_truth):
    record = json.dumps({"id": "tea", "video": str(tea)})
    (out,) = jsonl(run_vi("transcribe", "-q", "--backend", "faster-whisper", "--batch-size", "1",
                          stdin=record + "\n", check=True).stdout)
    transcript = out["transcript"]
    assert transcript["backend"] == "faster-whisper"
    said = " ".join(s["text"] for s in tea_truth["sentences"])
    assert recall(said, " ".join(s["text"] for s in transcript["segments"])) > 0.85
    assert len(transcript["segments"]) == len(tea_truth["sentences"])
    assert all(set(w) == {"word", "start", "end", "score"}
               for s in transcript["segments"] for w in s["words"])


def test_same_input_same_output(tea):
    record = json.dumps({"id": "tea", "video": str(tea)}) + "\n"
    first = run_vi("transcribe", "-q", "--seed", "3", stdin=record, check=True).stdout
    assert run_vi("transcribe", "-q", "--seed", "3", stdin=record, check=True).stdout == first
