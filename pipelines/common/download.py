"""`vi download`: YouTube ids or URLs to video files on disk, the first stage before `vi probe`.

Built on yt-dlp's Python API (one library in this process, not a program per video). Each video
is fetched into its own folder under OUT/.partial/ (yt-dlp resumes a `.part` file a kill left
there) and renamed, whole, to OUT/<h>/<id>.<ext>, where <h> is the first two hex digits of the
id's SHA-1: 256 folders keep each one to a few thousand files at HowTo100M's 1.2 M videos. A
finished id is listed in OUT/archive.txt (`<id>\\t<path under OUT>`) and never fetched again,
whatever run asks for it. A failure is the record's error, with a kind that says what to do
(KINDS); HTTP 429 pauses every download in flight for the server's Retry-After, then tries again.
"""

from __future__ import annotations

import email.utils
import hashlib
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from vi.core.config import option
from vi.core.errors import RecordError
from vi.core.media import VIDEO_EXTENSIONS
from vi.core.paths import safe_name
from vi.core.progress import log
from vi.core.records import (REJECTED, Record, content_id, decode_lines, ensure_id, open_input, parse_json_line,
                             undecodable_line_record)

STAGE = "download"
ARCHIVE = "archive.txt"
PARTIAL = ".partial"
YOUTUBE_ID = re.compile(r"[A-Za-z0-9_-]{11}")
_YOUTUBE_URL = re.compile(r"(?:youtube\.com/(?:watch\?(?:.*&)?v=|shorts/|embed/|live/)|youtu\.be/)"
                          r"([A-Za-z0-9_-]{11})(?![A-Za-z0-9_-])")

# The kinds of failure, each with what the user can do about it (the end of the record's message).
HINTS = {
    "unavailable": "the video is gone or the address is wrong: nothing to retry",
    "private": "its owner made it private: only --cookies of an account it is shared with can fetch it",
    "age_restricted": "YouTube asks to sign in to confirm the viewer's age: pass --cookies FILE of a "
                      "signed-in account",
    "geo_blocked": "it is not offered in this machine's country: fetch it from another region",
    "rate_limited": "the server limits requests: rerun later with --resume --retry-errors rate_limited, "
                    "with a lower --concurrency or --cookies",
    "network": "the connection failed: rerun with --resume --retry-errors network",
    "download_failed": "rerun with -v for yt-dlp's own message",
}
KINDS = tuple(HINTS)
RETRIED = ("rate_limited", "network")  # worth another try in the same run


@dataclass(frozen=True, kw_only=True)
class DownloadConfig:
    """The options of `vi download`, checked when built (a bad one fails before any record)."""

    out: Path = option(show_default=False, help=(
        "The folder the videos go to, as OUT/<2 hex of the id's hash>/<id>.<ext>, with OUT/archive.txt "
        "listing the finished ids; created if needed."))
    max_height: int = option(360, min=1, help=(
        "The tallest video fetched (the papers' scale); the best format under it, with its audio."))
    cookies: Path | None = option(None, help=(
        "A cookies.txt (Netscape format, as browsers' export extensions write it) for videos that ask "
        "to sign in (age-restricted, shared privately)."))
    concurrency: int = option(4, min=1, help="Downloads in flight at once.")
    retries: int = option(3, min=0, help=(
        "Tries again after HTTP 429 or a network failure: after the server's Retry-After, else 2, 4, 8 s."))
    max_wait: float = option(600.0, min=0, help=(
        "The longest Retry-After honoured, in seconds; a server asking for longer fails the record "
        "as rate_limited at once."))

    def __post_init__(self) -> None:
        if self.out.exists() and not self.out.is_dir():
            raise ValueError(f"--out {self.out} exists and is not a folder")
        if self.cookies is not None and not self.cookies.is_file():
            raise ValueError(f"--cookies {self.cookies}: no such file (export it from a signed-in browser)")


# --- what to fetch -------------------------------------------------------------------------

def youtube_id_of(url: str) -> str | None:
    found = _YOUTUBE_URL.search(url)
    return found.group(1) if found else None


def _plain(text: str) -> Record:
    """A line that is not JSON: a YouTube id or a URL."""
    if YOUTUBE_ID.fullmatch(text):
        return {"id": text, "youtube_id": text}
    yid = youtube_id_of(text)
    record = {"id": yid or content_id("url", text), "url": text}
    return {**record, "youtube_id": yid} if yid else record


def read_targets(path: Path | None) -> Iterator[Record]:
    """Records from JSONL, or from a plain list of YouTube ids or URLs (one per line); both may mix."""
    source = open_input(path)
    try:
        for lineno, text, line in decode_lines(source):
            if isinstance(text, UnicodeDecodeError):
                yield undecodable_line_record(STAGE, line, lineno, text)
                continue
            text = text.strip()
            if not text or text.startswith("#"):
                continue
            if not text.startswith("{"):
                yield _plain(text)
                continue
            record = parse_json_line(text, STAGE, lineno)
            if REJECTED not in record and "id" not in record:  # named by what it fetches
                named = record.get("youtube_id") or record.get("url")
                if isinstance(named, str) and named:
                    record = {"id": _plain(named)["id"], **record}
            yield record if REJECTED in record else ensure_id(record, STAGE, lineno)
    finally:
        if path is not None and str(path) != "-":
            source.close()


