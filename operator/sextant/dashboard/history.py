"""The dashboard's archived jobs (docs/archive.md, "Readers"): a section of the jobs view with the archive's jobs
that its filter selects, newest first, a page at a time, and a job no longer live read from the archive. The
archive is read directly (--archive DSN, or SEXTANT_ARCHIVE_DSN), as the CLI reads it; without one the jobs view
says it is not configured, and everything else works as before."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..archive.errors import SchemaMismatch
from ..archive.objects import object_of
from ..archive.query import BadCursor, Filters
from ..archive.store import Archive, ArchiveUnavailable
from . import pages
from .views import JobFilter

# Archived jobs per page of the jobs view's archived section.
PAGE = 50
NOT_CONFIGURED = ("the archive is not configured (start the dashboard with --archive DSN or SEXTANT_ARCHIVE_DSN): "
                  "only live jobs are shown")


class ArchivedJobs:
    def __init__(self, dsn: str | None) -> None:
        self.dsn = dsn
        self.archive: Archive | None = None
        self.problem: str | None = None if dsn else NOT_CONFIGURED

    async def open(self) -> None:
        if self.dsn is None:
            return
        try:
            self.archive = await Archive.open(self.dsn)  # a reader: never migrates
        except (ArchiveUnavailable, SchemaMismatch, ValueError) as exc:
            self.problem = str(exc)  # said on the jobs page; the live views work without it

    async def close(self) -> None:
        if self.archive is not None:
            await self.archive.close()

    async def section(self, flt: JobFilter, namespace: str | None, cursor: str | None, now: datetime, wide: bool,
                      extra: dict[str, str]) -> str:
        """A page of the archive with the filter's queue, state and handler (its schedule and id text are checked
        on the page's jobs: the archive has no index for them)."""
        if self.archive is None:
            return pages.archived_section([], None, flt, now, wide, extra, self.problem)
        try:
            page = await self.archive.list(Filters(namespace=namespace, queue=flt.queue, state=flt.state,
                                                   handler=flt.handler), cursor, PAGE)
        except BadCursor as exc:
            return pages.error(f"archived: {exc}")
        except ArchiveUnavailable as exc:
            return pages.archived_section([], None, flt, now, wide, extra, str(exc))
        items = [job for job in map(object_of, page.records) if flt.matches(job)]
        return pages.archived_section(items, page.cursor, flt, now, wide, extra)

    async def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The archived job (a Job object marked archived), or None (none, no archive, or the archive down)."""
        if self.archive is None:
            return None
        try:
            record = await self.archive.get(namespace, name)
        except ArchiveUnavailable:
            return None
        return object_of(record) if record is not None else None
