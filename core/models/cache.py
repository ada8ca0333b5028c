"""Load each model once per process, on first use, however many records flow."""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
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
            load_counts[key] = load_counts.get(key, 0) + 1
            try:
                with _collector_paused():
                    seed_libraries()
                    _loaded[key] = build()
            except Exception as exc:
                _failed[key] = exc
                raise
        return _loaded[key]


@contextmanager
def _collector_paused():
    """Pause Python's cyclic garbage collector while a model is built, then freeze what it built.

    A build imports torch, transformers and the like and reads weights: millions of objects, all
    long-lived, and almost no cyclic garbage. With the collector running, its full passes over that
    growing heap are wasted work, during the imports and again after them, when the first
    collections find millions of objects not yet moved to the oldest generation. Freezing moves
    them out of every later collection, which then scans only the records' own garbage. Measured on
    `vi transcribe` of the 123 s talk, fresh processes (medians of 3): 19.6 s with the collector
    running, 16.9 s paused during the build only, 15.0 s paused and frozen. The cost: a cycle that
    was garbage at the freeze is never collected (the objects a build leaves are few).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.enable()


def clear() -> None:
    with _lock:
        _loaded.clear()
        _failed.clear()
