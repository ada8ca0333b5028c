"""ShowHowTo sequences as the generator reads them: the dataset `vi export showhowto` writes (the
official `prompts.json` + `imgseqs*/KEY.jpg` strips, or the webdataset tars), and the release's
prompt file (`image|prompt for the input frame|prompt for step 1|...`).

A sequence is m frames with m prompts; the first frame is the scene the user gives (the input
image I_0, its prompt tau_0 a free-form description of it) and frames 1..m-1 are the steps. The
strip is cut as ShowHowTo's loader cuts it (soCzech/ShowHowTo, `video_dataset.py`): m equal-width
tiles, each centre-cropped to a square.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # PIL is imported where a strip is read: vi generate --help goes without
    from PIL import Image

PROMPT_FILE_SEPARATOR = "|"


@dataclass
class DatasetSequence:
    """One strip of a ShowHowTo dataset: `key` names its files, `id` is the record it came from."""

    key: str
    prompts: list[str]
    strip: Path | bytes  # a JPEG file, or its bytes from a tar
    id: str = ""
    title: str | None = None
    video: str | None = None
    extra: dict = field(default_factory=dict)

    def image(self) -> Image.Image:
        from PIL import Image

        source = self.strip if isinstance(self.strip, Path) else io.BytesIO(self.strip)
        with Image.open(source) as image:
            return image.convert("RGB")

    def tiles(self, size: int | None = None) -> list[Image.Image]:
        """The strip's frames, one per prompt, each a centre-cropped square (`size` px when given)."""
        return cut_strip(self.image(), len(self.prompts), size)


def cut_strip(strip: Image.Image, count: int, size: int | None = None) -> list[Image.Image]:
    """ShowHowTo's loader: `count` equal-width tiles, each centre-cropped to a square."""
    from PIL import Image

    if count < 1:
        raise ValueError("a strip holds at least one frame")
    width = strip.width // count
    if width < 1:
        raise ValueError(f"a strip {strip.width} px wide cannot hold {count} frames")
    side = min(width, strip.height)
    tiles = []
    for i in range(count):
        left = i * width + (width - side) // 2
        top = (strip.height - side) // 2
        tile = strip.crop((left, top, left + side, top + side))
        tiles.append(tile.resize((size, size), Image.BICUBIC) if size and side != size else tile)
    return tiles


def read_dataset(root: Path) -> list[DatasetSequence]:
    """Every sequence under a ShowHowTo dataset folder, in key order: the official layout
    (`prompts.json` + `imgseqs*/KEY.jpg`, with vi's `KEY.json` sidecars when present) and vi's
    webdataset shards (`*.tar` holding `KEY.jpg` + `KEY.json`)."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: not a folder; give the --out folder of vi export showhowto")
    found: dict[str, DatasetSequence] = {}
    index = root / "prompts.json"
    prompts = json.loads(index.read_text()) if index.is_file() else {}
    for folder in sorted(p for p in root.glob("imgseqs*") if p.is_dir()):
        for strip in sorted(folder.glob("*.jpg")):
            sidecar = strip.with_suffix(".json")
            meta = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
            texts = meta.get("prompts") or prompts.get(strip.stem)
            if texts and strip.stem not in found:
                found[strip.stem] = _sequence(strip.stem, texts, strip, meta)
    for shard in sorted(root.glob("*.tar")):
        for key, jpeg, meta in _tar_members(shard):
            if key not in found and meta.get("prompts"):
                found[key] = _sequence(key, meta["prompts"], jpeg, meta)
    if not found:
        raise ValueError(f"{root}: no sequences (no imgseqs*/*.jpg listed in prompts.json, no *.tar of "
                         "KEY.jpg + KEY.json); make one with vi export showhowto --out DIR")
    return [found[key] for key in sorted(found)]


def _sequence(key: str, prompts: list[str], strip: Path | bytes, meta: dict) -> DatasetSequence:
    return DatasetSequence(key=key, prompts=[str(p) for p in prompts], strip=strip, id=str(meta.get("id") or key),
                           title=meta.get("title"), video=meta.get("video"))


def _tar_members(path: Path) -> Iterator[tuple[str, bytes, dict]]:
    with tarfile.open(path) as tar:
        members: dict[str, dict[str, bytes]] = {}
        for member in tar.getmembers():
            if member.isfile() and "." in member.name:
                key, ext = member.name.split(".", 1)
                members.setdefault(key, {})[ext] = tar.extractfile(member).read()
    for key, parts in members.items():
        if "jpg" in parts and "json" in parts:
            yield key, parts["jpg"], json.loads(parts["json"])


def parse_prompt_file_line(line: str, base: Path, delimiter: str = PROMPT_FILE_SEPARATOR) -> dict | None:
    """A line of the release's prompt file as a `vi generate` record (None for comments and blanks), read
    as predict.py reads it: `image<d>prompt for the input frame<d>prompt for step 1<d>...`, each prompt
    stripped of spaces and double quotes; a relative image path is read from `base`."""
    if not line.strip() or line.startswith("#"):
        return None
    # a line without the delimiter is a record without prompts: its own error record (too_few_prompts)
    image, rest = line.split(delimiter, 1) if delimiter in line else (line, None)
    image = image.strip()
    path = Path(image)
    if not path.is_absolute():
        path = base / path
    return {"id": Path(image).stem, "image": str(path),
            "prompts": [p.strip().strip('"') for p in rest.split(delimiter)] if rest is not None else []}
