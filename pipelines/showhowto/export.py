"""`vi export showhowto`: step records in, a ShowHowTo training dataset out.

ShowHowTo's loader (soCzech/ShowHowTo, `video_dataset.py`) reads `ROOT/prompts.json`, a map
from sequence id to its per-frame prompts, and globs `ROOT/imgseqs*/*.jpg`: one horizontal
strip per sequence, split into `len(prompts)` equal-width tiles, each centre-cropped to a
square. So every tile here has the strip's height and one common width that is never less
than that height.

A sequence is a record's steps that have a frame, in order. The export is exactly-once
under kills and resumes: every file is written to a hidden temporary name and renamed, and
a sequence counts as done only once its last file (the sidecar json, or the tar holding
it) has its final name.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from vi.core.errors import EXIT_OK, EXIT_RECORDS_FAILED, RecordError
from vi.core.media import read_frames
from vi.core.progress import log
from vi.core.records import REJECTED, Record, finite_number, has_errors
from vi.core.sharding import Shard
from vi.core.sink import recover

STAGE = "export showhowto"
TOO_FEW_STEPS, UPSTREAM_ERROR, MALFORMED = "too_few_steps", "upstream_error", "malformed"
JPEG_MAX_SIDE = 65_500  # libjpeg refuses images wider than 65535 px
KEY_MAX_CHARS = 100  # a file name stays far below the 255-byte limit of most filesystems
MAX_SHOWN_FAILURES = 10
LAYOUTS = ("showhowto", "webdataset")


@dataclass(frozen=True)
class Sequence:
    """The aligned steps of one record: what goes into one strip."""

    id: str
    prompts: list[str]
    times: list[float]
    paths: list[str | None]  # a saved JPEG of the frame, or None: decode it from `video`
    video: str | None
    title: str | None

    def sidecar(self) -> dict[str, Any]:
        return {"id": self.id, "prompts": self.prompts, "times": self.times, "video": self.video,
                "title": self.title}


@dataclass(frozen=True)
class Skip:
    reason: str  # TOO_FEW_STEPS, UPSTREAM_ERROR, MALFORMED, or a RecordError kind
    detail: str


def safe_key(record_id: str) -> str:
    """The id as a file name and webdataset key: letters, digits, `_` and `-` only.

    webdataset splits a member name at its first dot, and ShowHowTo's loader strips every
    `.jpg` from a name, so other ids get their other characters replaced and a hash of the
    id appended (the sidecar keeps the real id).
    """
    if re.fullmatch(rf"[A-Za-z0-9_-]{{1,{KEY_MAX_CHARS}}}", record_id):
        return record_id
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", record_id)[:KEY_MAX_CHARS]
    return f"{cleaned}-{hashlib.sha1(record_id.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def aligned_sequence(record: Record, min_steps: int = 2) -> Sequence | Skip:
    """The record's steps that have a frame, in order, or why the record has no sequence."""
    if record.get(REJECTED):  # our own reader found the line broken: not an upstream failure
        return Skip(MALFORMED, record["errors"][-1]["message"])
    if has_errors(record):
        last = record["errors"][-1]
        return Skip(UPSTREAM_ERROR, f"failed in vi {last.get('stage')}: {last.get('message')}")
    steps = record.get("steps")
    if not isinstance(steps, dict) or not isinstance(steps.get("items"), list):
        return Skip(MALFORMED, "no 'steps' object with an 'items' list (the step and frame alignment "
                               "stages write it)")
    prompts, times, paths = [], [], []
    for i, item in enumerate(steps["items"]):
        where = f"steps.items[{i}]"
        if not isinstance(item, dict):
            return Skip(MALFORMED, f"{where} is not an object")
        if "frame" not in item:
            return Skip(MALFORMED, f"{where} has no 'frame' (null for a step without one); "
                                   "were the frames aligned?")
        frame = item["frame"]
        if frame is None:
            continue  # a step the aligner found no frame for: not part of the sequence
        if not isinstance(item.get("text"), str) or not item["text"].strip():
            return Skip(MALFORMED, f"{where}.text is missing or empty")
        if not isinstance(frame, dict) or finite_number(frame.get("time")) is None or frame["time"] < 0:
            return Skip(MALFORMED, f"{where}.frame needs a 'time' in seconds (got {frame!r})")
        if frame.get("path") is not None and not isinstance(frame["path"], str):
            return Skip(MALFORMED, f"{where}.frame.path is not a string")
        prompts.append(item["text"].strip())
        times.append(float(frame["time"]))
        paths.append(frame.get("path"))
    video = record.get("video")
    if None in paths and not isinstance(video, str):
        return Skip(MALFORMED, "'video' is missing, and frames without a saved 'path' are decoded from it")
    if len(prompts) < min_steps:
        return Skip(TOO_FEW_STEPS, f"{len(prompts)} of {len(steps['items'])} steps have a frame "
                                   f"(need {min_steps})")
    title = steps.get("title")
    return Sequence(str(record["id"]), prompts, times, paths, video if isinstance(video, str) else None,
                    title if isinstance(title, str) else None)


