"""Media access: frames at timestamps, 16 kHz mono audio, clear errors for bad files."""

import numpy as np
import pytest

from vi.core import media
from vi.core.errors import RecordError
from vi.evaluation.demo.samples import COLOURS


def centre_colour(frame: np.ndarray) -> np.ndarray:
    h, w, _ = frame.shape
    return frame[h // 2 - 5: h // 2 + 5, w // 4 - 5: w // 4 + 5].reshape(-1, 3).mean(0)


def test_frames_at_timestamps_show_the_step_being_narrated(tea, tea_truth):
    sentences = tea_truth["sentences"]
    times = [(s["start"] + s["end"]) / 2 for s in sentences]
    frames = media.read_frames(tea, times)
    assert frames.shape == (len(times), 360, 640, 3) and frames.dtype == np.uint8
    for index, frame in enumerate(frames):  # each still has its own background colour
        assert np.abs(centre_colour(frame) - COLOURS[index]).max() < 25, index


def test_frames_keep_the_order_asked_and_repeat_duplicates(tea, tea_truth):
    s = tea_truth["sentences"]
    early, late = (s[0]["start"] + s[0]["end"]) / 2, (s[5]["start"] + s[5]["end"]) / 2
    frames = media.read_frames(tea, [late, early, late, 1e6, -3])
    assert np.array_equal(frames[0], frames[2])
    assert not np.array_equal(frames[0], frames[1])
    assert np.array_equal(frames[3], media.read_frames(tea, [1e6])[0])  # clamped to the end
    assert frames.shape[0] == 5


def test_frames_can_be_resized_while_decoding(tea):
    assert media.read_frames(tea, [1.0], width=160, height=90).shape == (1, 90, 160, 3)


def test_audio_is_16k_mono_float(tea, tea_truth):
    audio = media.read_audio(tea)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert abs(len(audio) / media.SAMPLE_RATE - media.probe(tea).duration) < 1.0
    first = tea_truth["sentences"][0]
    speech = audio[int(first["start"] * 16000): int(first["end"] * 16000)]
    gap = audio[: int(0.7 * 16000)]
    assert np.sqrt(np.mean(speech**2)) > 10 * np.sqrt(np.mean(gap**2)) + 1e-4


@pytest.mark.parametrize("fault,kind", [("missing", "missing_media"), ("empty", "unreadable_media"),
                                        ("truncated", "unreadable_media")])
def test_bad_files_raise_record_errors_naming_the_file(broken_media, fault, kind):
    path = broken_media[fault]
    for read in (media.probe, media.read_audio, lambda p: media.read_frames(p, [0.0])):
        with pytest.raises(RecordError) as caught:
            read(path)
        assert caught.value.kind == kind and str(path) in caught.value.message


def test_audio_of_a_video_without_audio_is_a_record_error(broken_media):
    with pytest.raises(RecordError, match="audio"):
        media.read_audio(broken_media["no_audio"])


def test_video_span_stops_at_the_last_frame_when_the_audio_runs_on(tmp_path, no_tools_needed):
    from conftest import ffmpeg
    from vi.core import media

    clip = tmp_path / "short_video_long_audio.mp4"
    ffmpeg("-f", "lavfi", "-i", "color=c=red:s=64x64:r=10:d=3", "-f", "lavfi", "-i",
           "sine=frequency=440:duration=8", "-c:v", "libx264", "-pix_fmt", "yuv420p",
           "-c:a", "aac", str(clip))
    assert media.probe(clip).duration > 7.5
    assert abs(media.video_span(clip) - 3.0) < 0.15
