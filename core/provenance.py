"""A stage's configuration fingerprint: what made a record, written into the record.

Every record a stage finishes (done or failed by it) gets `provenance[STAGE]`: the vi version
and the value of each of the stage's options that changes what it writes, read off its config
dataclass (vi.core.config), so the list is never written out a second time. `--resume` compares
the fingerprint of the records already in --output with the run's own and refuses a different
one (exit 2) unless --allow-mixed: a file of one configuration stays one.

Values are normalised so that what does not change the output does not change the fingerprint:
- options that only place or pace the work (device, threads, concurrency, batch sizes) are left
  out (PLACEMENT, or `fingerprint=False` in a field's metadata);
- a value naming an existing file (a prompt file, a .gguf) is its content's sha256, not its path,
  so an array whose nodes mount the data elsewhere still resumes, and an edited prompt refuses;
- a server model `openai:MODEL@URL` is `openai:MODEL`: the server's address moves between runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from vi.core.config import cli_fields

FIELD = "provenance"
PLACEMENT = frozenset({"device", "threads", "concurrency", "batch_size", "chunk_size", "workers"})
WHOLE_HASH_BYTES = 64 << 20  # a file up to this size is hashed whole (prompts, small models)
SAMPLE_BYTES = 4 << 20  # a larger one (a multi-GB .gguf) by its size and three samples: reading
# 8 GB at every start would cost a minute; a different model file differs in these bytes too
_SERVER = re.compile(r"^(openai:.+)@[A-Za-z][A-Za-z0-9+.-]*://.*$")


def file_digest(path: Path) -> str:
    size = path.stat().st_size
    if size <= WHOLE_HASH_BYTES:
        from vi.core.models.sources import sha256_of  # the models' package: only for a file's fingerprint

        return f"sha256:{sha256_of(path)[:16]}"
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        digest.update(str(size).encode())
        for offset in (0, size // 2, size - SAMPLE_BYTES):
            handle.seek(offset)
            digest.update(handle.read(SAMPLE_BYTES))
    return f"sha256-sampled:{digest.hexdigest()[:16]}"


def _value(value: Any) -> Any:
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _value(v) for k, v in value.items()}
    text = str(getattr(value, "name", value)) if not isinstance(value, (str, os.PathLike)) else os.fspath(value)
    server = _SERVER.match(text)
    if server:
        return server.group(1)
    path = Path(text.split(":", 1)[1] if text.startswith(("llama.cpp:", "transformers:")) else text)
    try:
        if len(text) < 4096 and path.is_file():
            return file_digest(path)
    except OSError:
        pass
    return text


def fingerprint(config: Any) -> dict[str, Any]:
    """The fingerprint of a stage's config (None: a stage without options): the vi version, then its
    output-changing options by field name. JSON-ready."""
    from vi import __version__

    out: dict[str, Any] = {"vi": __version__}
    if config is None or not dataclasses.is_dataclass(config):
        return out
    for field in cli_fields(type(config)):
        if field.name in PLACEMENT or field.metadata.get("fingerprint") is False:
            continue
        out[field.name] = _value(getattr(config, field.name))
    return out


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`name: old -> new` for each entry that differs, for the refusal's message."""
    names = [*old, *(n for n in new if n not in old)]
    show = lambda d, n: json.dumps(d[n], ensure_ascii=False) if n in d else "(absent)"  # noqa: E731
    return [f"{n}: {show(old, n)} -> {show(new, n)}" for n in names if old.get(n, ...) != new.get(n, ...)]