def load_frames(sequence: Sequence) -> list[np.ndarray]:
    """RGB frames of the sequence: saved JPEGs where there are, the rest decoded in one pass."""
    frames: list[np.ndarray | None] = [None] * len(sequence.paths)
    to_decode = []
    for i, path in enumerate(sequence.paths):
        if path is None:
            to_decode.append(i)
            continue
        try:
            with Image.open(path) as image:
                frames[i] = np.asarray(image.convert("RGB"))
        except OSError as exc:
            if sequence.video is None:
                raise RecordError("unreadable_frame", f"{path}: cannot read the saved frame ({exc}), "
                                  "and the record has no 'video' to decode it from") from None
            log.warning("%s: cannot read %s (%s); decoding the frame from the video instead",
                        sequence.id, path, exc)
            to_decode.append(i)
    if to_decode:
        decoded = read_frames(sequence.video, [sequence.times[i] for i in to_decode])
        for i, frame in zip(to_decode, decoded):
            frames[i] = frame
    return frames  # type: ignore[return-value]


def _tile(image: Image.Image, height: int) -> Image.Image:
    width, tall = image.size
    if width < tall:
        # Narrower than tall: the loader would skip the strip. Keep the centre square (crop,
        # not pad) so the model never learns black bars; the loader crops landscape tiles so too.
        return ImageOps.fit(image, (height, height), Image.Resampling.BICUBIC)
    return image.resize((max(height, round(width * height / tall)), height), Image.Resampling.BICUBIC)


def make_strip(frames: list[np.ndarray | Image.Image], height: int) -> Image.Image:
    """Frames side by side, each `height` tall and as wide as the narrowest (centre-cropped)."""
    if not frames:
        raise ValueError("a strip needs at least one frame")
    tiles = [_tile(f if isinstance(f, Image.Image) else Image.fromarray(f).convert("RGB"), height)
             for f in frames]
    width = min(tile.width for tile in tiles)
    strip = Image.new("RGB", (width * len(tiles), height))
    for i, tile in enumerate(tiles):
        left = (tile.width - width) // 2
        strip.paste(tile.crop((left, 0, left + width, height)), (i * width, 0))
    return strip


def encode_jpeg(strip: Image.Image, quality: int) -> bytes:
    if strip.width > JPEG_MAX_SIDE:
        raise RecordError("strip_too_wide", f"the strip would be {strip.width} px wide, over JPEG's "
                          f"limit of {JPEG_MAX_SIDE}; export with a smaller --height")
    buffer = io.BytesIO()
    strip.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def _json_bytes(value: Any) -> bytes:
    """UTF-8 JSON; escaped ASCII when a string holds a lone surrogate (still the same value)."""
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value).encode("ascii")


