"""The operator's side of the archive (docs/archive.md, "The operator"): every finished job's record written to the
database, in batches, before retention may delete its object.

Two ways in, one writer:
- eager: the informer sees a job finish, and its record (built from the object the watch delivered) is offered to
  the batch; when the batch is full the offer is dropped, since the delete path archives it anyway;
- on demand: retention is about to delete a job whose record is not known to have landed (after a restart the view
  keeps only a small FinishedJob, not the object): the job is read from the API server, its record written, and
  retention is told to look again.

What landed is remembered as (uid, resourceVersion) in a bounded set: retention deletes only the version whose
record landed (with that version as the delete's precondition), so a job retried after its record was written is
archived again before it goes. Writes are upserts by uid, so a batch written twice (a timeout, a kill between the
write and the delete, a new leader) is still one row per job. Only the leader writes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..archive.errors import ArchiveUnavailable, SchemaMismatch
from ..archive.record import Record, record_of
from ..archive.settings import ENV_DSN, ArchiveSettings
from ..kube import metrics
from ..kube.client import Kube, NotFound
from ..kube.informer import Key, key_of
from ..resources import contract
from .records import version_of

if TYPE_CHECKING:  # the database's modules are loaded only when an archive is configured (archive/errors.py)
    from ..archive.store import Archive

log = logging.getLogger(__name__)

# Records written in one transaction: large enough that a burst costs the database one commit per few hundred jobs.
BATCH = 500
# How long the writer lets a batch fill before it writes what it has (a job's record lands within about this).
LINGER = 0.2
# Jobs waiting to be written, at most; an eager offer past EAGER_MAX (or past EAGER_PAYLOAD_BYTES of payloads held)
# is dropped: the record of a dropped job is built again from the API server when retention wants to delete it.
PENDING_MAX = 20_000
EAGER_MAX = 5_000
EAGER_PAYLOAD_BYTES = 16 * 1024 * 1024
# (uid, resourceVersion) pairs remembered as landed; an older one forgotten costs a GET and a rewrite (an upsert).
LANDED_MAX = 200_000
# Reads of jobs from the API server at once, for records built on demand.
READS = 8
# The wait after the database could not be reached: doubling from FIRST_BACKOFF up to MAX_BACKOFF.
FIRST_BACKOFF, MAX_BACKOFF = 1.0, 30.0
# Seconds one batch's write may take; past it the batch counts as failed (it may have landed: written again, the
# upsert keeps one row).
WRITE_TIMEOUT = 60.0
# How often the leader deletes the records older than the archive's own retention (in batches: Archive.prune).
PRUNE_EVERY = 3600.0


async def refusal(settings: ArchiveSettings, migrate: bool) -> str | None:
    """Before the operator starts: the library's one line when the archive's schema is not this code's (older:
    `sextant archive migrate`; newer: a newer Sextant's), else None (an archive that does not answer is no refusal:
    jobs run while it is away)."""
    from ..archive.store import Archive, shown

    try:
        await (await Archive.open(settings.dsn, migrate=migrate)).close()
    except SchemaMismatch as exc:
        return str(exc)
    except ArchiveUnavailable:
        return None
    except ValueError as exc:  # a DSN the library cannot read (its message leaves the password out)
        return f"{ENV_DSN}: {exc}"
    except OSError as exc:  # the SQLite file's directory cannot be made: a setting to fix, not an outage to wait out
        return f"the archive at {shown(settings.dsn)} cannot be created: {exc.strerror or exc}: {exc.filename}"
    return None


class Archiver:
    def __init__(self, settings: ArchiveSettings, kube: Kube, leading: asyncio.Event,
                 landed: Callable[[Key], None] = lambda key: None, *, migrate: bool = False) -> None:
        self.settings = settings
        self.kube = kube
        self.leading = leading
        self.on_landed = landed  # retention looks again at a job whose record landed
        self.migrate = migrate  # the embedded SQLite file is the operator's own: it migrates it; a user's DSN never
        self.archive: Archive | None = None
        # key → (uid, version, record, or None: to be read from the API server first); insertion order is FIFO
        self._pending: dict[Key, tuple[str, int, Record | None]] = {}
        self._eager_bytes = 0
        self._landed: dict[tuple[str, int], None] = {}
        self._wake = asyncio.Event()
        self.unavailable_since: float | None = None  # monotonic; None while the database answers
        self.problem: str | None = None
        metrics.ARCHIVE_PENDING.set_function(lambda: len(self._pending))
        metrics.ARCHIVE_UNAVAILABLE.set(0)

    # --- what retention asks --------------------------------------------------------------------------------
    def landed(self, uid: str, version: int) -> bool:
        return (uid, version) in self._landed

    def request(self, key: Key, uid: str, version: int) -> None:
        """Retention wants to delete this version of a job whose record is not known to have landed: archive it
        (read from the API server first, unless an eager record of that version waits already)."""
        waiting = self._pending.get(key)
        if waiting is not None and waiting[:2] == (uid, version):
            return
        if len(self._pending) >= PENDING_MAX and waiting is None:
            return  # retention asks again on its next look
        self._put(key, (uid, version, None))

    def offer(self, obj: dict[str, Any]) -> None:
        """The informer saw a finished version of a job: its record, if there is room (else the delete path)."""
        if not self.leading.is_set() or len(self._pending) >= EAGER_MAX or self._eager_bytes > EAGER_PAYLOAD_BYTES:
            return
        meta = obj["metadata"]
        uid, version = meta.get("uid", ""), version_of(obj)
        if self.landed(uid, version):
            return
        try:
            record = record_of(obj, self.settings.payload_max_bytes)
        except ValueError:
            return  # no creation time (never from the API server): the delete path reads it again
        self._put(key_of(obj), (uid, version, record))

    def _put(self, key: Key, item: tuple[str, int, Record | None]) -> None:
        old = self._pending.pop(key, None)
        if old is not None and old[2] is not None:
            self._eager_bytes -= old[2].payload_bytes if old[2].payload is not None else 0
        if item[2] is not None and item[2].payload is not None:
            self._eager_bytes += item[2].payload_bytes
        self._pending[key] = item
        self._wake.set()

    def status(self) -> str:
        """One line for the readiness detail (/readyz, which answers without a token: the backend only, never the
        DSN's host or user; the error itself is in the log): whether records land."""
        backend = self.settings.dsn.split(":", 1)[0]
        if self.problem is None:
            return f"archive: {backend}, {len(self._pending)} records waiting"
        since = f" for {time.monotonic() - self.unavailable_since:.0f} s" if self.unavailable_since else ""
        return (f"archive: {backend} ArchiveUnavailable{since}, {len(self._pending)} records waiting, retention "
                "deletes nothing unarchived (the operator's log says why)")

    # --- opening ----------------------------------------------------------------------------------------------
    async def check(self) -> None:
        """At start: refuse a schema this code cannot use (SchemaMismatch, the library's one line, ends the
        operator); an archive that cannot be reached now is opened later by the writer, jobs run meanwhile."""
        from ..archive.store import Archive

        try:
            self.archive = await Archive.open(self.settings.dsn, migrate=self.migrate)
        except ArchiveUnavailable as exc:
            self._failed(str(exc))
            log.warning("%s; jobs run, and retention deletes nothing until their records land", exc)

    async def _open(self) -> Archive:
        if self.archive is None:
            from ..archive.store import Archive

            try:
                self.archive = await Archive.open(self.settings.dsn, migrate=self.migrate)
            except SchemaMismatch as exc:
                raise ArchiveUnavailable(str(exc)) from exc  # changed under us: wait for it like an outage
        return self.archive

    async def close(self) -> None:
        if self.archive is not None:
            await self.archive.close()
            self.archive = None

    def _failed(self, message: str) -> None:
        if self.unavailable_since is None:
            self.unavailable_since = time.monotonic()
        self.problem = message
        metrics.ARCHIVE_UNAVAILABLE.set(1)
        metrics.ARCHIVE_WRITE_FAILURES.inc()

    def _recovered(self) -> None:
        if self.problem is not None:
            log.warning("the archive answers again: %d records waiting", len(self._pending))
        self.unavailable_since, self.problem = None, None
        metrics.ARCHIVE_UNAVAILABLE.set(0)

    # --- the writer ---------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Write what waits, a batch at a time, while this replica leads; on an outage wait (FIRST_BACKOFF doubling
        to MAX_BACKOFF) and write the same batch again."""
        backoff = FIRST_BACKOFF
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            await self.leading.wait()
            if len(self._pending) < BATCH:
                await asyncio.sleep(LINGER)  # let a burst fill the batch
            batch = list(itertools.islice(self._pending.items(), BATCH))
            try:
                progress = await self._write(batch)
            except ArchiveUnavailable as exc:
                self._failed(str(exc))
                log.warning("%s; %d records wait, next try in %.0f s", exc, len(self._pending), backoff)
                progress = False
            else:
                self._recovered()
            if progress:
                backoff = FIRST_BACKOFF
            else:  # the database, or the API server for the jobs to read, is away: wait before trying again
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    async def prune(self, now: Callable[[], datetime]) -> None:
        """The archive's own retention (ArchiveSettings.retention, 30 days by default): the leader deletes older
        records once an hour, in short transactions; an outage skips a round."""
        while True:
            await self.leading.wait()
            try:
                gone = await (await self._open()).prune(now() - self.settings.retention)
                if gone:
                    log.info("archive: %d records older than %s pruned", gone, self.settings.retention)
            except ArchiveUnavailable as exc:
                log.warning("archive: pruning skipped: %s", exc)
            await asyncio.sleep(PRUNE_EVERY)

    async def _write(self, batch: list[tuple[Key, tuple[str, int, Record | None]]]) -> bool:
        """Write a batch; False when none of it could be read from the API server (then the writer waits too)."""
        archive = await self._open()
        sem = asyncio.Semaphore(READS)

        async def read(key: Key, uid: str, version: int) -> tuple[Record, int] | None | bool:
            async with sem:
                try:
                    obj = await self.kube.get(contract.jobs_path(*key))
                except NotFound:
                    return None  # gone already: nothing left to archive or delete
                except Exception as exc:  # noqa: BLE001 - the API server's trouble: it stays waiting, read again later
                    log.warning("job %s/%s: cannot read it to archive it: %s: %s", *key, type(exc).__name__, exc)
                    return False
            if obj["metadata"].get("uid") != uid:
                return None  # another job of that name: the one retention judged is gone
            try:
                return record_of(obj, self.settings.payload_max_bytes), version_of(obj)
            except ValueError:
                return None

        to_read = [(key, uid, version) for key, (uid, version, record) in batch if record is None]
        read_back = dict(zip([k for k, _, _ in to_read], await asyncio.gather(*(read(*t) for t in to_read))))
        records: list[tuple[Key, str, int, Record]] = []
        unread: set[Key] = set()
        for key, (uid, version, record) in batch:
            if record is None:
                got = read_back.get(key)
                if got is False:
                    unread.add(key)
                    continue
                if got is None:
                    self._done(key, uid, version)
                    continue
                record, version = got  # the version read is the one written (retention deletes only it)
            records.append((key, uid, version, record))
        if records:
            try:  # a database that accepts the connection but does not answer is as good as down: try again later
                await asyncio.wait_for(archive.write([r for _, _, _, r in records]), WRITE_TIMEOUT)
            except asyncio.TimeoutError:
                raise ArchiveUnavailable(f"the archive did not take {len(records)} records within "
                                         f"{WRITE_TIMEOUT:.0f} s") from None
            metrics.ARCHIVE_WRITTEN.inc(len(records))
        for key, uid, version, _ in records:
            self._landed[(uid, version)] = None
            if len(self._landed) > LANDED_MAX:
                del self._landed[next(iter(self._landed))]  # the oldest: its job is long gone, most likely
        for key, (uid, version, _) in batch:
            if key not in unread:
                self._done(key, uid, version)
            else:
                self._put(key, self._pending.pop(key))  # to the end of the line: the others go first
        for key, _, _, _ in records:
            self.on_landed(key)
        return len(unread) < len(batch)

    def _done(self, key: Key, uid: str, version: int) -> None:
        """Take a written (or vanished) job off the waiting list, unless a newer version took its place."""
        waiting = self._pending.get(key)
        if waiting is not None and waiting[:2] == (uid, version):
            self._put_away(key)

    def _put_away(self, key: Key) -> None:
        old = self._pending.pop(key)
        if old[2] is not None and old[2].payload is not None:
            self._eager_bytes -= old[2].payload_bytes
