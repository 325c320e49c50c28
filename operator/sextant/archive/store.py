"""The archive's reads and writes, on SQLAlchemy's asyncio engine: PostgreSQL through psycopg 3 (with the engine's
pool), SQLite through aiosqlite (WAL, so that readers do not wait for the writer).

Every failure to reach the database is ArchiveUnavailable, which a caller waits on and retries: writes are upserts
by uid, so a batch written again after a failure (landed or not) is one row per job."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Select, and_, delete, event, func, or_, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..resources.common import parse_time
from ..resources.job import job_id, object_name
from . import migrations
from .query import MAX_PAGE_SIZE, PAGE_SIZE, Filters, Page, Position, decode_cursor, encode_cursor
from .record import Record
from .schema import COLUMNS, jobs, minute_of
from .stats import FRACTIONS, Percentiles, QueueStats, percentiles
from .errors import ArchiveUnavailable, SchemaMismatch

# Seconds to wait for PostgreSQL to answer a connection, and SQLite for a lock; after that the archive is
# unavailable (the caller waits and tries again) rather than hanging its caller.
CONNECT_TIMEOUT = 10
SQLITE_BUSY_MS = 10_000
# Rows one prune statement deletes: each batch is a short transaction, so pruning never holds a long lock.
PRUNE_BATCH = 5000


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits: JSON has no limit, orjson does
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def engine_url(dsn: str) -> URL:
    """postgresql:// (or postgres://) → psycopg 3's asyncio driver; sqlite:///PATH → aiosqlite's."""
    try:
        url = make_url(dsn)
    except (sa_exc.ArgumentError, ValueError) as exc:
        raise ValueError(f"the archive's DSN cannot be read: {exc}") from None  # not shown: it may hold a password
    if url.get_backend_name() in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() == "sqlite":
        return url.set(drivername="sqlite+aiosqlite")
    raise ValueError(f"{url.drivername!r} is not an archive: use postgresql://USER@HOST/DB or sqlite:///PATH")


def shown(dsn: str) -> str:
    """The DSN as messages show it: without its password."""
    return make_url(dsn).render_as_string(hide_password=True)


