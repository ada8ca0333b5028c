"""`vi export showhowto`: step records in, a ShowHowTo training dataset out.

ShowHowTo's loader (soCzech/ShowHowTo, `video_dataset.py`) reads `ROOT/prompts.json`, a map
from sequence id to its per-frame prompts, and globs `ROOT/imgseqs*/*.jpg`: one horizontal
strip per sequence, split into `len(prompts)` equal-width tiles, each centre-cropped to a
square. So every tile here has the strip's height and one common width that is never less
than that height.

A sequence is a record's steps that have a frame, in order. The export is exactly-once
under kills and resumes: every file is written to a hidden temporary name and renamed, and
a sequence counts as done only once its last file (the sidecar json, or the tar holding
it) has its final name (the writers are in `export_writers`).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.config import check_choice, option
from vi.core.errors import EXIT_OK, EXIT_RECORDS_FAILED, RecordError
from vi.core.locks import FOLDER_LOCK, lock_folder
from vi.core.media import read_frames
from vi.core.progress import log
from vi.core.records import REJECTED, Record, finite_number, has_errors
from vi.core.sharding import Shard
from vi.pipelines.showhowto.export_writers import (  # noqa: F401 (re-exported for vi.cli.export)
    ImgseqWriter, Sequence, Skip, SkippedLog, TarShardWriter, rebuild_prompts_index, safe_key, shard_suffix)

if TYPE_CHECKING:  # numpy and PIL are imported where pixels are made: --help goes without them
    import numpy as np
    from PIL import Image

STAGE = "export showhowto"
TOO_FEW_STEPS, UPSTREAM_ERROR, MALFORMED = "too_few_steps", "upstream_error", "malformed"
JPEG_MAX_SIDE = 65_500  # libjpeg refuses images wider than 65535 px
MAX_SHOWN_FAILURES = 10
LAYOUTS = ("showhowto", "webdataset")
Layout = Enum("Layout", [(name, name) for name in LAYOUTS], type=str)  # --format's choices
DATASET_PANEL = "Dataset"


@dataclass(frozen=True, kw_only=True)
class ExportConfig:
    """The options of `vi export showhowto` that shape the dataset (the records it reads, the shard and
    --resume are the command's)."""

    out: Path = option(panel=DATASET_PANEL, show_default=False, help="The dataset folder; created if needed.")
    layout: str = option(
        "showhowto", flag="--format", cli_type=Layout, parse=lambda layout: Layout(layout).value, panel=DATASET_PANEL,
        help="showhowto: the layout of ShowHowTo's own loader; webdataset: tar shards.")
    height: int = option(256, min=16, panel=DATASET_PANEL, help=(
        "Tile height in pixels; tiles keep their aspect ratio and are never narrower than "
        "tall (a portrait frame is centre-cropped to a square)."))
    quality: int = option(95, min=1, max=100, panel=DATASET_PANEL, help="JPEG quality of the strips.")
    maxcount: int = option(1000, min=1, panel=DATASET_PANEL, help="webdataset: sequences per tar shard.")
    min_steps: int = option(2, min=1, panel=DATASET_PANEL, help="Skip a video with fewer steps that have a frame.")


def aligned_sequence(record: Record, min_steps: int = ExportConfig.min_steps) -> Sequence | Skip:
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
    import numpy as np
    from PIL import Image

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
    from PIL import Image, ImageOps

    width, tall = image.size
    if width < tall:
        # Narrower than tall: the loader would skip the strip. Keep the centre square (crop,
        # not pad) so the model never learns black bars; the loader crops landscape tiles so too.
        return ImageOps.fit(image, (height, height), Image.Resampling.BICUBIC)
    return image.resize((max(height, round(width * height / tall)), height), Image.Resampling.BICUBIC)


def make_strip(frames: list[np.ndarray | Image.Image], height: int) -> Image.Image:
    """Frames side by side, each `height` tall and as wide as the narrowest (centre-cropped)."""
    from PIL import Image

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


_HELD_LOCKS: dict[Path, int] = {}  # lock file -> its fd, held until this process ends


def hold_export_lock(root: Path, shard: Shard | None) -> None:
    """One writer per shard of an export folder: a second `vi export` on the same ROOT and
    shard (a requeued array task while the first still runs) stops at once, exit 2. Each
    shard locks its own file, so an array job's shards still share ROOT."""
    name = f"{FOLDER_LOCK}{shard_suffix(shard)}"
    key = (root / name).resolve()
    if key not in _HELD_LOCKS:  # this process holds it already (a second call in the same run)
        _HELD_LOCKS[key] = lock_folder(root, "--out", name=name)


def open_export(root: Path, layout: str, shard: Shard | None, *, maxcount: int, resume: bool,
                overwrite: bool) -> tuple[ImgseqWriter | TarShardWriter, SkippedLog]:
    """The writer and skipped-list of this layout and shard, cleared, resumed or new.

    Only this shard's files are looked at, so the shards of an array job can start at once
    in the same ROOT without refusing each other.
    """
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    check_choice("--format", layout, LAYOUTS)
    hold_export_lock(root, shard)
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
