"""The windows `vi caption-frames` asks a sequence in, and the sequence's frames as images.

`plan_windows`: --window full is the whole sequence, 2 to max_frames frames (ProgressCaptioner is trained on
2 to 6 and degrades beyond; a longer or a 1-frame sequence is an error record that says what to use instead);
--window N is N-frame sliding windows at stride 1 (a sequence of at most N frames is one window); 1 is each
frame alone. `assign`: frame t's caption comes from the window ending at t (with 2: (v_{t-1}, v_t)), frames
before the first window's end from the first window (with 2: frame 0 from (v0, v1)); keep_both adds every
other window holding the frame (with 2: (v_t, v_{t+1})), after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vi.core.errors import RecordError

if TYPE_CHECKING:
    import numpy as np

# --- windows ------------------------------------------------------------------------------------

Window = list[int]  # indices into the record's frames, in order


def plan_windows(n: int, size: int | None, max_frames: int, record_id: object) -> list[Window]:
    """The windows a sequence of n frames is asked in (see the module docstring)."""
    if size is None:
        if n < 2:
            raise RecordError("too_few_frames", f"record {record_id}: {n} frame; --window full captions a sequence "
                              f"of 2 to {max_frames} frames: use --window 1 to caption single images")
        if n > max_frames:
            raise RecordError("too_many_frames", f"record {record_id}: {n} frames; --window full takes 2 to "
                              f"{max_frames} (ProgressCaptioner degrades beyond 6): use --window 2 (a sliding "
                              "window) or select fewer frames (vi frames --select kmeans|window)")
        return [list(range(n))]
    if n <= size:
        return [list(range(n))]
    return [list(range(k, k + size)) for k in range(n - size + 1)]


def assign(windows: list[Window], n: int, keep_both: bool) -> list[tuple[int, int]]:
    """(frame, window index) per caption kept, by frame: first the window that ends at the frame (or the
    first window, for frames before its end), then, with keep_both, every other window holding the frame."""
    out = []
    for frame in range(n):
        holding = [w for w, window in enumerate(windows) if frame in window]
        ending = [w for w in holding if windows[w][-1] == frame]
        primary = ending[0] if ending else holding[0]
        out.append((frame, primary))
        if keep_both:
            out += [(frame, w) for w in holding if w != primary]
    return out


# --- a record's frames ------------------------------------------------------------------------

def frame_paths(record: dict) -> list[str]:
    frames = record.get("frames")
    if not isinstance(frames, list) or not frames:
        raise RecordError("missing_field", f"record {record['id']}: no 'frames' list of {{time, path}}; vi frames "
                          "writes it")
    paths = [f.get("path") if isinstance(f, dict) else f for f in frames]
    for i, path in enumerate(paths):
        if not isinstance(path, str) or not path:
            raise RecordError("missing_field", f"record {record['id']}: frames[{i}] has no 'path'")
    return paths


def load_frames(record: dict, paths: list[str]) -> list[np.ndarray]:
    import numpy as np
    from PIL import Image, UnidentifiedImageError
    from vi.core.media import check_readable

    out = []
    for i, path in enumerate(paths):
        try:
            check_readable(path)
            with Image.open(path) as image:
                out.append(np.array(image.convert("RGB")))  # writable: torch warns on read-only arrays
        except RecordError as exc:
            raise RecordError(exc.kind, f"record {record['id']}: frames[{i}]: {exc.message}") from None
        except (UnidentifiedImageError, OSError) as exc:
            raise RecordError("unreadable_media", f"record {record['id']}: frames[{i}] {path}: not an image "
                              f"PIL can read ({exc})") from None
    return out
