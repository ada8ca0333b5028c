"""`vi rebuild showhowto`: ShowHowTo's released sequences cut again from the original videos.

ShowHowTo (CVPR 2025) releases its training sequences as, per video, the keyframes that make the
sequence and a prompt per keyframe; its README gives the ffmpeg command that cuts each frame: the
video resampled to 5 fps (`fps=5`), the frames from `start_sec` on kept (`select=gte(t,START)`),
the `frame_idx`-th of those taken (`select=eq(n,IDX)`), as rgb24 at the native size; one ffmpeg
process per frame, each decoding the video from its start. The frames of a video, side by side,
are its sequence: `imgseqs/<youtube id>.jpg`, with `prompts.json` = {id: prompts}.

The same frames, decoding less (`frames_of`): the 5 fps stream's frames are numbered by their pts
in the filter's 1/5 s time base, the first one F, so keyframe (S, I) is the frame whose pts is
max(C, F) + I, where C is the first pts whose time `pts * 0.2` is >= S in the double arithmetic
the select filter does. One ffmpeg process per video reads F and selects all its keyframes by
pts: one input per cluster of nearby keyframes, seeked to 1 s before the cluster.
The fps filter gives a slot the last input frame whose rounded pts is not past it, so a pass that
starts before that frame sees the same frame in the same slot; a pass that finds fewer frames
than asked (its first slot came after a target: a long gap between frames) is done again from
the video's start. The conversion to rgb24 is the command's own (`-s WxH -pix_fmt rgb24`).
`seek=False` decodes each video once from its start: it rests on nothing but the decoder.

Where the release's files put these is known in one place only, `open_keyframes`.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.config import internal, option
from vi.core.errors import RecordError
from vi.core.records import Record, finite_number
from vi.pipelines.showhowto.export import DATASET_PANEL, ExportConfig, encode_jpeg
from vi.pipelines.showhowto.export_writers import ImgseqWriter, Sequence, safe_key

if TYPE_CHECKING:
    import numpy as np

STAGE = "rebuild showhowto"
RECIPE_FPS = 5  # the release's command: fps=5
SLOT = 1 / RECIPE_FPS  # av_q2d(1/5): what the select filter multiplies a pts by to get t
# Keyframes closer than this share one decoding pass: starting a pass (a process, a seek, the GOP
# before the seek point) costs about what decoding 8 s of 360p video does.
CLUSTER_GAP_S = 8.0
# A pass starts this long before its first keyframe. Any margin gives the same bytes (a pass whose
# first 5 fps slot comes after a target returns too few frames and is redone from the start); this
# one makes that rare, since it holds unless frames are over 0.9 s apart.
SEEK_MARGIN_S = 1.0
DECODE_TIMEOUT_S = 3600

EXPECTED_LAYOUT = """\
  --keyframes FILE or DIR/keyframes.json:  {"<video id>": [{"start_sec": 12.4, "frame_idx": 3}, ...], ...}
  --keyframes DIR with one file per video:  DIR/<video id>.json or DIR/<video id>/keyframes.json,
                                            each [{"start_sec": 12.4, "frame_idx": 3}, ...]
  (a video's list may also be {"keyframes": [...]}; other keys of a keyframe are ignored)
  --prompts FILE:                           {"<video id>": ["prompt of keyframe 1", ...], ...}"""


class LayoutError(ValueError):
    """Keyframes or prompts in a layout this reader does not know: the whole run stops (exit 2)."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}. vi rebuild showhowto reads ShowHowTo's released layout:\n"
                         f"{EXPECTED_LAYOUT}")


@dataclass(frozen=True)
class Keyframe:
    start_sec: float | int  # as the file has it: the command formats it into its filter as is
    frame_idx: int

    @property
    def target(self) -> int:
        """C: the first 5 fps pts whose time, as the select filter computes it, is >= start_sec."""
        pts = max(0, math.ceil(self.start_sec * RECIPE_FPS))
        while pts > 0 and (pts - 1) * SLOT >= self.start_sec:
            pts -= 1
        while pts * SLOT < self.start_sec:
            pts += 1
        return pts


# --- the release's layout: the one place that knows it -------------------------------------

