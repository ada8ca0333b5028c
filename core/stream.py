"""The stage driver: one loop that gives every stage the record contract.

A stage is a plain function from a record to the fields it adds. The driver does the rest:
sharding, resume, passing records that already carry errors through untouched, turning a
failure into an error record, merging the new fields after the old ones (key order kept),
progress, the closing counts, and the exit code.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from vi.core.errors import (
    EXIT_OK,
    EXIT_RECORDS_FAILED,
    EXIT_STRICT_STOP,
    RecordError,
    SetupError,
)
from vi.core.progress import log, make_progress, stderr
from vi.core.provenance import FIELD as PROVENANCE
from vi.core.provenance import differences
from vi.core.records import REJECTED, Record, dumps, has_errors, with_error
from vi.core.sharding import Shard
from vi.core.sink import DownstreamClosed, FileSink, open_sink

Fields = dict[str, Any]
MAX_SHOWN_FAILURES = 10  # on stderr; every failure is in the output records
ProcessOne = Callable[[Record], Fields]
ProcessBatch = Callable[[list[Record]], list["Fields | RecordError"]]
IN_FLIGHT_BATCHES = 4  # a Stage with concurrency N is handed batches of 4N records


@dataclass
class StreamOptions:
    input: Path | None = None
    output: Path | None = None
    resume: bool = False
    overwrite: bool = False
    shard: Shard | None = None
    strict: bool = False
    quiet: bool = False
    seed: int = 0
    rejects: Path | None = None  # records the stage rejects go here instead of the output
    # With resume: redo the records this stage failed with these error kinds (None: no retry; an
    # empty set: every kind), their lines in --output replaced (FileSink.retry).
    retry_errors: frozenset[str] | None = None
    # The stage's configuration (vi.core.provenance.fingerprint), written into each record it
    # finishes; resume refuses an output of another configuration unless allow_mixed.
    fingerprint: dict[str, Any] | None = None
    allow_mixed: bool = False


@dataclass
class Stage:
    """What the driver needs to know about a stage.

    `process` maps one record to the fields it adds; `process_batch`, when given, maps a
    list of records to one result each (fields or a RecordError), so a stage can batch its
    model calls across records; `batch_size` says how many records to hand it at once.
    `reject`, when given with StreamOptions.rejects, routes the finished records it is true
    for to that file instead of the output (a filter that loses nothing).
    """

    name: str
    writes: tuple[str, ...]
    process: ProcessOne | None = None
    process_batch: ProcessBatch | None = None
    batch_size: int = 1
    reject: Callable[[Record], bool] | None = None
    # Records `process` works on at once, in threads (an LLM server with many requests in
    # flight); results still come out in input order. The driver hands it batches of
    # IN_FLIGHT_BATCHES * concurrency records, so a slow record stalls the pool only at a
    # batch's end.
    concurrency: int = 1

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.concurrency > 1 and self.process_batch is None:
            self.batch_size = max(self.batch_size, IN_FLIGHT_BATCHES * self.concurrency)


@dataclass(frozen=True)
class RecordStage:
    """A stage that is one function of (record, config): the command table runs it as it is, so
    adding such a stage is its pipeline module (this, its config dataclass, the function) and one
    line in cli/app.py's table, which gives its one-line summary. `reads`, `writes` and `example`
    are the rest of its --help; `fields` what it adds to a record; the config's `concurrency`, when
    it has one, is the stage's."""

    name: str
    reads: str
    writes: str
    example: str
    config: type
    fields: tuple[str, ...]
    process: Callable[[Record, Any], Fields]

    def stage(self, config: Any) -> Stage:
        return Stage(self.name, writes=self.fields, process=lambda record: self.process(record, config),
                     concurrency=getattr(config, "concurrency", 1))


