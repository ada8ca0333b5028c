"""Thumbnails for `vi view`: each image (or video frame) a record names, made once and reused.

A thumbnail's file name hashes what it shows: the source's resolved path, its size and mtime,
the time for a video frame, and the box it fits. A re-run finds the files it already made and
makes only the new ones; an edited source gets a new name, never a stale picture.

Requests are collected while the records are read (`image`, `video_frame` return the names at
once) and made together by `make_missing`: images on a thread pool (PIL decodes and resizes
outside the GIL), video frames one video at a time, each video decoded once for all its times.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

THUMBS = "thumbs"
FRAME_BOX = (320, 200)   # one frame, one step image
STRIP_BOX = (1600, 200)  # a horizontal strip of frames


@dataclass
class Picture:
    """What a block shows for one image: the thumbnail (relative to the report), a link to the
    original, or why there is none."""
    thumb: str | None = None
    href: str | None = None
    missing: str | None = None

    def as_json(self) -> dict:
        return {k: v for k, v in (("thumb", self.thumb), ("href", self.href), ("missing", self.missing)) if v}


@dataclass
class Thumbnails:
    out: Path                       # the report folder
    roots: list[Path] = field(default_factory=list)  # where relative paths may be found, in order
    quality: int = 85
    _images: dict[str, tuple[Path, tuple[int, int]]] = field(default_factory=dict)
    _frames: dict[Path, dict[float, tuple[str, tuple[int, int]]]] = field(default_factory=dict)
    made: int = 0
    reused: int = 0
    failed: list[str] = field(default_factory=list)

    def resolve(self, path: str, roots: list[Path] = ()) -> Path | None:
        """The file `path` names: as given (absolute, or from the working folder), else under
        the record file's folder and the --media-root folders."""
        candidate = Path(path).expanduser()
        if candidate.is_file():
            return candidate.resolve()
        if not candidate.is_absolute():
            for root in [*roots, *self.roots]:
                if (root / candidate).is_file():
                    return (root / candidate).resolve()
        return None

    def _href(self, source: Path) -> str:
        return Path(os.path.relpath(source, self.out.resolve())).as_posix()

    def _name(self, source: Path, box: tuple[int, int], extra: str = "") -> str:
        stat = source.stat()
        key = f"{source}|{stat.st_size}|{stat.st_mtime_ns}|{box}|{extra}"
        return f"{THUMBS}/{hashlib.sha1(key.encode('utf-8', 'surrogatepass')).hexdigest()[:20]}.jpg"

    def image(self, path, roots: list[Path] = (), box: tuple[int, int] = FRAME_BOX) -> Picture:
        if not isinstance(path, str) or not path:
            return Picture(missing="no image path")
        source = self.resolve(path, roots)
        if source is None:
            return Picture(missing=f"not found: {path}")
        name = self._name(source, box)
        self._images.setdefault(name, (source, box))
        return Picture(thumb=name, href=self._href(source))

    def video_frame(self, video, time, roots: list[Path] = (), box: tuple[int, int] = FRAME_BOX) -> Picture:
        if not isinstance(video, str) or not video:
            return Picture(missing="no video path")
        if isinstance(time, bool) or not isinstance(time, (int, float)):
            return Picture(missing="no frame time")
        source = self.resolve(video, roots)
        if source is None:
            return Picture(missing=f"not found: {video}")
        name = self._name(source, box, f"{float(time):.3f}")
        self._frames.setdefault(source, {}).setdefault(round(float(time), 3), (name, box))
        return Picture(thumb=name, href=self._href(source))

    def make_missing(self, workers: int = 2) -> None:
        """Make every requested thumbnail that is not on disk yet."""
        (self.out / THUMBS).mkdir(parents=True, exist_ok=True)
        todo = [(name, src, box) for name, (src, box) in self._images.items() if not (self.out / name).is_file()]
        self.reused += len(self._images) - len(todo)
        with ThreadPoolExecutor(max(1, workers)) as pool:
            for name, ok in zip([t[0] for t in todo], pool.map(lambda t: self._make_image(*t), todo)):
                self._count(name, ok)
        for video, times in self._frames.items():
            wanted = {t: nb for t, nb in times.items() if not (self.out / nb[0]).is_file()}
            self.reused += len(times) - len(wanted)
            if wanted:
                self._make_frames(video, wanted)

    def _count(self, name: str, error: str | None) -> None:
        if error is None:
            self.made += 1
        else:
            self.failed.append(f"{name}: {error}")

    def _make_image(self, name: str, source: Path, box: tuple[int, int]) -> str | None:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(source) as image:
                image.draft("RGB", box)  # JPEG: decode at a reduced scale, much faster
                self._save(image.convert("RGB"), name, box)
        except (OSError, UnidentifiedImageError, ValueError) as exc:
            return f"{source}: {exc}"
        return None

    def _make_frames(self, video: Path, wanted: dict[float, tuple[str, tuple[int, int]]]) -> None:
        from PIL import Image

        from vi.core.errors import RecordError
        from vi.core.media import read_frames

        times = sorted(wanted)
        try:
            frames = read_frames(video, times)
        except RecordError as exc:
            for t in times:
                self._count(wanted[t][0], exc.message)
            return
        for t, frame in zip(times, frames):
            name, box = wanted[t]
            self._save(Image.fromarray(frame), name, box)
            self._count(name, None)

    def _save(self, image, name: str, box: tuple[int, int]) -> None:
        image.thumbnail(box)
        target = self.out / name
        part = target.with_suffix(".part")
        image.save(part, "JPEG", quality=self.quality)
        part.replace(target)  # a killed run never leaves half a thumbnail that the next one reuses