def _keyframe_list(value, where: str) -> list[Keyframe]:
    """One video's keyframes, checked; a RecordError names the entry and field at fault."""
    if isinstance(value, dict) and "keyframes" in value:
        value = value["keyframes"]
    if not isinstance(value, list) or not value:
        raise RecordError("bad_keyframes", f"{where}: not a non-empty list of keyframes "
                          f'[{{"start_sec": S, "frame_idx": N}}, ...] (got {type(value).__name__})')
    out = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict) or "start_sec" not in entry or "frame_idx" not in entry:
            raise RecordError("bad_keyframes", f"{where}[{i}] is {entry!r:.80}, not "
                              '{"start_sec": S, "frame_idx": N}')
        start, index = entry["start_sec"], entry["frame_idx"]
        if finite_number(start) is None or start < 0:
            raise RecordError("bad_keyframes", f"{where}[{i}].start_sec is {start!r}, not seconds >= 0")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise RecordError("bad_keyframes", f"{where}[{i}].frame_idx is {index!r}, not a whole number >= 0")
        out.append(Keyframe(start, index))
    return out


def _looks_like_keyframes(value) -> bool:
    if isinstance(value, dict) and "keyframes" in value:
        value = value["keyframes"]
    return (isinstance(value, list) and bool(value) and isinstance(value[0], dict)
            and "start_sec" in value[0] and "frame_idx" in value[0])


def _load_json(path: Path):
    try:
        return json.loads(path.read_bytes())
    except ValueError as exc:
        raise LayoutError(str(path), f"not JSON ({exc})") from None


class KeyframeSource:
    """The videos of a keyframes layout and each one's keyframes, read when asked for."""

    def __init__(self, mapping: dict | None = None, files: dict[str, Path] | None = None, where: str = ""):
        self._mapping, self._files, self.where = mapping, files, where

    def ids(self) -> list[str]:
        return sorted(self._mapping if self._mapping is not None else self._files)  # type: ignore[arg-type]

    def keyframes(self, video_id: str) -> list[Keyframe]:
        if self._mapping is not None:
            if video_id not in self._mapping:
                raise RecordError("missing_keyframes", f"{self.where} has no keyframes for {video_id!r}")
            return _keyframe_list(self._mapping[video_id], f"{self.where}[{video_id!r}]")
        path = self._files.get(video_id)  # type: ignore[union-attr]
        if path is None:
            raise RecordError("missing_keyframes", f"{self.where} has no keyframes file for {video_id!r}")
        try:
            value = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise RecordError("bad_keyframes", f"{path}: cannot read it as JSON ({exc})") from None
        return _keyframe_list(value, str(path))


def open_keyframes(path: Path) -> KeyframeSource:
    """The keyframes layout at `path` (see EXPECTED_LAYOUT); a LayoutError when it is not one."""
    if not path.exists():
        raise LayoutError(str(path), "no such file or folder")
    single = path / "keyframes.json" if path.is_dir() else path
    if single.is_file():
        mapping = _load_json(single)
        if not isinstance(mapping, dict) or not mapping:
            raise LayoutError(str(single), f"a JSON {type(mapping).__name__}, not an object keyed by video id")
        first = next(iter(mapping))
        if not _looks_like_keyframes(mapping[first]):
            raise LayoutError(str(single), f"its first video, {first!r}, maps to {mapping[first]!r:.120}")
        return KeyframeSource(mapping=mapping, where=str(single))
    files = {p.stem: p for p in path.glob("*.json")}
    files.update({p.parent.name: p for p in path.glob("*/keyframes.json")})
    if not files:
        raise LayoutError(str(path), "a folder with no keyframes.json, no <video id>.json and no "
                                     "<video id>/keyframes.json")
    first = min(files)
    value = _load_json(files[first])
    if not _looks_like_keyframes(value):
        raise LayoutError(str(files[first]), f"holds {value!r:.120}")
    return KeyframeSource(files=files, where=str(path))


def read_prompts(path: Path) -> dict[str, list[str]]:
    """`prompts.json`, {video id: [prompt, ...]}; each video's list is checked when it is used."""
    if not path.is_file():
        raise LayoutError(str(path), "no such file")
    value = _load_json(path)
    if not isinstance(value, dict) or not value:
        raise LayoutError(str(path), f"a JSON {type(value).__name__}, not an object keyed by video id")
    first = next(iter(value))
    if not isinstance(value[first], list):
        raise LayoutError(str(path), f"its first video, {first!r}, maps to {value[first]!r:.120}, not a list")
    return value


