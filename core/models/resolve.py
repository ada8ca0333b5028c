"""One function from a model reference to local weights: alias, path, or hub id."""

from __future__ import annotations

import re
from pathlib import Path

from vi.core.errors import ModelNotAvailable
from vi.core.models.catalog import CATALOG
from vi.core.models.sources import hub_path

_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def _a(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def resolve_model(ref: str | Path, role: str | None = None) -> Path:
    """Local path of the weights that `ref` names.

    `ref` is, in this order: an alias from `vi models`; an existing file or folder; a hub id
    `org/name` present in the local Hugging Face cache. Anything else is a ModelNotAvailable
    naming the model and how to provide it, raised at once: nothing here waits on a network.
    """
    text = str(ref)
    spec = CATALOG.get(text)
    if spec is not None:
        if role is not None and spec.role != role:
            raise ModelNotAvailable(f"model {text!r} is {_a(spec.role)} model, not {_a(role)} "
                                    f"model; `vi models` lists the {role} models")
        try:
            return spec.source.locate(text)
        except ModelNotAvailable as exc:
            raise ModelNotAvailable(f"{exc}. To get it: {spec.install}") from None
    path = Path(text).expanduser()
    if path.exists():
        return path
    if _HUB_ID.match(text) and not text.startswith((".", "/")):
        return hub_path(text)
    raise ModelNotAvailable(
        f"unknown model {text!r}: not an alias (run `vi models`), not an existing path, "
        "and not a hub id of the form org/name")