@dataclass
class Report:
    stage: str
    ok: int = 0
    failed: int = 0
    skipped: int = 0  # arrived with upstream errors, passed through untouched
    resumed: int = 0  # already complete in --output, not redone
    rejected: int = 0  # finished, and written to --rejects instead of the output
    stopped: bool = False  # --strict hit a failure
    downstream_closed: bool = False  # stdout's reader went away (| head): a normal stop
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)  # the first few, for stderr

    def fail(self, record: Record) -> None:
        self.failed += 1
        if len(self.failures) < MAX_SHOWN_FAILURES:
            self.failures.append(f"{record['id']}: {record['errors'][-1]['message']}")

    @property
    def exit_code(self) -> int:
        if self.stopped:
            return EXIT_STRICT_STOP
        return EXIT_RECORDS_FAILED if self.failed else EXIT_OK

    def summary(self) -> str:
        parts = [f"{self.ok} ok", f"{self.failed} failed", f"{self.skipped} skipped"]
        if self.rejected:
            parts.append(f"{self.rejected} of the ok set aside (--rejects)")
        if self.resumed:
            parts.append(f"{self.resumed} already done (resume)")
        tail = " (stopped at the first failure: --strict)" if self.stopped else ""
        if self.downstream_closed:
            tail += " (stopped: the reader of stdout closed the pipe)"
        return f"vi {self.stage}: " + ", ".join(parts) + f" in {self.seconds:.1f}s" + tail


def merge(record: Record, added: Fields) -> Record:
    """Old fields first in their order, then the stage's; a re-run replaces its own in place."""
    out = dict(record)
    out.update(added)
    return out


def _in_scope(records: Iterable[Record], opts: StreamOptions, done: Counter[str], report: Report,
              on_resumed: Callable[[], None]) -> Iterator[Record]:
    """The records of this shard not already in --output. An id the input repeats is done as
    many times as the output holds it: resume skips that many of its occurrences, in order."""
    seen: dict[str, int] = {}
    for record in records:
        if opts.shard is not None and not opts.shard.contains(record["id"]):
            continue
        key = str(record["id"])
        if key in seen and not record.get(REJECTED):
            seen[key] += 1
            if seen[key] == 2:
                log.warning("id %r occurs more than once in the input: each occurrence is processed "
                            "and written (give every record its own id; vi probe does)", key[:200])
        else:
            seen[key] = 1
        if done[key] > 0:
            done[key] -= 1
            report.resumed += 1
            on_resumed()
            continue
        yield record


def _batches(records: Iterator[Record], size: int) -> Iterator[list[Record]]:
    batch: list[Record] = []
    for record in records:
        batch.append(record)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _results(stage: Stage, batch: list[Record]) -> list[Fields | Exception]:
    todo = [r for r in batch if not has_errors(r)]
    results: list[Fields | Exception] = []
    if stage.process_batch is not None and todo:
        try:
            results = list(stage.process_batch(todo))
            if len(results) != len(todo):
                raise RuntimeError(f"stage {stage.name} returned {len(results)} results "
                                   f"for {len(todo)} records")
        except SetupError:
            raise
        except Exception as exc:  # a failure of the whole batch fails each of its records
            results = [exc] * len(todo)
    elif stage.process is not None and stage.concurrency > 1 and len(todo) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(stage.concurrency, len(todo)), thread_name_prefix=stage.name) as pool:
            results = list(pool.map(lambda record: _one(stage.process, record), todo))  # input order
        for result in results:
            if isinstance(result, SetupError):
                raise result
    elif stage.process is not None:
        for record in todo:
            results.append(_one(stage.process, record))
            if isinstance(results[-1], SetupError):
                raise results[-1]
    it = (_owned(stage, r) for r in results)
    return [None if has_errors(r) else next(it) for r in batch]  # type: ignore[misc]


def _one(process: ProcessOne, record: Record) -> Fields | Exception:
    """`process(record)`, or the exception it raised (a SetupError too: the caller re-raises it)."""
    try:
        return process(record)
    except Exception as exc:  # noqa: BLE001 - becomes the record's error entry
        return exc