def prompts_for(prompts: dict, video_id: str, count: int, where: Path) -> list[str]:
    listed = prompts.get(video_id)
    if listed is None:
        raise RecordError("missing_prompts", f"{where} has no prompts for {video_id!r}")
    if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
        raise RecordError("bad_prompts", f"{where}[{video_id!r}] is not a list of strings")
    if len(listed) != count:
        raise RecordError("bad_prompts", f"{where}[{video_id!r}] has {len(listed)} prompts for {count} "
                          "keyframes: a sequence needs one prompt per frame")
    return listed


# --- the frames ---------------------------------------------------------------------------

def _ffmpeg() -> str:
    from vi.core.media import require_tool

    return require_tool("ffmpeg")


def recipe_frame(video: str | Path, keyframe: Keyframe, width: int, height: int) -> bytes:
    """One frame as the release's README cuts it: its ffmpeg command, one process per frame, the
    video decoded from its start. The reference the tests and `make bench` compare against."""
    command = [_ffmpeg(), "-i", str(video), "-f", "rawvideo", "-pix_fmt", "rgb24",
               "-vf", f"fps=5,select=gte(t\\,{keyframe.start_sec}),select=eq(n\\,{keyframe.frame_idx})",
               "-s", f"{width}x{height}", "-vframes", "1", "pipe:"]
    done = subprocess.run(command, capture_output=True, timeout=DECODE_TIMEOUT_S, check=False)
    return done.stdout[:width * height * 3]


_SHOWINFO = re.compile(rb"\bn:\s*0\s+pts:\s*(-?\d+)\b.*?\bs:(\d+)x(\d+)")


@dataclass(frozen=True)
class _Job:
    pts: list[int]  # sorted, distinct
    seek_s: float | None  # None: from the video's start


def _run(video: Path, jobs: list[_Job], probe: bool) -> tuple[tuple[int, int, int] | None, list[list[bytes]]]:
    """One ffmpeg process: with `probe`, the 5 fps stream's first pts F and the frames' size; and per
    job, the frames of the 5 fps stream at its pts, in order (fewer when the stream has fewer).

    Each job is an input of its own, seeked and cut short (-t), feeding an output file of its own, so
    a video costs one process however many clusters it has. The filters are the recipe's; its
    `-s WxH` at the native size is left out (the same rgb24 conversion is inserted without it, and
    the size is known only once the process has run); -fps_mode passthrough so that rawvideo's
    constant-rate default does not repeat a frame into the gaps between the selected ones."""
    inputs: list[str] = []
    outputs: list[str] = []
    with tempfile.TemporaryDirectory(prefix="vi-rebuild-") as folder:
        if probe:
            inputs += ["-i", str(video)]
            outputs += ["-map", "0:V:0", "-vf", "fps=5,showinfo", "-vframes", "1", "-f", "null", "-"]
        for job in jobs:
            if job.seek_s is not None:
                span = (job.pts[-1] - job.pts[0]) * SLOT + SEEK_MARGIN_S + 2.0  # past the last target
                inputs += ["-ss", f"{job.seek_s:.6f}", "-t", f"{span:.6f}", "-copyts", "-start_at_zero"]
            inputs += ["-i", str(video)]
            index = inputs.count("-i") - 1
            chosen = "+".join(f"eq(pts\\,{p})" for p in job.pts)
            outputs += ["-map", f"{index}:V:0", "-an", "-sn", "-dn", "-vf", f"fps=5,select={chosen}",
                        "-pix_fmt", "rgb24", "-fps_mode", "passthrough", "-vframes", str(len(job.pts)),
                        "-f", "rawvideo", "-y", f"{folder}/{index}.raw"]
        command = [_ffmpeg(), "-hide_banner", "-nostdin", "-nostats", "-loglevel", "info" if probe else "error",
                   *inputs, *outputs]
        done = subprocess.run(command, capture_output=True, timeout=DECODE_TIMEOUT_S, check=False)
        found = _SHOWINFO.search(done.stderr) if probe else None
        if probe and found is None:
            raise RecordError("unreadable_media", f"{video}: ffmpeg finds no video frame in it "
                              f"({_last(done)}); re-download it")
        first = (int(found.group(1)), int(found.group(2)), int(found.group(3))) if found else None
        frames = []
        size = first[1] * first[2] * 3 if first else None
        for index in range(int(probe), int(probe) + len(jobs)):
            path = Path(folder) / f"{index}.raw"
            data = path.read_bytes() if path.exists() else b""
            frames.append(data if size is None else [data[i:i + size] for i in range(0, len(data) - size + 1, size)])
    if done.returncode != 0 and not any(frames):
        raise RecordError("unreadable_frame", f"{video}: ffmpeg stopped decoding ({_last(done)}); re-download it")
    return first, frames


