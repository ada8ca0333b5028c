"""All media access in one place: metadata, frames at timestamps, 16 kHz mono audio.

Metadata comes from ffprobe (reads headers, decodes nothing); frames from decord (seeks and
decodes only the frames asked for); audio from ffmpeg, resampled to what speech models expect.
Every failure is a RecordError that names the file and what is wrong with it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from vi.core.errors import RecordError, SetupError

SAMPLE_RATE = 16_000
VIDEO_EXTENSIONS = (".mp4", ".mkv", ".webm", ".mov", ".avi", ".m4v", ".mpg", ".mpeg", ".flv")
AUDIO_EXTENSIONS = (".wav", ".mp3", ".m4a", ".flac", ".ogg", ".opus", ".aac")
PROBE_TIMEOUT_S = 60
DECODE_TIMEOUT_S = 3600  # a whole film's audio decodes in well under this; a stalled mount never ends


@dataclass(frozen=True)
class MediaInfo:
    duration: float
    fps: float | None
    width: int | None
    height: int | None
    has_video: bool
    has_audio: bool

    def as_fields(self) -> dict:
        return asdict(self)


def require_tool(name: str) -> str:
    """The path of an external program, or a SetupError naming the Debian package to install."""
    path = shutil.which(name)
    if path is None:
        package = "ffmpeg" if name.startswith("ff") else name
        raise SetupError(f"{name} is not installed; install {package} (apt-get install {package}, "
                         "or `make install` as root) and try again")
    return path


def _last_line(stderr: bytes, code: int) -> str:
    lines = stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit code {code}"


def check_readable(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise RecordError("missing_media", f"{p}: no such file; check the path in the record")
    if p.is_dir():
        raise RecordError("unreadable_media", f"{p}: is a directory, not a media file")
    if p.stat().st_size == 0:
        raise RecordError("unreadable_media", f"{p}: file is empty (0 bytes); re-download it")
    return p


def _rate(text: str | None) -> float | None:
    if not text or text in ("0/0", "0"):
        return None
    value = float(Fraction(text))
    return value or None


def probe(path: str | Path) -> MediaInfo:
    p = check_readable(path)
    cmd = [require_tool("ffprobe"), "-v", "error", "-print_format", "json", "-show_format",
           "-show_streams", str(p)]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise RecordError("unreadable_media", f"{p}: ffprobe gave no answer in "
                          f"{PROBE_TIMEOUT_S}s; the file may be on a stalled mount") from None
    if done.returncode != 0:
        raise RecordError("unreadable_media", f"{p}: not a readable media file "
                          f"({_last_line(done.stderr, done.returncode)}); "
                          "a truncated download is the usual cause")
    meta = json.loads(done.stdout or b"{}")
    streams = meta.get("streams", [])
    video = next((s for s in streams if s.get("codec_type") == "video"
                  and not s.get("disposition", {}).get("attached_pic")), None)
    audio = next((s for s in streams if s.get("codec_type") == "audio"), None)
    if video is None and audio is None:
        raise RecordError("unreadable_media", f"{p}: has neither a video nor an audio stream")
    duration = meta.get("format", {}).get("duration") or (video or audio or {}).get("duration")
    if duration is None:
        raise RecordError("unreadable_media", f"{p}: ffprobe reports no duration; "
                          "remux it (ffmpeg -i IN -c copy OUT.mp4)")
    return MediaInfo(
        duration=round(float(duration), 3),
        fps=round(_rate(video.get("avg_frame_rate")) or _rate(video.get("r_frame_rate")) or 0,
                  3) or None if video else None,
        width=int(video["width"]) if video and "width" in video else None,
        height=int(video["height"]) if video and "height" in video else None,
        has_video=video is not None,
        has_audio=audio is not None,
    )


def read_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """The first audio stream as float32 mono at `sample_rate`, in [-1, 1]."""
    p = check_readable(path)
    cmd = [require_tool("ffmpeg"), "-nostdin", "-v", "error", "-threads", "0", "-i", str(p),
           "-map", "0:a:0", "-f", "s16le", "-ac", "1", "-acodec", "pcm_s16le",
           "-ar", str(sample_rate), "-"]
    try:
        done = subprocess.run(cmd, capture_output=True, check=False, timeout=DECODE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RecordError("unreadable_media", f"{p}: decoding its audio took over "
                          f"{DECODE_TIMEOUT_S}s; the file may be on a stalled mount") from None
    if done.returncode != 0:
        raise RecordError("unreadable_media", f"{p}: ffmpeg could not decode its audio "
                          f"({_last_line(done.stderr, done.returncode)})")
    return np.frombuffer(done.stdout, np.int16).astype(np.float32) / 32768.0


def video_span(path: str | Path) -> float:
    """Seconds the video frames cover (frame count / fps): shorter than the container's
    duration when the audio runs on past the last frame. Reads the index, decodes nothing."""
    from decord import DECORDError, VideoReader, cpu

    p = check_readable(path)
    try:
        reader = VideoReader(str(p), ctx=cpu(0), width=16, height=16)
    except (DECORDError, RuntimeError) as exc:
        raise RecordError("unreadable_media", f"{p}: decord cannot open it as video ({exc})"
                          ) from None
    fps = reader.get_avg_fps()
    return len(reader) / fps if fps > 0 else 0.0


def read_frames(path: str | Path, times: list[float], width: int = -1, height: int = -1
                ) -> np.ndarray:
    """RGB frames (N, H, W, 3) uint8 nearest to each time in `times`, in the order asked.

    Each distinct frame is decoded once even when several times map to it.
    """
    from decord import DECORDError, VideoReader, cpu

    p = check_readable(path)
    try:
        reader = VideoReader(str(p), ctx=cpu(0), width=width, height=height)
    except (DECORDError, RuntimeError) as exc:
        raise RecordError("unreadable_media", f"{p}: decord cannot open it as video ({exc})"
                          ) from None
    count, fps = len(reader), reader.get_avg_fps()
    if count == 0:
        raise RecordError("unreadable_media", f"{p}: has no video frames")
    indices = [min(count - 1, max(0, round(t * fps))) for t in times]
    unique = sorted(set(indices))
    try:
        frames = reader.get_batch(unique).asnumpy()
    except (DECORDError, RuntimeError) as exc:
        raise RecordError("unreadable_media", f"{p}: decoding frames failed ({exc})") from None
    position = {index: i for i, index in enumerate(unique)}
    return frames[[position[i] for i in indices]]
