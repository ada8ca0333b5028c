"""The two kinds of failure a stage can meet, and the exit codes they map to."""

from __future__ import annotations

# Documented exit codes (docs/records.md). 2 is click/typer's usage error.
EXIT_OK = 0
EXIT_CRASH = 1
EXIT_USAGE = 2
EXIT_RECORDS_FAILED = 3
EXIT_STRICT_STOP = 4
EXIT_SETUP = 5
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as shells report it; SIGTERM's default death reads 143

# Error kinds that say nothing about the record, only about the moment: a rerun may succeed, so
# `--resume --retry-errors` retries these unless told which kinds. The LLM server backend retries
# 429s, 5xx, timeouts and dropped connections itself (core/models/openai_chat.py) and writes one
# kind, llm_unavailable, once they outlast its tries; vi download writes rate_limited (HTTP 429
# past its waits) and network (a connection that failed or dropped). A new transient kind is
# added here, once.
TRANSIENT_KINDS = ("llm_unavailable", "rate_limited", "network")


class RecordError(Exception):
    """A failure that belongs to one record.

    The driver turns it into an entry of the record's `errors` list and the stream goes on.
    `kind` is a short machine-readable slug (`missing_field`, `unreadable_media`, ...);
    the message says which field is wrong and what to do about it.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


class SetupError(Exception):
    """A failure that no record can get past (a missing model, a missing program).

    The stage stops before writing anything further and exits with EXIT_SETUP.
    """


class ModelNotAvailable(SetupError):
    """A model reference that cannot be resolved to local weights."""