def target_of(record: Record) -> str:
    """The URL a record asks for: its `url`, else its `youtube_id`, else its `id` as a YouTube id."""
    url = record.get("url")
    if isinstance(url, str) and url.strip():
        return url.strip()
    for key in ("youtube_id", "id"):
        value = record.get(key)
        if isinstance(value, str) and YOUTUBE_ID.fullmatch(value):
            return f"https://www.youtube.com/watch?v={value}"
    raise RecordError("missing_field", f"the record has no 'url' and its 'youtube_id'/'id' "
                      f"({record.get('youtube_id', record.get('id'))!r:.60}) is not an 11-character "
                      "YouTube id; give a 'url' or a 'youtube_id'")


# --- where files go -----------------------------------------------------------------------

def shard_folder(record_id: str) -> str:
    return hashlib.sha1(record_id.encode("utf-8", "surrogatepass")).hexdigest()[:2]


def find_download(root: Path, record_id: str) -> Path | None:
    """The finished video of `record_id` under ROOT: vi download's ROOT/<h>/<id>.<ext>, or ROOT/<id>.<ext>."""
    name = safe_name(record_id)
    for folder in (root / shard_folder(record_id), root):
        for ext in VIDEO_EXTENSIONS:
            candidate = folder / f"{name}{ext}"
            if candidate.is_file():
                return candidate
    return None


_archive_lock = threading.Lock()
_archives: dict[Path, dict[str, str]] = {}  # OUT -> {id: path under OUT}, read once per process


def _listing(root: Path) -> dict[str, str]:
    """OUT/archive.txt as read when this process first looked (held: at HowTo100M's scale a read per
    record would cost more than the downloads); what other processes add is found on disk instead."""
    key = root.resolve()
    if key not in _archives:
        listing = root / ARCHIVE
        lines = listing.read_text("utf-8", "surrogateescape").splitlines() if listing.is_file() else []
        _archives[key] = dict(line.partition("\t")[::2] for line in lines if "\t" in line)
    return _archives[key]


def _archive(root: Path, record_id: str, path: Path) -> None:
    where = str(path.relative_to(root))
    line = f"{record_id}\t{where}\n".encode("utf-8", "surrogatepass")
    with _archive_lock:
        with open(root / ARCHIVE, "ab") as handle:  # one write of one whole line
            handle.write(line)
        _listing(root)[record_id] = where


def archived(root: Path, record_id: str) -> Path | None:
    """The file the archive lists for `record_id`, when it is still there."""
    with _archive_lock:
        where = _listing(root).get(record_id)
    return root / where if where is not None and (root / where).is_file() else None


# --- a 429 pauses everyone ------------------------------------------------------------------

class _Gate:
    """The time before which no download starts: a 429's Retry-After holds back every thread."""

    def __init__(self) -> None:
        self._until, self._lock = 0.0, threading.Lock()

    def hold(self, seconds: float) -> None:
        with self._lock:
            self._until = max(self._until, time.monotonic() + seconds)

    def wait(self) -> None:
        while (left := self._until - time.monotonic()) > 0:
            time.sleep(min(left, 1.0))


GATE = _Gate()


# --- why it failed ---------------------------------------------------------------------------

def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [(getattr(current, "exc_info", None) or (None, None))[1], getattr(current, "cause", None),
                 current.__cause__, current.__context__]


def retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: a number, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


_BY_MESSAGE = [  # yt-dlp's messages as YouTube words them, lower-cased
    ("private", ("private video", "video is private")),
    ("age_restricted", ("confirm your age", "age-restricted", "inappropriate for some users")),
    ("geo_blocked", ("available in your country", "blocked it in your country", "geo restrict")),
    ("rate_limited", ("too many requests", "not a bot", "rate-limit", "http error 429")),
    ("unavailable", ("video unavailable", "has been removed", "does not exist", "no longer available",
                     "http error 404", "http error 410", "unsupported url", "account associated",
                     "terminated", "requested format is not available")),
    ("network", ("timed out", "connection", "network is unreachable", "name or service not known",
                 "temporary failure in name resolution", "incomplete", "bytes read", "ssl", "eof occurred")),
]