def _engine(dsn: str, pool_size: int) -> AsyncEngine:
    url = engine_url(dsn)
    common: dict[str, Any] = {"json_serializer": _dumps, "json_deserializer": orjson.loads, "pool_pre_ping": True}
    if url.get_backend_name() == "postgresql":
        return create_async_engine(url, pool_size=pool_size, max_overflow=pool_size,
                                   connect_args={"connect_timeout": CONNECT_TIMEOUT}, **common)
    if url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, connect_args={"timeout": SQLITE_BUSY_MS / 1000}, **common)

    @event.listens_for(engine.sync_engine, "connect")
    def _pragmas(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # readers go on while one writer writes
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable at each checkpoint, WAL's usual pairing
        cursor.close()

    return engine


def _row(record: Record) -> dict[str, Any]:
    return {name: getattr(record, name) for name in COLUMNS}


def _record(row: Any) -> Record:
    values = dict(row._mapping)
    return Record(id=job_id(values["name"]), **values)


def _newer(a: Record, b: Record) -> bool:
    """Whether record a is at least as new as b, as the upsert decides (a retried job finishes again later)."""
    return (a.recorded_at, a.sequence) >= (b.recorded_at, b.sequence)


@dataclass
class Archive:
    """An open archive. `Archive.open(dsn)` refuses a database whose schema is not this code's (one line naming
    the command that migrates it) unless asked to migrate; close() when done."""

    engine: AsyncEngine
    dsn: str

    @classmethod
    async def open(cls, dsn: str, *, migrate: bool = False, pool_size: int = 5) -> Archive:
        archive = cls(_engine(dsn, pool_size), dsn)
        try:
            async with archive._connection() as conn:
                revision = await conn.run_sync(migrations.current)
                problem = migrations.refusal(revision, shown(dsn))
                if migrate and migrations.behind(revision):
                    await conn.run_sync(migrations.upgrade)
                    problem = migrations.refusal(await conn.run_sync(migrations.current), shown(dsn))
                await conn.commit()
            if problem:
                raise SchemaMismatch(problem)
        except BaseException:
            await archive.close()
            raise
        return archive

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    async def close(self) -> None:
        await self.engine.dispose()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection]:
        try:
            async with self.engine.connect() as conn:
                yield conn
        except (sa_exc.OperationalError, sa_exc.InterfaceError, OSError, TimeoutError) as exc:
            raise ArchiveUnavailable(f"the archive at {shown(self.dsn)} is unavailable: "
                                     f"{str(getattr(exc, 'orig', None) or exc).strip().splitlines()[0]}") from exc
        except sa_exc.DBAPIError as exc:
            if exc.connection_invalidated:
                raise ArchiveUnavailable(f"the archive at {shown(self.dsn)} lost its connection") from exc
            raise

    # --- writes ---------------------------------------------------------------------------------------------
    async def write(self, records: Iterable[Record]) -> int:
        """Upsert a batch in one transaction: a job written again is still one row, and of two records of one job
        the newer stays. Returns how many jobs the batch held."""
        newest: dict[str, Record] = {}
        for record in records:  # PostgreSQL refuses one statement that touches a row twice
            kept = newest.get(record.uid)
            if kept is None or _newer(record, kept):
                newest[record.uid] = record
        if not newest:
            return 0
        insert = postgresql.insert(jobs) if self.backend == "postgresql" else sqlite.insert(jobs)
        new = insert.excluded
        statement = insert.on_conflict_do_update(
            index_elements=[jobs.c.uid],
            set_={name: new[name] for name in COLUMNS if name != "uid"},
            where=or_(new.recorded_at > jobs.c.recorded_at,
                      and_(new.recorded_at == jobs.c.recorded_at, new.sequence >= jobs.c.sequence)))
        async with self._connection() as conn:
            await conn.execute(statement, [_row(r) for r in newest.values()])
            await conn.commit()
        return len(newest)

    async def prune(self, older_than: datetime, batch: int = PRUNE_BATCH) -> int:
        """Delete the records that finished before older_than, `batch` rows per transaction; how many went."""
        total = 0
        while True:
            chosen = select(jobs.c.uid).where(jobs.c.recorded_at < older_than).limit(batch).scalar_subquery()
            async with self._connection() as conn:
                gone = (await conn.execute(delete(jobs).where(jobs.c.uid.in_(chosen)))).rowcount
                await conn.commit()
            total += gone
            if gone < batch:
                return total

    # --- reads ----------------------------------------------------------------------------------------------
    async def _all(self, query: Select[Any]) -> list[Any]:
        async with self._connection() as conn:
            return list((await conn.execute(query)).all())

    async def get(self, namespace: str, key: str) -> Record | None:
        """A job by its id (job_8f3k2m9q), its object's name or its uid; of several under one name (a name used
        again after its job was deleted), the newest."""
        query = (select(jobs).where(jobs.c.namespace == namespace, or_(jobs.c.name == object_name(key),
                                                                       jobs.c.uid == key))
                 .order_by(jobs.c.recorded_at.desc(), jobs.c.uid.desc()).limit(1))
        rows = await self._all(query)
        return _record(rows[0]) if rows else None

    async def recorded(self, namespace: str | None, uids: Sequence[str]) -> dict[str, tuple[datetime, int]]:
        """Of these uids (of one namespace, or None: of any), those the archive holds a record of, with its
        (recorded_at, sequence): what a list of live and archived jobs asks of each page of live jobs, in one query
        (the uid is the primary key)."""
        if not uids:
            return {}
        query = select(jobs.c.uid, jobs.c.recorded_at, jobs.c.sequence).where(jobs.c.uid.in_(list(uids)))
        if namespace is not None:
            query = query.where(jobs.c.namespace == namespace)
        return {uid: (at, sequence) for uid, at, sequence in await self._all(query)}

    async def by_idempotency_key(self, namespace: str, key: str, since: datetime) -> Record | None:
        """The first job created with this key since `since` (the start of the key's window), that is, the job
        the key names; a duplicate (status.duplicateOf) never is."""
        query = (select(jobs).where(jobs.c.namespace == namespace, jobs.c.idempotency_key == key,
                                    jobs.c.created_at >= since, jobs.c.duplicate_of.is_(None))
                 .order_by(jobs.c.created_at, jobs.c.uid).limit(1))
        rows = await self._all(query)
        return _record(rows[0]) if rows else None

    async def list(self, filters: Filters = Filters(), cursor: str | None = None, limit: int = PAGE_SIZE) -> Page:
        """A page of records newest first (by recorded_at, then uid) and the cursor of the next page (None after
        the last). A page continued from its cursor neither repeats nor skips a record that was there when the
        list began (a record written meanwhile may appear, if it sorts after the cursor)."""
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        query = select(jobs).where(*_conditions(filters))
        if cursor is not None:
            at = decode_cursor(cursor)
            query = query.where(jobs.c.recorded_at <= at.recorded_at,  # the indexes' range; the pair decides
                                or_(jobs.c.recorded_at < at.recorded_at,
                                    and_(jobs.c.recorded_at == at.recorded_at, jobs.c.uid < at.uid)))
        rows = await self._all(query.order_by(jobs.c.recorded_at.desc(), jobs.c.uid.desc()).limit(limit + 1))
        records = [_record(r) for r in rows[:limit]]
        more = len(rows) > limit
        return Page(records, encode_cursor(Position(records[-1].recorded_at, records[-1].uid)) if more else None)

    async def stats(self, namespace: str, queue: str, since: datetime, until: datetime) -> QueueStats:
        """A queue's jobs that finished in [since, until): how many per minute in each state, and the percentiles
        of their wait and run times (PostgreSQL computes them; on SQLite they are computed here from the window's
        rows, which SQLite has no function for)."""
        window = (jobs.c.namespace == namespace, jobs.c.queue == queue,
                  jobs.c.recorded_at >= since, jobs.c.recorded_at < until)
        minute = minute_of(jobs.c.recorded_at)
        counts = select(minute, jobs.c.state, func.count()).where(*window).group_by(minute, jobs.c.state) \
            .order_by(minute, jobs.c.state)
        per_minute = [(_minute(m), state, n) for m, state, n in await self._all(counts)]
        if self.backend == "postgresql":
            cuts = [func.percentile_cont(f).within_group(column) for column in (jobs.c.wait_ms, jobs.c.run_ms)
                    for f in FRACTIONS]
            (values,) = await self._all(select(*cuts).where(*window))
            wait, run = _cuts(*values[:3]), _cuts(*values[3:])
        else:
            rows = await self._all(select(jobs.c.wait_ms, jobs.c.run_ms).where(*window))
            wait = percentiles([w for w, _ in rows if w is not None])
            run = percentiles([r for _, r in rows if r is not None])
        return QueueStats(namespace, queue, since, until, per_minute, wait, run)


def _minute(text: str) -> datetime:
    moment = parse_time(text)
    assert moment is not None  # recorded_at is never NULL
    return moment


def _cuts(*values: float | None) -> Percentiles | None:
    return None if values[0] is None else Percentiles(*(float(v) for v in values))


def _conditions(filters: Filters) -> Sequence[Any]:
    out: list[Any] = []
    for column, value in ((jobs.c.namespace, filters.namespace), (jobs.c.queue, filters.queue),
                          (jobs.c.state, filters.state), (jobs.c.handler, filters.handler)):
        if value is not None:
            out.append(column == value)
    if filters.label is not None:
        key, value = filters.label
        out.append(jobs.c.labels[key].as_string() == value)
    if filters.since is not None:
        out.append(jobs.c.recorded_at >= filters.since)
    if filters.until is not None:
        out.append(jobs.c.recorded_at < filters.until)
    if filters.error:
        out.append(jobs.c.error.icontains(filters.error, autoescape=True))
    return out