def _last(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.decode(errors="replace").strip().splitlines() if "showinfo" not in line]
    return lines[-1] if lines else f"exit {done.returncode}"


def first_slot(video: Path) -> tuple[int, int, int]:
    """(F, width, height): the pts of the 5 fps stream's first frame and the frames' native size."""
    first, _ = _run(video, [], probe=True)
    return first  # type: ignore[return-value]


def clusters(pts: list[int], gap_s: float = CLUSTER_GAP_S) -> Iterator[list[int]]:
    """Sorted distinct pts in runs whose neighbours are at most `gap_s` apart."""
    run: list[int] = []
    for p in sorted(set(pts)):
        if run and (p - run[-1]) * SLOT > gap_s:
            yield run
            run = []
        run.append(p)
    if run:
        yield run


def _plan(wanted: list[int], seek: bool) -> list[_Job]:
    if not seek:
        return [_Job(sorted(set(wanted)), None)]
    jobs = []
    for run in clusters(wanted):
        start = run[0] * SLOT - SEEK_MARGIN_S
        jobs.append(_Job(run, start if start > 0 else None))
    return jobs


def frames_of(video: Path, keyframes: list[Keyframe], seek: bool = True) -> tuple[list[np.ndarray], list[float]]:
    """The keyframes' frames (H, W, 3) uint8, the release's bytes, and their times in the 5 fps stream.

    One ffmpeg process reads F and decodes every cluster, its targets computed as if F were at most
    every keyframe's C (a video's first frame at its start); when F turns out larger, or a seeked
    cluster comes back short, a second process decodes what is left from the video's start."""
    import numpy as np

    assumed = [k.target + k.frame_idx for k in keyframes]
    jobs = _plan(assumed, seek)
    first_info, outputs = _run(video, jobs, probe=True)
    first, width, height = first_info  # type: ignore[misc]
    wanted = [max(k.target, first) + k.frame_idx for k in keyframes]
    got: dict[int, bytes] = {}
    if wanted == assumed:
        for job, frames in zip(jobs, outputs):
            if len(frames) == len(job.pts) or job.seek_s is None:
                got.update(zip(job.pts, frames))
    left = sorted({p for p in wanted if p not in got})
    if left:
        _, (frames,) = _run(video, [_Job(left, None)], probe=False)
        size = width * height * 3
        got.update(zip(left, [frames[i:i + size] for i in range(0, len(frames) - size + 1, size)]))
    missing = [i for i, p in enumerate(wanted) if p not in got]
    if missing:
        k = keyframes[missing[0]]
        raise RecordError("unreadable_frame", f"{video}: keyframe {missing[0]} (start_sec {k.start_sec}, "
                          f"frame_idx {k.frame_idx}) is past the video's last frame at 5 fps"
                          + (f", and {len(missing) - 1} more" if len(missing) > 1 else "")
                          + "; the file may be cut short (re-download it) or not the released video")
    return ([np.frombuffer(got[p], np.uint8).reshape(height, width, 3) for p in wanted],
            [round(p * SLOT, 3) for p in wanted])