def classify(exc: BaseException) -> tuple[str, str, float | None]:
    """(kind, message, seconds the server asked to wait) of a yt-dlp failure."""
    from yt_dlp.networking.exceptions import HTTPError, TransportError
    from yt_dlp.utils import ContentTooShortError, GeoRestrictedError

    message = re.sub(r"^ERROR: (\[\w+\] )?(Got error: )?", "", str(exc)).strip()
    for cause in _causes(exc):
        if isinstance(cause, HTTPError):
            status = cause.status
            wait = retry_after(cause.response.headers.get("Retry-After")) if cause.response else None
            if status == 429:
                return "rate_limited", f"HTTP 429 Too Many Requests (Retry-After: {wait})", wait
            if status in (403, 404, 410):
                return "unavailable", f"HTTP {status}", None
            if status >= 500:
                return "network", f"HTTP {status}", None
        if isinstance(cause, GeoRestrictedError):
            return "geo_blocked", message, None
        if isinstance(cause, (ContentTooShortError, TransportError, ConnectionError, TimeoutError)):
            return "network", message, None
    lowered = message.lower()
    for kind, words in _BY_MESSAGE:
        if any(word in lowered for word in words):
            return kind, message, None
    return "download_failed", message, None


# --- the stage ------------------------------------------------------------------------------

class _Quiet:
    """yt-dlp's messages to vi's log at debug level (-v shows them); stdout is for records."""

    def debug(self, message: str) -> None:
        log.debug("yt-dlp: %s", message)

    info = warning = debug

    def error(self, message: str) -> None:
        log.debug("yt-dlp: %s", message)


def _params(config: DownloadConfig, folder: Path) -> dict:
    h = config.max_height
    params = {
        # The best video no taller than the cap with the best audio, merged (ffmpeg), else the best
        # single file under the cap; `<=?` lets a format of unknown height (a plain .mp4 URL) qualify.
        "format": f"bv*[height<=?{h}]+ba/b[height<=?{h}]/wv*+ba/w",
        "outtmpl": {"default": "video.%(ext)s"},
        "paths": {"home": str(folder), "temp": str(folder)},
        "noplaylist": True, "continuedl": True, "overwrites": False,
        "retries": 0, "fragment_retries": config.retries, "extractor_retries": 0,  # our loop retries
        "socket_timeout": 30,
        "quiet": True, "no_warnings": True, "noprogress": True, "logger": _Quiet(), "color": "never",
    }
    if config.cookies is not None:
        params["cookiefile"] = str(config.cookies)
    return params


def _fetch(url: str, folder: Path, config: DownloadConfig) -> dict:
    import yt_dlp

    with yt_dlp.YoutubeDL(_params(config, folder)) as ydl:
        info = ydl.extract_info(url, download=True)
    return ydl.sanitize_info(info) if info else {}


def _finished_file(folder: Path) -> Path | None:
    files = [p for p in folder.iterdir() if p.is_file() and not p.name.endswith((".part", ".ytdl", ".temp"))
             and ".part-" not in p.name and not re.search(r"\.f\d+\.\w+$", p.name)]
    return max(files, key=lambda p: p.stat().st_size) if files else None


def download_record(record: Record, config: DownloadConfig) -> dict:
    url = target_of(record)
    record_id = str(record["id"])
    done = archived(config.out, record_id) or find_download(config.out, record_id)
    if done is not None:
        return {"video": str(done.resolve()), "download": {"url": url, "fetched": False}}
    folder = config.out / PARTIAL / safe_name(record_id)
    folder.mkdir(parents=True, exist_ok=True)
    info: dict = {}
    for attempt in range(config.retries + 1):
        GATE.wait()
        try:
            info = _fetch(url, folder, config)
            break
        except Exception as exc:  # noqa: BLE001 - every yt-dlp failure becomes the record's error
            kind, message, wait = classify(exc)
            log.debug("%s: try %d: %s (%s)", record_id, attempt + 1, message, kind)
            if wait is not None and wait > config.max_wait:
                raise RecordError(kind, f"{url}: {message}: the server asks to wait {wait:.0f} s, over "
                                  f"--max-wait {config.max_wait:.0f}; {HINTS[kind]}") from None
            if kind not in RETRIED or attempt == config.retries:
                if not any(folder.iterdir()):  # nothing to resume from: leave no empty folder behind
                    folder.rmdir()
                tries = f" after {attempt + 1} tries" if attempt else ""
                raise RecordError(kind, f"{url}: {message}{tries}; {HINTS[kind]}") from None
            pause = wait if wait is not None else 2.0 ** (attempt + 1)
            if kind == "rate_limited":
                GATE.hold(pause)  # the server spoke to every download of this process
            else:
                time.sleep(pause)
    got = _finished_file(folder)
    if got is None:
        raise RecordError("download_failed", f"{url}: yt-dlp reported success but left no file in {folder}; "
                          f"{HINTS['download_failed']}")
    final = config.out / shard_folder(record_id) / f"{safe_name(record_id)}{got.suffix}"
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(got, final)  # whole or absent: the name appears only once the file is complete
    shutil.rmtree(folder, ignore_errors=True)
    _archive(config.out, record_id, final)
    return {"video": str(final.resolve()),
            "download": {"url": url, "fetched": True, "bytes": final.stat().st_size,
                         "format": info.get("format_id"), "height": info.get("height"),
                         "extractor": info.get("extractor_key")}}
