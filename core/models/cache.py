"""Load each model once per process, on first use, however many records flow."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from vi.core.seeding import seed_libraries

T = TypeVar("T")

_loaded: dict[Hashable, Any] = {}
_failed: dict[Hashable, Exception] = {}
_lock = threading.RLock()  # re-entrant: a build may load the models it is made of
load_counts: dict[Hashable, int] = {}  # how often each key was built: tests assert on it


def load_once(key: Hashable, build: Callable[[], T]) -> T:
    """Return the model stored under `key`, building it with `build()` the first time.

    A build that failed is not retried for every record: the same error is raised again.
    """
    if key in _loaded:
        return _loaded[key]
    with _lock:
        if key in _failed:
            raise _failed[key]
        if key not in _loaded:
            seed_libraries()
            load_counts[key] = load_counts.get(key, 0) + 1
            try:
                _loaded[key] = build()
            except Exception as exc:
                _failed[key] = exc
                raise
        return _loaded[key]


def clear() -> None:
    with _lock:
        _loaded.clear()
        _failed.clear()