# --- the stage ----------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class RebuildConfig(ExportConfig):
    """The options of `vi rebuild showhowto`: where the release's files and the videos are, and
    the dataset's (--out, --format, --quality, --maxcount, as `vi export showhowto` has them)."""

    keyframes: Path = option(panel=DATASET_PANEL, show_default=False, help=(
        "The release's keyframes: a keyframes.json {video id: [{start_sec, frame_idx}, ...]}, or a "
        "folder of <video id>.json or <video id>/keyframes.json."))
    prompts: Path = option(panel=DATASET_PANEL, show_default=False, help=(
        "The release's prompts.json: {video id: a list of prompts, one per keyframe}."))
    video_root: Path | None = option(None, panel=DATASET_PANEL, help=(
        "Where the videos are: ROOT/<id>.<ext> or vi download's ROOT/<hash>/<id>.<ext>. A record "
        "of --input with a 'video' path uses that instead."))
    seek: bool = option(True, panel=DATASET_PANEL, help=(
        "Decode only shortly before each cluster of keyframes; --no-seek decodes each video once "
        "from its start (slower; the same bytes, resting on nothing but the decoder)."))
    # The release's frames are cut at their native size and kept whole: no tile height, no minimum.
    height: int = internal(0)
    min_steps: int = internal(1)
    source: KeyframeSource = internal(init=False)
    prompt_map: dict = internal(init=False)

    def __post_init__(self) -> None:
        if self.video_root is not None and not self.video_root.is_dir():
            raise ValueError(f"--video-root {self.video_root}: no such folder")
        object.__setattr__(self, "source", open_keyframes(self.keyframes))
        object.__setattr__(self, "prompt_map", read_prompts(self.prompts))


def video_id(record: Record) -> str:
    """The YouTube id a record stands for: `youtube_id` when it has one (vi download keeps it), else `id`."""
    value = record.get("youtube_id") or record["id"]
    return str(value)


def find_video(record: Record, root: Path | None) -> Path:
    from vi.pipelines.common.download import find_download

    given = record.get("video")
    if isinstance(given, str) and given:
        return Path(given)
    vid = video_id(record)
    found = find_download(root, vid) if root is not None else None
    if found is None:
        where = f"under --video-root {root}" if root is not None else "(no --video-root given)"
        raise RecordError("missing_media", f"no video file for {vid!r} {where}: download it (vi download) "
                          "or point --video-root at the folder holding <id>.mp4")
    return found


def rebuild_record(record: Record, config: RebuildConfig, writer) -> dict:
    """One video's sequence, cut, joined and written (whole, or not at all); the fields it adds."""
    import numpy as np
    from PIL import Image

    from vi.core.media import check_readable

    vid = video_id(record)
    keyframes = config.source.keyframes(vid)
    prompts = prompts_for(config.prompt_map, vid, len(keyframes), config.prompts)
    video = check_readable(find_video(record, config.video_root))
    key = safe_key(vid)
    where = (f"{writer.folder.name}/{key}.jpg" if isinstance(writer, ImgseqWriter)
             else f"{key}.jpg in {writer.prefix}-*.tar")
    if not writer.is_done(vid):  # a kill came after the files and before the record line
        frames, times = frames_of(video, keyframes, seek=config.seek)
        jpeg = encode_jpeg(Image.fromarray(np.concatenate(frames, axis=1)), config.quality)
        writer.write(Sequence(vid, prompts, times, [None] * len(frames), str(video), None), jpeg)
    return {"video": str(video), "sequence": {"path": where, "frames": len(keyframes), "prompts": prompts}}


def records_to_rebuild(config: RebuildConfig, given: Iterator[Record] | None) -> Iterator[Record]:
    """The records of --input, or one {"id"} per video of the keyframes layout."""
    if given is not None:
        yield from given
        return
    for vid in config.source.ids():
        yield {"id": vid}


def forget_lost(output: Path, writer) -> int:
    """Before a resume: the ok lines of OUTPUT whose sequence the dataset does not hold (a webdataset
    tar a kill left unfinished is deleted with the sequences in it) are taken out of OUTPUT, as
    --retry-errors does, so the resume rebuilds them. Returns how many."""
    import os

    from vi.core.records import loads

    if not output.is_file():
        return 0
    kept, lost = [], 0
    with open(output, "rb") as handle:
        for line in handle:
            try:
                record = loads(line)
                gone = (not record.get("errors") and "sequence" in record
                        and not writer.is_done(video_id(record)))
            except (ValueError, KeyError, TypeError, AttributeError):
                gone = False  # a torn or foreign line: the sink's own recovery deals with it
            lost += gone
            if not gone:
                kept.append(line)
    if lost:
        temporary = output.with_name(f".{output.name}.forget")
        temporary.write_bytes(b"".join(kept))
        os.replace(temporary, output)
    return lost