def _owned(stage: Stage, result: Fields | Exception) -> Fields | Exception:
    """A stage may write only the fields it declares: anything else is a bug in the stage."""
    if isinstance(result, Exception):
        return result
    extra = set(result) - set(stage.writes)
    if extra:
        return RuntimeError(f"stage {stage.name} wrote fields it does not own: {', '.join(sorted(extra))}")
    return result


def _encode(out: Record, record: Record, stage: str, failed: bool) -> tuple[bytes, Record, bool]:
    """The output line; a stage result JSON cannot hold (NaN, say) fails that record only."""
    try:
        return dumps(out), out, failed
    except ValueError as exc:
        out = with_error(record, stage, "unserialisable",
                         f"the stage produced a value JSON cannot hold ({exc}); this is a bug in "
                         f"vi {stage}, please report it")
        return dumps(out), out, True


def _refuse_same_file(opts: StreamOptions) -> None:
    pairs = [("--input", opts.input, "--output", opts.output),
             ("--input", opts.input, "--rejects", opts.rejects),
             ("--output", opts.output, "--rejects", opts.rejects)]
    for name_a, a, name_b, b in pairs:
        if a is None or b is None or str(a) == "-" or str(b) == "-":
            continue
        same = (os.path.samefile(a, b) if a.exists() and b.exists()
                else a.resolve() == b.resolve())  # a file neither run has made yet
        if same:
            raise ValueError(f"{name_a} and {name_b} are the same file ({b}); "
                             "give each its own file")


def _check_configuration(sink: Any, stage: str, opts: StreamOptions) -> None:
    """Refuse to resume FILE when its records were made by another configuration of `stage`
    (exit 2, the differences shown), unless --allow-mixed."""
    if not isinstance(sink, FileSink) or opts.fingerprint is None:
        return
    found = sink.recovered
    mine = json.dumps(opts.fingerprint, sort_keys=True, ensure_ascii=False)
    others = {key: seen for key, seen in found.fingerprints.items() if key != mine}
    if not others:
        if found.unmarked and not found.fingerprints:
            log.warning("%s %s: its %d records carry no configuration fingerprint (written by an older "
                        "vi): resuming without checking that they were made as this run makes them",
                        sink.what, sink.path, found.unmarked)
        return
    lines = []
    for key, (count, first) in others.items():
        changed = "; ".join(differences(json.loads(key), opts.fingerprint)) or "(none)"
        lines.append(f"{count} record(s) (the first {first[:100]!r}) were made with: {changed}")
    message = (f"{sink.what} {sink.path} holds records of vi {stage} made by another configuration "
               f"than this run's (recorded -> now): " + " | ".join(lines))
    if opts.allow_mixed:
        log.warning("%s; going on (--allow-mixed): each record's 'provenance' says how it was made", message)
        return
    raise ValueError(f"{message}. Resume with the options it was made with, write to a new --output, "
                     "or pass --allow-mixed to mix them knowingly")


def _retry(sink: Any, stage: str, opts: StreamOptions) -> None:
    if opts.retry_errors is None or not isinstance(sink, FileSink):
        return
    taken = sink.retry(opts.retry_errors or None)
    if taken:
        log.info("retry: %d failed record(s) (%s) taken out of %s, to be done again", sum(taken.values()),
                 ", ".join(f"{n} {kind}" for kind, n in taken.most_common()), sink.path)
    else:
        kinds = ", ".join(sorted(opts.retry_errors)) or "any kind"
        log.info("retry: no record of %s failed in vi %s with %s; nothing to redo", sink.path, stage, kinds)


def _stamp(out: Record, stage: str, opts: StreamOptions) -> Record:
    """`out` with this stage's fingerprint in its provenance (replaced in place on a re-run)."""
    if opts.fingerprint is None:
        return out
    known = out.get(PROVENANCE)
    out[PROVENANCE] = {**(known if isinstance(known, dict) else {}), stage: opts.fingerprint}
    return out


