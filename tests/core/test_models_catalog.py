"""Model references: the embedded default aliases, `vi models`, and local_weights (paths, hub ids)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import jsonl, run_vi
from vi.core.errors import ModelNotAvailable
from vi.core.models.catalog import CATALOG, local_weights
from vi.core.models.sources import HubRepo, JoinedParts

DEFAULT_ALIASES = ("whisper-tiny.en", "smollm2-135m", "minilm-l6", "efficientnet-lite0")



# --- the embedded default models -------------------------------------------------------------

def _is_ctranslate2_folder(path: Path) -> bool:
    return path.is_dir() and (path / "model.bin").is_file() and (path / "config.json").is_file()


def _is_gguf(path: Path) -> bool:
    if not path.is_file():
        return False
    with open(path, "rb") as handle:
        return handle.read(4) == b"GGUF"


def _is_sentence_transformers_folder(path: Path) -> bool:
    return path.is_dir() and (path / "model.safetensors").is_file()


def _is_torch_state_dict(path: Path) -> bool:
    return path.is_file() and path.suffix == ".pth" and path.stat().st_size > 1_000_000


@pytest.mark.parametrize("alias, role, is_right_kind", [
    ("whisper-tiny.en", "asr", _is_ctranslate2_folder),
    ("smollm2-135m", "llm", _is_gguf),
    ("minilm-l6", "text-embedding", _is_sentence_transformers_folder),
    ("efficientnet-lite0", "image-classifier", _is_torch_state_dict),
])
def test_default_embedded_alias_resolves_to_local_weights_of_its_format(alias, role, is_right_kind):
    path = local_weights(alias, role=role)
    assert path.is_absolute() and path.exists(), path
    assert is_right_kind(path), f"{alias} resolved to {path}, which is not a {CATALOG[alias].format} model"
    assert local_weights(alias) == path  # the role is a check, not part of the lookup


def test_vi_models_json_reports_embedded_defaults_available_and_hub_only_ones_not(tmp_path):
    empty_hub = tmp_path / "hub"
    empty_hub.mkdir()
    done = run_vi("models", "--json", env={"HF_HUB_CACHE": str(empty_hub)}, check=True)
    rows = {row["alias"]: row for row in jsonl(done.stdout)}
    assert set(rows) == set(CATALOG)
    for alias in DEFAULT_ALIASES:
        assert rows[alias]["available"] is True and rows[alias]["embedded"] is True, rows[alias]
    hub_only = [alias for alias, spec in CATALOG.items() if isinstance(spec.source, HubRepo)]
    assert hub_only, "the catalogue lists no hub-only model"
    for alias in hub_only:
        assert rows[alias]["available"] is False and rows[alias]["embedded"] is False, rows[alias]
        assert "hf download" in rows[alias]["install"]
    for alias, spec in CATALOG.items():  # the extras: available exactly when their packages are
        if isinstance(spec.source, JoinedParts):
            assert rows[alias]["available"] is (not spec.source.missing()), rows[alias]



# --- local_weights -------------------------------------------------------------------------------

def test_unknown_alias_is_refused_pointing_to_vi_models():
    with pytest.raises(ModelNotAvailable, match=r"unknown model 'no-such-model'.*`vi models`"):
        local_weights("no-such-model")


def test_role_mismatch_is_refused():
    with pytest.raises(ModelNotAvailable) as caught:
        local_weights("minilm-l6", role="asr")
    message = str(caught.value)
    assert "minilm-l6" in message and "text-embedding" in message and "asr" in message
    assert local_weights("whisper-tiny.en", role="asr").is_dir()


def test_existing_local_path_is_returned_as_is(tmp_path):
    folder = tmp_path / "my-ct2-model"
    folder.mkdir()
    weights = tmp_path / "weights.gguf"
    weights.write_bytes(b"GGUF")
    assert local_weights(folder) == folder
    assert local_weights(str(weights)) == weights
    assert local_weights(str(folder), role="asr") == folder  # a path has no role to check


RESOLVE_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from vi.core.errors import ModelNotAvailable
    from vi.core.models.catalog import local_weights

    start = time.perf_counter()
    try:
        out = {"path": str(local_weights(sys.argv[1]))}
    except ModelNotAvailable as exc:
        out = {"error": str(exc)}
    out["seconds"] = time.perf_counter() - start
    print(json.dumps(out))
""")


def resolve_in_subprocess(ref: str, hub_cache: Path, offline: bool) -> dict:
    """local_weights in a fresh interpreter: huggingface_hub reads its env at import."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "HF_HOME", "VI_ALLOW_DOWNLOAD", "HF_HUB_CACHE")}
    env["HF_HUB_CACHE"] = str(hub_cache)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run([sys.executable, "-c", RESOLVE_SCRIPT, ref], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE=1", "HF_HUB_OFFLINE-unset"])
def test_hub_id_not_in_the_cache_fails_at_once_saying_how_to_get_it(tmp_path, offline):
    empty = tmp_path / "hub"
    empty.mkdir()
    result = resolve_in_subprocess("someorg/not-a-model", empty, offline)
    assert "error" in result, f"resolved to {result.get('path')}"
    assert result["seconds"] < 5, f"took {result['seconds']:.1f}s: something waited on a network"
    message = result["error"]
    assert "someorg/not-a-model" in message and "hf download someorg/not-a-model" in message
    assert str(empty) in message  # says which cache it looked in


def test_hub_id_in_the_local_cache_resolves_to_its_snapshot(tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--fakeorg--fake-model"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "fake"}\n')
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for offline in (True, False):
        result = resolve_in_subprocess("fakeorg/fake-model", tmp_path / "hub", offline)
        assert result.get("path") == str(snapshot), result
        assert result["seconds"] < 5




def test_vi_models_table_shows_every_alias_and_install_command_whole_in_80_columns():
    from vi.core.models import CATALOG

    done = run_vi("models", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    table_aliases = {line.split("│")[1].strip() for line in lines if line.startswith("│")}
    for spec in CATALOG.values():
        assert spec.alias in table_aliases  # one line each, never cut with "…"
        if not spec.available():  # the command on one unwrapped line, brackets kept ([models-extra])
            assert f"  {spec.alias}: {spec.install}" in lines