def write_atomic(path: Path, data: bytes) -> None:
    """`data` under `path`, or nothing there: a hidden temporary file, synced, then renamed."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def shard_suffix(shard: Shard | None) -> str:
    return "" if shard is None else f"-{shard.index}-of-{shard.count}"


class ImgseqWriter:
    """`ROOT/imgseqs[-I-of-N]/KEY.jpg` plus the sidecar `KEY.json`, the official layout."""

    def __init__(self, root: Path, shard: Shard | None):
        self.folder = root / f"imgseqs{shard_suffix(shard)}"

    def has_data(self) -> bool:
        return self.folder.is_dir() and any(self.folder.iterdir())

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def prepare_resume(self) -> None:
        """Delete temporary files and strips without a sidecar: a kill interrupted them."""
        if not self.folder.is_dir():
            return
        for entry in self.folder.iterdir():
            orphan = entry.suffix == ".jpg" and not entry.with_suffix(".json").exists()
            if entry.name.endswith(".tmp") or orphan:
                entry.unlink()

    def is_done(self, record_id: str) -> bool:
        return (self.folder / f"{safe_key(record_id)}.json").exists()

    def write(self, sequence: Sequence, jpeg: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        key = safe_key(sequence.id)
        write_atomic(self.folder / f"{key}.jpg", jpeg)
        write_atomic(self.folder / f"{key}.json", _json_bytes(sequence.sidecar()))  # last: marks done

    def close(self) -> None:
        pass


class TarShardWriter:
    """webdataset shards `ROOT/showhowto[-I-of-N]-K.tar` of at most `maxcount` sequences.

    A shard is written as `.tar.tmp` and renamed when closed, so a final name always holds
    a whole tar. A resumed run deletes the `.tar.tmp` a kill left (its sequences are
    redone) and starts new shards after the highest index there.
    """

    def __init__(self, root: Path, shard: Shard | None, maxcount: int):
        self.root, self.maxcount = root, maxcount
        self.prefix = f"showhowto{shard_suffix(shard)}"
        self._pattern = re.compile(rf"{re.escape(self.prefix)}-(\d{{6}})\.tar(\.tmp)?")
        self._done: set[str] = set()
        self._next = 0
        self._file: io.BufferedWriter | None = None
        self._tar: tarfile.TarFile | None = None
        self._count = 0

    def _own_files(self) -> list[tuple[Path, re.Match]]:
        if not self.root.is_dir():
            return []
        return [(p, m) for p in sorted(self.root.iterdir()) if (m := self._pattern.fullmatch(p.name))]

    def has_data(self) -> bool:
        return bool(self._own_files())

    def clear(self) -> None:
        for path, _ in self._own_files():
            path.unlink()

    def prepare_resume(self) -> None:
        for path, match in self._own_files():
            if match.group(2):
                path.unlink()
                continue
            self._next = max(self._next, int(match.group(1)) + 1)
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.name.endswith(".json"):
                        self._done.add(str(json.load(tar.extractfile(member))["id"]))

    def is_done(self, record_id: str) -> bool:
        return record_id in self._done

    def _path(self, index: int) -> Path:
        return self.root / f"{self.prefix}-{index:06d}.tar"

    def write(self, sequence: Sequence, jpeg: bytes) -> None:
        if self._tar is None:
            self.root.mkdir(parents=True, exist_ok=True)
            # Open across calls, until `maxcount` sequences are in: closed by close().
            self._file = open(f"{self._path(self._next)}.tmp", "wb")  # noqa: SIM115
            self._tar = tarfile.open(fileobj=self._file, mode="w")  # noqa: SIM115
        key = safe_key(sequence.id)
        for name, data in ((f"{key}.jpg", jpeg), (f"{key}.json", _json_bytes(sequence.sidecar()))):
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = len(data), 0o644, 0  # reproducible bytes
            self._tar.addfile(member, io.BytesIO(data))
        self._done.add(sequence.id)
        self._count += 1
        if self._count >= self.maxcount:
            self.close()

    def close(self) -> None:
        """Finish the open shard under its final name (only after a run that did not crash)."""
        if self._tar is None or self._file is None:
            return
        self._tar.close()  # writes the end-of-archive blocks; the file stays open
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._file.name, self._path(self._next))
        self._file, self._tar, self._count, self._next = None, None, 0, self._next + 1


class SkippedLog:
    """`ROOT/skipped[-I-of-N].jsonl`: one `{"id", "reason", "detail"}` per record not exported.

    Appended across resumed runs; its ids count as done on resume (as failed records do in
    every vi stage), so no id is listed twice. Delete a line to retry that record.
    """

    def __init__(self, root: Path, shard: Shard | None):
        self.path = root / f"skipped{shard_suffix(shard)}.jsonl"
        self.ids: set[str] = set()

    def has_data(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def prepare_resume(self) -> None:
        if self.path.exists():
            self.ids = recover(self.path)  # cuts a line torn by a kill

    def add(self, record_id: str, skip: Skip) -> None:
        if record_id in self.ids:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = _json_bytes({"id": record_id, "reason": skip.reason, "detail": skip.detail}) + b"\n"
        with open(self.path, "ab") as handle:  # one write of one whole line, as vi's sinks do
            handle.write(line)
        self.ids.add(record_id)


def rebuild_prompts_index(root: Path) -> int:
    """Write `ROOT/prompts.json` from every sidecar under `ROOT/imgseqs*/`; return its size.

    Held under an exclusive lock and scanned inside it, so when shards of an array job
    finish one after another, the last rebuild sees every sidecar: no merge step needed.
    """
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".prompts.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        index: dict[str, list[str]] = {}
        where: dict[str, Path] = {}
        for folder in sorted(p for p in root.glob("imgseqs*") if p.is_dir()):
            for sidecar in sorted(folder.glob("*.json")):
                key = sidecar.stem
                if not sidecar.with_suffix(".jpg").exists():
                    continue
                if key in index:
                    log.warning("sequence %s is in both %s and %s: ShowHowTo's loader would read it "
                                "twice; delete one of the folders", key, where[key], folder)
                    continue
                try:
                    index[key] = json.loads(sidecar.read_bytes())["prompts"]
                except (ValueError, KeyError) as exc:
                    log.warning("%s: not a sidecar (%s); left out of prompts.json", sidecar, exc)
                    continue
                where[key] = folder
        write_atomic(root / "prompts.json", _json_bytes(index))
    return len(index)


def open_export(root: Path, layout: str, shard: Shard | None, *, maxcount: int, resume: bool,
                overwrite: bool) -> tuple[ImgseqWriter | TarShardWriter, SkippedLog]:
    """The writer and skipped-list of this layout and shard, cleared, resumed or new.

    Only this shard's files are looked at, so the shards of an array job can start at once
    in the same ROOT without refusing each other.
    """
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    if layout not in LAYOUTS:
        raise ValueError(f"--format must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    writer = ImgseqWriter(root, shard) if layout == "showhowto" else TarShardWriter(root, shard, maxcount)
    skipped = SkippedLog(root, shard)
    if overwrite:
        writer.clear()
        skipped.clear()
    elif resume:
        writer.prepare_resume()
        skipped.prepare_resume()
    elif writer.has_data() or skipped.has_data():
        which = f" (shard {shard})" if shard is not None else ""
        raise FileExistsError(f"{root} already has a {layout} export{which}; pass --resume to continue "
                              "it or --overwrite to replace it")
    return writer, skipped


@dataclass
class ExportReport:
    exported: int = 0
    too_few_steps: int = 0
    upstream_errors: int = 0
    malformed: int = 0
    failed: int = 0  # frames could not be read
    resumed: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)  # the first few, for stderr

    def count(self, record_id: str, skip: Skip) -> None:
        if skip.reason == TOO_FEW_STEPS:
            self.too_few_steps += 1
            return
        if skip.reason == UPSTREAM_ERROR:
            self.upstream_errors += 1
            return
        if skip.reason == MALFORMED:
            self.malformed += 1
        else:
            self.failed += 1
        if len(self.failures) < MAX_SHOWN_FAILURES:
            self.failures.append(f"{record_id}: {skip.reason}: {skip.detail}")

    @property
    def exit_code(self) -> int:
        return EXIT_RECORDS_FAILED if self.malformed or self.failed else EXIT_OK

    def summary(self) -> str:
        return (f"vi {STAGE}: {self.exported} exported, {self.too_few_steps} skipped (too few aligned "
                f"steps), {self.upstream_errors} skipped (upstream errors), {self.malformed} malformed, "
                f"{self.failed} failed (unreadable frames), {self.resumed} already done (resume) "
                f"in {self.seconds:.1f}s")


def export_records(records: Iterable[Record], writer: ImgseqWriter | TarShardWriter, skipped: SkippedLog,
                   *, height: int, quality: int, min_steps: int, shard: Shard | None = None,
                   on_record: Callable[[], None] = lambda: None) -> ExportReport:
    """Export every record of `shard` not done yet; list each one not exported in `skipped`."""
    report = ExportReport()
    seen: set[str] = set()
    for record in records:
        record_id = str(record["id"])
        if shard is not None and not shard.contains(record_id):
            continue
        if record_id in seen:
            log.warning("id %s appears twice in the input; only its first record is exported", record_id)
            on_record()
            continue
        seen.add(record_id)
        if record_id in skipped.ids or writer.is_done(record_id):
            report.resumed += 1
            on_record()
            continue
        outcome = aligned_sequence(record, min_steps)
        if isinstance(outcome, Sequence):
            try:
                jpeg = encode_jpeg(make_strip(load_frames(outcome), height), quality)
            except RecordError as exc:
                outcome = Skip(exc.kind, exc.message)
            else:
                writer.write(outcome, jpeg)
                report.exported += 1
        if isinstance(outcome, Skip):
            report.count(record_id, outcome)
            skipped.add(record_id, outcome)
        on_record()
    writer.close()
    return report
