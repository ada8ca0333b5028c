"""Load each model once per process, on first use, however many records flow."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

_loaded: dict[Hashable, Any] = {}
_lock = threading.Lock()
load_counts: dict[Hashable, int] = {}  # how often each key was built: tests assert on it


def load_once(key: Hashable, build: Callable[[], T]) -> T:
    """Return the model stored under `key`, building it with `build()` the first time."""
    if key in _loaded:
        return _loaded[key]
    with _lock:
        if key not in _loaded:
            _loaded[key] = build()
            load_counts[key] = load_counts.get(key, 0) + 1
        return _loaded[key]


def clear() -> None:
    with _lock:
        _loaded.clear()
