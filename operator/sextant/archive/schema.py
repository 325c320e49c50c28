"""The archive's tables, one definition for PostgreSQL and SQLite (SQLAlchemy Core), and the indexes its readers
need. A change here is a new revision under revisions/versions/ (migrations.py); tests/archive checks that the
migrated database and this definition agree."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (JSON, BigInteger, Column, DateTime, Index, Integer, MetaData, String, Table, Text,
                        TypeDecorator)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

metadata = MetaData()


class UtcDateTime(TypeDecorator[datetime]):
    """A moment in UTC: timestamptz on PostgreSQL; on SQLite, which has no time zones, the naive UTC text SQLAlchemy
    writes (fixed width, so that it sorts and compares as time does), read back as an aware datetime."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return self.process_bind_param(value, dialect)


# JSONB on PostgreSQL (binary, smaller to read back); JSON text elsewhere. A JSON null is stored as SQL NULL.
Json = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
NAME = String(253)  # a Kubernetes object name, an idempotency or concurrency key (Job's own limits)
SHORT = String(63)  # a namespace, a queue, a handler, a schedule, a label value

jobs = Table(
    "sextant_jobs", metadata,
    Column("uid", String(64), primary_key=True),  # the Job object's metadata.uid: the upserts' key
    Column("namespace", SHORT, nullable=False),
    Column("name", NAME, nullable=False),
    Column("queue", SHORT, nullable=False),
    Column("handler", SHORT, nullable=False),
    Column("state", String(16), nullable=False),
    Column("recorded_at", UtcDateTime, nullable=False),  # Record.recorded_at: the order of every list, and pruning
    Column("created_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime),
    Column("labels", Json, nullable=False),
    Column("idempotency_key", NAME),
    Column("duplicate_of", NAME),
    Column("priority", Integer, nullable=False),
    Column("concurrency_key", NAME),
    Column("run_at", UtcDateTime),
    Column("payload", Json),
    Column("payload_bytes", Integer, nullable=False),
    Column("payload_note", Text),
    Column("attempt", Integer, nullable=False),
    Column("sequence", Integer, nullable=False),  # with recorded_at, which of two records of a job is newer
    Column("attempts", Json, nullable=False),
    Column("dropped_attempts", Integer, nullable=False),
    Column("output", Json),
    Column("output_note", Text),
    Column("error", Text),
    Column("message", Text),
    Column("conditions", Json, nullable=False),
    Column("schedule", SHORT),
    Column("scheduled_at", String(64)),
    Column("wait_ms", BigInteger),  # the last attempt's wait from queued to started, and its run: the charts'
    Column("run_ms", BigInteger),   # percentiles, computed once when the record is made
)

# Every list is newest first by (recorded_at, uid), within a namespace or across all, filtered by at most one of
# queue, state or handler through its index (other filters are checked on the rows the index walks); pruning walks
# recorded_at; `get` by uid (the key) or namespace + name; an idempotency key's first job by namespace + key.
Index("ix_sextant_jobs_recorded", jobs.c.recorded_at, jobs.c.uid)
Index("ix_sextant_jobs_namespace", jobs.c.namespace, jobs.c.recorded_at, jobs.c.uid)
Index("ix_sextant_jobs_queue", jobs.c.namespace, jobs.c.queue, jobs.c.recorded_at, jobs.c.uid)
Index("ix_sextant_jobs_state", jobs.c.namespace, jobs.c.state, jobs.c.recorded_at, jobs.c.uid)
Index("ix_sextant_jobs_handler", jobs.c.namespace, jobs.c.handler, jobs.c.recorded_at, jobs.c.uid)
Index("ix_sextant_jobs_name", jobs.c.namespace, jobs.c.name)
Index("ix_sextant_jobs_idempotency", jobs.c.namespace, jobs.c.idempotency_key, jobs.c.created_at,
      postgresql_where=jobs.c.idempotency_key.isnot(None), sqlite_where=jobs.c.idempotency_key.isnot(None))

# Columns a record is written with: all of them (the upsert replaces every one but the key).
COLUMNS = tuple(c.name for c in jobs.c)


class minute_of(FunctionElement[str]):
    """The UTC minute of a moment as text, 'YYYY-MM-DDTHH:MM': the charts' buckets. Neither backend has a portable
    form (date_trunc is PostgreSQL's, strftime SQLite's), hence one compilation each."""

    type = String()
    inherit_cache = True


@compiles(minute_of, "postgresql")
def _minute_pg(element: minute_of, compiler: Any, **kw: Any) -> str:
    return "to_char(%s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI')" % compiler.process(element.clauses, **kw)


@compiles(minute_of, "sqlite")
def _minute_sqlite(element: minute_of, compiler: Any, **kw: Any) -> str:
    return "strftime('%%Y-%%m-%%dT%%H:%%M', %s)" % compiler.process(element.clauses, **kw)
