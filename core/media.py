"""All media access in one place: metadata, frames at timestamps, 16 kHz mono audio.

Metadata comes from ffprobe (reads headers, decodes nothing); frames from decord (seeks and
decodes only the frames asked for); audio from ffmpeg, resampled to what speech models expect.
Every failure is a RecordError that names the file and what is wrong with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.errors import RecordError, SetupError

if TYPE_CHECKING:  # numpy is imported where arrays are made: `vi probe` starts without it (130 ms)
    import numpy as np

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


ISO_MEDIA_EXTENSIONS = (".mp4", ".m4v", ".m4a", ".mov", ".3gp")


def truncated_at(path: Path) -> tuple[int, int] | None:
    """(file size, size its boxes declare) when an MP4/MOV file ends inside a top-level box.

    A download cut short after a front index (faststart: `moov` before `mdat`) still probes
    as the full duration, and decoders stop quietly where the data ends. Walking the top-level
    boxes reads 8-16 bytes per box and decodes nothing.
    """
    if path.suffix.lower() not in ISO_MEDIA_EXTENSIONS:
        return None
    size = path.stat().st_size
    position = 0
    with open(path, "rb") as handle:
        while position + 8 <= size:
            handle.seek(position)
            header = handle.read(16)
            box = int.from_bytes(header[:4], "big")
            if position == 0 and header[4:8] not in (b"ftyp", b"moov", b"mdat", b"free", b"wide",
                                                     b"skip", b"pnot"):
                return None  # not an ISO media file after all: leave it to ffprobe
            if box == 1 and len(header) >= 16:
                box = int.from_bytes(header[8:16], "big")
            elif box == 0:  # "extends to the end of the file"
                return None
            if box < 8:
                return None
            position += box
    return (size, position) if position > size else None


def check_readable(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        if p.is_symlink():
            raise RecordError("missing_media", f"{p}: a symbolic link to {os.readlink(p)}, which "
                              "does not exist; fix the link or the path in the record")
        raise RecordError("missing_media", f"{p}: no such file; check the path in the record")
    if p.is_dir():
        raise RecordError("unreadable_media", f"{p}: is a directory, not a media file")
    if not os.access(p, os.R_OK):
        raise RecordError("unreadable_media", f"{p}: permission denied; make it readable "
                          f"(chmod a+r) or run as a user who may read it")
    if p.stat().st_size == 0:
        raise RecordError("unreadable_media", f"{p}: file is empty (0 bytes); re-download it")
    cut = truncated_at(p)
    if cut is not None:
        raise RecordError("unreadable_media", f"{p}: truncated: the file has {cut[0]} bytes but its "
                          f"MP4 boxes declare {cut[1]}, so its end is missing (an interrupted "
                          "download or copy); re-download it")
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
        reason = _last_line(done.stderr, done.returncode)
        hint = ("check its permissions" if "Permission denied" in reason else
                "it is not a media file, or its download was cut short: re-download it")
        raise RecordError("unreadable_media", f"{p}: not a readable media file ({reason}); {hint}")
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
    import numpy as np

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


def nearest_frames(starts: np.ndarray, times: list[float]) -> list[int]:
    """For each time, the index of the frame whose own timestamp is nearest.

    The frames' timestamps, not `time x average fps`: in a variable-frame-rate video (phone
    footage, screen recordings) the two drift apart by seconds.
    """
    import numpy as np

    starts = np.asarray(starts, dtype=np.float64)
    order = np.argsort(starts, kind="stable")  # presentation order
    sorted_starts = starts[order]
    out = []
    for t in times:
        right = int(np.searchsorted(sorted_starts, t))
        left = max(0, right - 1)
        right = min(right, len(sorted_starts) - 1)
        best = right if abs(sorted_starts[right] - t) < abs(t - sorted_starts[left]) else left
        out.append(int(order[best]))
    return out


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
    count = len(reader)
    if count == 0:
        raise RecordError("unreadable_media", f"{p}: has no video frames")
    indices = nearest_frames(reader.get_frame_timestamp(range(count))[:, 0], times)
    unique = sorted(set(indices))
    try:
        frames = reader.get_batch(unique).asnumpy()
    except (DECORDError, RuntimeError) as exc:
        raise RecordError("unreadable_media", f"{p}: decoding frames failed ({exc})") from None
    position = {index: i for i, index in enumerate(unique)}
    return frames[[position[i] for i in indices]]


def save_jpeg(image: np.ndarray, target: Path, quality: int = 90) -> None:
    """Write an RGB frame as TARGET atomically: a temporary file in the same folder renamed over
    it, so a reader (or a resumed run that sees the file and skips it) never finds half a JPEG."""
    import tempfile

    from PIL import Image

    target.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=".jpg.part", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            Image.fromarray(image).save(out, format="JPEG", quality=quality)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
