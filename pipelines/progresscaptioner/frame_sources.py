"""Where a record's candidate frames come from, before `vi frames` selects any.

- `video` (vi probe; vi clips adds `start`/`end`): times start + k/fps before `end` (the
  whole video without start/end; never past the last frame), at least the start itself.
  Each frame's file is FRAMES_DIR/<id>/<time>.jpg, written later only for the frames kept.
- `image_files` (the release's FrameCapEval JSON, read by `framecap_records`): paths under
  --image-root, time null.
- `frames` ([{path, time}] or paths): images as they are, e.g. the sample sequences.

A missing file, a clip outside its video or a bad field is a RecordError naming it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from vi.core import media
from vi.core.errors import RecordError
from vi.core.paths import safe_name
from vi.core.records import REJECTED, finite_number, with_error

STAGE = "frames"


# --- the candidate frames of a record ---------------------------------------------------------

@dataclass
class Sequence:
    """A record's candidate frames: their times (None for images) and files (for a video, where
    each frame is or will be saved)."""

    times: list[float | None]
    paths: list[Path]
    video: Path | None = None
    size: tuple[int, int] | None = None  # the video's (width, height)

    def __len__(self) -> int:
        return len(self.times)


def _seconds(record: dict, key: str) -> float | None:
    if record.get(key) is None:
        return None
    value = finite_number(record[key])
    if value is None or value < 0:
        raise RecordError("bad_field", f"'{key}' is {record[key]!r}, not a number of seconds >= 0; fix it or "
                          "drop it (without start/end the whole video is used)")
    return value


def clip_times(start: float, end: float, fps: float) -> list[float]:
    """start + k/fps for every k with that time before `end`; at least the start itself."""
    count = max(1, math.ceil((end - start) * fps - 1e-9))
    return [round(start + k / fps, 6) for k in range(count)]


def video_sequence(record: dict, fps: float, frames_dir: Path | None, folder_id: object) -> Sequence:
    if frames_dir is None:
        raise RecordError("missing_option", f"record {record['id']!r} is a video: give --frames-dir DIR to "
                          "save its frames in (DIR/<id>/<time>.jpg)")
    path = media.check_readable(record["video"])
    start, end = _seconds(record, "start") or 0.0, _seconds(record, "end")
    if end is not None and end <= start:
        raise RecordError("bad_field", f"the clip ends at {end} s, not after its start {start} s; fix "
                          "'start'/'end' or drop the record")
    width, height = record.get("width"), record.get("height")
    info = None
    if not (finite_number(width) and finite_number(height)):
        info = media.probe(path)
        if not info.has_video:
            raise RecordError("unreadable_media", f"{path}: has no video stream, so no frames")
        width, height = info.width, info.height
    # Past the last frame every time decodes to that same frame: never a candidate.
    last = media.video_span(path)
    end = last if end is None else min(end, last)
    if start >= end:
        raise RecordError("bad_field", f"the clip starts at {start} s, at or after the video's last frame "
                          f"({last:.3f} s in {path}); fix 'start' or drop the record")
    times = clip_times(start, end, fps)
    folder = frames_dir / safe_name(folder_id)
    return Sequence(times, [folder / f"{t:09.3f}.jpg" for t in times], path, (int(width), int(height)))


def _existing(path: Path, what: str, hint: str) -> Path:
    if not path.is_file():
        raise RecordError("missing_media", f"{what} {path}: no such file; {hint}")
    return path


def image_sequence(record: dict, image_root: Path | None) -> Sequence:
    if record.get("image_files") is not None:
        files = record["image_files"]
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            raise RecordError("bad_field", "'image_files' must be a non-empty list of image paths")
        root = image_root or Path(".")
        hint = (f"--image-root is {image_root}: point it at the folder the paths start from"
                if image_root is not None else
                "the paths are relative: give --image-root, the folder they start from")
        if record.get("n_frames") is not None and record["n_frames"] != len(files):
            raise RecordError("bad_field", f"'n_frames' is {record['n_frames']!r} but 'image_files' lists "
                              f"{len(files)} images; fix the entry")
        paths = [_existing(root / f, f"image_files[{i}]", hint) for i, f in enumerate(files)]
        return Sequence([None] * len(paths), paths)
    frames = record["frames"]
    if not isinstance(frames, list) or not frames:
        raise RecordError("bad_field", "'frames' must be a non-empty list of {path, time} (or paths)")
    times, paths = [], []
    for i, frame in enumerate(frames):
        item = frame if isinstance(frame, dict) else {"path": frame, "time": None}
        if not isinstance(item.get("path"), str):
            raise RecordError("bad_field", f"frames[{i}] has no 'path' string")
        paths.append(_existing(Path(item["path"]), f"frames[{i}].path", "fix the path or re-run vi frames"))
        times.append(finite_number(item.get("time")))
    return Sequence(times, paths)


def sequence_of(record: dict, *, fps: float, frames_dir: Path | None, image_root: Path | None,
                folder_id: object) -> Sequence:
    """The candidate frames: from `video`, else `image_files`, else `frames` (module doc)."""
    if isinstance(record.get("video"), str) and record["video"]:
        return video_sequence(record, fps, frames_dir, folder_id)
    if record.get("image_files") is not None or record.get("frames") is not None:
        return image_sequence(record, image_root)
    raise RecordError("missing_field", "the record has no 'video' (vi probe, vi clips), 'image_files' "
                      "(FrameCapEval: use --framecap FILE.json) or 'frames' to take frames from")


# --- the release's FrameCapEval JSON ---------------------------------------------------------

SOURCES = {"coin": "COIN", "htc": "HTC"}  # coin_valhs_seq.json, htc_valhs_seq.json


def framecap_ids(entries: list, source: str) -> list[str | None]:
    """Each entry's record id: `<source>/<idx>`, or `<source>/<idx>/<video>` when the idx repeats in
    the file (None for an entry without an idx).

    Why: the release's coin_valhs_seq.json gives six idx values to two different videos each (0070 is
    both FuelCar and InstallWoodFlooring), so `<source>/<idx>` alone would give two sequences one id:
    resume would skip the second and both would save their frames in one folder. <video> is the
    folder of the entry's first image (the YouTube id in the release), then `#<n>` if that repeats too.
    A labels file in the release's format gets the same ids (evaluation.progresscaptioner.framecap)."""
    idx = [str(e["idx"]) if isinstance(e, dict) and isinstance(e.get("idx"), (str, int)) and str(e["idx"])
           else None for e in entries]
    repeated = {i for i in idx if i is not None and idx.count(i) > 1}
    ids: list[str | None] = []
    for entry, i in zip(entries, idx):
        if i is None or i not in repeated:
            ids.append(None if i is None else f"{source}/{i}")
            continue
        files = entry.get("image_files")
        video = Path(str(files[0])).parent.name if isinstance(files, list) and files else ""
        base = f"{source}/{i}/{video or 'entry'}"
        ids.append(base if base not in ids else f"{base}#{sum(x is not None and x.startswith(base) for x in ids) + 1}")
    return ids


def framecap_records(path: Path, source: str | None = None) -> list[dict]:
    """One record per entry {idx, action_label, n_frames, image_files, ...}, id <source>/<idx>
    (framecap_ids: with the video when an idx repeats), every field of the entry kept; an entry
    without an idx is an error record."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"--framecap {path}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, list):
        raise ValueError(f"--framecap {path}: a JSON list of {{idx, action_label, n_frames, image_files}} "
                         f"was expected, not {type(data).__name__}")
    source = source or SOURCES.get(path.name.split("_")[0].lower())
    if source is None:
        raise ValueError(f"--framecap {path}: the source dataset cannot be told from the file name "
                         f"(coin_*: COIN, htc_*: HTC); give --source NAME")
    records = []
    for i, (entry, record_id) in enumerate(zip(data, framecap_ids(data, source))):
        if record_id is not None:
            records.append({"id": record_id, **entry, "source": source})
            continue
        bad = with_error({"id": f"{source}/entry{i}", "entry": entry}, STAGE, "bad_field",
                         f"--framecap {path}: entry {i} is not an object with an 'idx'; fix or drop it")
        records.append({**bad, REJECTED: True})
    return records