def _as_error(record: Record, stage: str, exc: Exception) -> Record:
    if isinstance(exc, RecordError):
        return with_error(record, stage, exc.kind, exc.message)
    log.debug("record %s failed", record.get("id"), exc_info=exc)
    return with_error(record, stage, "internal", f"{type(exc).__name__}: {exc}")


def run_stage(stage: Stage, records: Iterable[Record], opts: StreamOptions,
              total: Callable[[], int | None] | None = None) -> Report:
    """Run `stage` over `records` under the record contract; return the counts.

    `total` counts the records in scope, for the progress bar's ETA; it is called only when
    a bar is shown, since counting may mean reading the input twice.
    """
    report = Report(stage=stage.name)
    _refuse_same_file(opts)
    if opts.retry_errors is not None and not opts.resume:
        raise ValueError("--retry-errors redoes failed records of an existing --output: give --resume too")
    sink = open_sink(opts.output, resume=opts.resume, overwrite=opts.overwrite, stage=stage.name)
    rejects = None
    try:
        rejects = (open_sink(opts.rejects, resume=opts.resume, overwrite=opts.overwrite,
                             what="--rejects", stage=stage.name)
                   if opts.rejects is not None and stage.reject is not None else None)
        _check_configuration(sink, stage.name, opts)
        _check_configuration(rejects, stage.name, opts)
        _retry(sink, stage.name, opts)  # after the checks: a refused run changes nothing
    except BaseException:
        sink.close()
        if rejects is not None:
            rejects.close()
        raise
    # Each record is written to exactly one of the two files: resume looks at both.
    done = Counter(getattr(sink, "done_ids", Counter())) + Counter(getattr(rejects, "done_ids", Counter()))
    if done:
        log.info("resume: %d records already complete in %s", sum(done.values()), opts.output)
    start = time.perf_counter()
    progress = make_progress(opts.quiet)
    try:
        with progress:
            task = progress.add_task(stage.name, total=None if opts.quiet or total is None
                                     else total())
            scoped = _in_scope(records, opts, done, report, lambda: progress.advance(task))
            for batch in _batches(scoped, max(1, stage.batch_size)):
                for record, result in zip(batch, _results(stage, batch)):
                    if result is None:  # arrived with errors: passed through untouched
                        # ... unless this stage's own reader rejected the line: its failure
                        out, failed = record, bool(record.pop(REJECTED, False))
                        if failed:
                            out = _stamp(out, stage.name, opts)
                    elif isinstance(result, Exception):
                        out, failed = _stamp(_as_error(record, stage.name, result), stage.name, opts), True
                    else:
                        out, failed = _stamp(merge(record, result), stage.name, opts), False
                    line, out, failed = _encode(out, record, stage.name, failed)
                    target = sink
                    if failed:
                        report.fail(out)
                    elif result is None:
                        report.skipped += 1
                    else:
                        report.ok += 1
                        if rejects is not None and stage.reject(out):  # type: ignore[misc]
                            report.rejected += 1
                            target = rejects
                    try:
                        target.write(line)
                    except OSError as exc:  # a full disk: the file keeps whole lines only
                        raise OSError(exc.errno, f"record {str(out['id'])[:200]!r} not written: "
                                      f"{exc.strerror}") from None
                    progress.advance(task)
                    if opts.strict and failed:
                        report.stopped = True
                        break
                if report.stopped:
                    break
    except DownstreamClosed:
        report.downstream_closed = True
    finally:
        sink.close()
        if rejects is not None:
            rejects.close()
        report.seconds = time.perf_counter() - start
    for line in report.failures:
        stderr.print(f"[red]failed[/red] {escape(line)}", highlight=False)
    if report.failed > len(report.failures):
        stderr.print(f"... and {report.failed - len(report.failures)} more (see 'errors' in the output)",
                     highlight=False)
    stderr.print(report.summary(), highlight=False)
    return report
