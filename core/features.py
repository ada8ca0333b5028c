"""A feature store: tensors keyed by record id, in safetensors chunks, written once and read many times.

Layout of a store folder:
- `encoder.json`: what made the tensors (the encoder's `info`), written by the first writer. A store holds
  the tensors of one encoder: a writer whose info disagrees with it on any key both share is refused.
- `chunk-<hash of its ids>.safetensors`: one tensor per id (keys = ids); the file's metadata holds the ids
  in order (`ids`, JSON) and the encoder's name (`encoder`). A chunk is written under a temporary name,
  synced, then renamed: concurrent writers (Slurm array ranks) never collide, and a kill leaves either
  the whole chunk or none of it.

An id may sit in two chunks (encoded again after a kill, or with --overwrite-features): the copy in the
latest chunk counts, latest by modification time, then by name. Reading opens only the safetensors
headers to index the ids; tensors are read (memory-mapped) when asked for.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from vi.core.config import check_choice
from vi.core.errors import SetupError

INFO_FILE = "encoder.json"
CHUNK_PATTERN = "chunk-*.safetensors"
STORE_DTYPES = ("float16", "bfloat16", "float32")
MAX_OPEN_FILES = 32  # memory maps kept open between reads; a store may have thousands of chunks


def read_info(store: str | Path) -> dict | None:
    """The store's encoder.json, or None where nothing was written to it yet."""
    path = Path(store) / INFO_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def check_info(store: str | Path, info: dict) -> None:
    """Refuse `info` where the store already holds tensors of another encoder (a SetupError naming both)."""
    found = read_info(store)
    if found is not None:
        _refuse_other(store, found, info)


def differing_keys(found: dict, expected: dict) -> list[str]:
    """The keys two encoder infos both have and disagree on: tokens of one are not tokens of the other."""
    return sorted(k for k in set(found) & set(expected) if found[k] != expected[k])


def _refuse_other(store: str | Path, found: dict, info: dict) -> None:
    differ = differing_keys(found, info)
    if differ:
        def show(d: dict) -> str:
            return ", ".join(f"{k}={d[k]!r}" for k in differ)
        raise SetupError(f"feature store {store} holds features of {found.get('encoder')!r} ({show(found)}), "
                         f"not of {info.get('encoder')!r} ({show(info)}); one store holds one encoder's features: "
                         "give another --store, or the same encoder options")


def claim_store(store: str | Path, info: dict) -> None:
    """Write encoder.json where it is absent, else check it; safe when several writers start at once."""
    folder = Path(store)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / INFO_FILE
    if not target.exists():
        tmp = folder / f".{INFO_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        try:
            os.link(tmp, target)  # atomic and exclusive: of two writers racing, one wins, the other checks
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not target.exists():
                os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    check_info(folder, info)


def chunk_name(ids: Iterable[str]) -> str:
    digest = hashlib.sha1("\n".join(ids).encode("utf-8")).hexdigest()[:20]
    return f"chunk-{digest}.safetensors"


class FeatureWriter:
    """Writes chunks into `store`, after claiming it for `info` (see `claim_store`)."""

    def __init__(self, store: str | Path, info: dict, dtype: str = "float16"):
        check_choice("--store-dtype", dtype, STORE_DTYPES)
        self.store, self.info, self.dtype = Path(store), info, dtype
        claim_store(self.store, info)

    def write(self, tensors: dict[str, object]) -> str:
        """Write {id: tensor} as one chunk; returns the chunk's file name once it is complete on disk."""
        import torch
        from safetensors.torch import save

        ids = [str(i) for i in tensors]
        dtype = getattr(torch, self.dtype)
        data = {str(i): t.detach().to("cpu", dtype).contiguous() for i, t in tensors.items()}
        metadata = {"ids": json.dumps(ids), "encoder": str(self.info.get("encoder", ""))}
        name = chunk_name(ids)
        tmp = self.store / f".{name}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as handle:
                handle.write(save(data, metadata=metadata))
                handle.flush()
                os.fsync(handle.fileno())  # the rename must not publish a chunk a crash could still tear
            os.replace(tmp, self.store / name)
        finally:
            tmp.unlink(missing_ok=True)
        return name


class FeatureStore:
    """Read-only view over one store or several (ids of later stores, and later chunks, win)."""

    def __init__(self, paths: str | Path | Iterable[str | Path]):
        paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
        self.paths = [Path(p) for p in paths]
        missing = [str(p) for p in self.paths if not p.is_dir()]
        if missing:
            raise ValueError(f"feature store {', '.join(missing)}: no such folder")
        self._index: dict[str, Path] | None = None
        self._open: OrderedDict[Path, object] = OrderedDict()

    @property
    def info(self) -> dict:
        """The stores' encoder.json (they must agree); {} where nothing was written yet."""
        found = [(p, i) for p, i in ((p, read_info(p)) for p in self.paths) if i is not None]
        for path, other in found[1:]:
            _refuse_other(path, other, found[0][1])
        return found[0][1] if found else {}

    def _chunks(self) -> list[Path]:
        files = [f for p in self.paths for f in p.glob(CHUNK_PATTERN)]
        return sorted(files, key=lambda f: (f.stat().st_mtime_ns, f.name))

    @property
    def index(self) -> dict[str, Path]:
        if self._index is None:
            index: dict[str, Path] = {}
            for chunk in self._chunks():  # oldest first: a later chunk's copy replaces an earlier one
                index.update(dict.fromkeys(self._handle(chunk).keys(), chunk))
            self._index = index
        return self._index

    def _handle(self, chunk: Path):
        from safetensors import safe_open

        handle = self._open.pop(chunk, None) or safe_open(str(chunk), framework="pt")
        self._open[chunk] = handle  # most recently used last
        while len(self._open) > MAX_OPEN_FILES:
            self._open.popitem(last=False)
        return handle

    def __contains__(self, clip_id: object) -> bool:
        return str(clip_id) in self.index

    def __len__(self) -> int:
        return len(self.index)

    def ids(self) -> list[str]:
        return list(self.index)

    def missing(self, ids: Iterable[object]) -> list[str]:
        return [str(i) for i in ids if str(i) not in self.index]

    def file(self, clip_id: object) -> Path:
        try:
            return self.index[str(clip_id)]
        except KeyError:
            raise KeyError(f"no features of {clip_id!r} in {', '.join(map(str, self.paths))}") from None

    def shape(self, clip_id: object) -> tuple[int, ...]:
        return tuple(self._handle(self.file(clip_id)).get_slice(str(clip_id)).get_shape())

    def get(self, clip_id: object, dtype=None):
        """The tensor of `clip_id`, as float32 unless `dtype` (a torch dtype) says otherwise."""
        import torch

        tensor = self._handle(self.file(clip_id)).get_tensor(str(clip_id))
        return tensor.to(torch.float32 if dtype is None else dtype)

    def get_many(self, ids: Iterable[object], dtype=None) -> list:
        return [self.get(i, dtype) for i in ids]
