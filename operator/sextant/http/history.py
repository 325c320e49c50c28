"""The archive's part of the /v2 API (docs/archive.md, "Readers"): a job no longer live is read from the archive
(GET /v2/jobs/{id}), GET /v2/jobs lists live and archived jobs as one list (archive/merged.py), and a create with an
idempotency key returns its first job for the key's window even after that job left etcd.

Without an archive (the operator was given none) every answer is what etcd holds, as before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..archive import merged
from ..archive.objects import object_of
from ..archive.query import BadCursor
from ..archive.errors import ArchiveUnavailable
from ..client import ArchivedHolder, HistoryUnavailable
from ..resources import inputs
from .auth import HttpError

if TYPE_CHECKING:  # loaded only with an archive configured (archive/errors.py)
    from ..archive.store import Archive

# GET /v2/jobs' filters, by their query parameters' names.
LIST_FILTERS = ("queue", "state", "handler", "label", "since", "until")
# Seconds a caller is told to wait when the archive cannot answer.
RETRY_AFTER = "5"
# Seconds a create waits for the archive's answer about its key (the request's own deadline bounds the rest).
KEY_LOOKUP_TIMEOUT = 10


def invalid(field: str, message: str) -> HttpError:
    return HttpError(422, "Invalid", f"{field}: {message}", field=field)


def not_a_continue_token() -> HttpError:
    return invalid("continue", "not a continue token from a previous page of this list")


def unavailable(exc: Exception) -> HttpError:
    return HttpError(503, "ArchiveUnavailable", f"{exc}; retry in a few seconds", headers={"Retry-After": RETRY_AFTER})


def list_filters(query: Mapping[str, str], now: datetime) -> merged.ListFilters:
    """GET /v2/jobs' filters, checked (422 naming the parameter and its rule)."""
    try:
        return merged.list_filters({k: query.get(k) for k in LIST_FILTERS}, now)
    except inputs.InputError as exc:
        raise invalid(exc.field, exc.message) from None


def list_cursor(token: str) -> merged.Cursor | None:
    try:
        return merged.decode(token) if token else None
    except merged.BadListCursor:
        raise not_a_continue_token() from None


class History:
    """The operator's archive as the API reads it: `archive` says which, at each request (None: no archive
    configured, or not reached yet — the operator's writer opens it, maybe after the API started)."""

    def __init__(self, archive: Callable[[], Archive | None]) -> None:
        self._archive = archive

    @property
    def archive(self) -> Archive | None:
        return self._archive()

    async def page(self, fetch_live: merged.LiveFetch, ns: str, filters: merged.ListFilters,
                   cursor: merged.Cursor | None, limit: int, now: datetime) -> tuple[list[dict[str, Any]], str | None]:
        try:
            return await merged.merged_page(fetch_live, self.archive, ns, filters, cursor, limit, now)
        except (merged.BadListCursor, BadCursor):
            raise not_a_continue_token() from None
        except ArchiveUnavailable as exc:
            raise unavailable(exc) from None
        except merged.WriterBehind as exc:
            raise HttpError(503, "ArchiveBehind", f"{exc}: the archive's writer is catching up; list again in a few "
                                                  "seconds", headers={"Retry-After": RETRY_AFTER}) from None

    async def job(self, ns: str, name: str) -> dict[str, Any] | None:
        """The archived job (a Job object marked archived), or None; a job with no archive to ask is None."""
        if self.archive is None:
            return None
        try:
            record = await self.archive.get(ns, name)
        except ArchiveUnavailable as exc:
            raise unavailable(exc) from None
        return object_of(record) if record is not None else None

    def key_holder(self) -> ArchivedHolder | None:
        """client.create_job's question to the archive, asked from the create's thread on this event loop."""
        archive = self.archive
        if archive is None:
            return None
        loop = asyncio.get_running_loop()

        def archived(ns: str, key: str, since: datetime) -> dict[str, Any] | None:
            try:
                record = asyncio.run_coroutine_threadsafe(archive.by_idempotency_key(ns, key, since),
                                                          loop).result(KEY_LOOKUP_TIMEOUT)
            except (ArchiveUnavailable, TimeoutError) as exc:
                raise HistoryUnavailable(f"idempotency key {key!r}: the archive could not be asked whether it "
                                         f"names a job that left etcd ({exc or 'no answer in time'})") from None
            return object_of(record) if record is not None else None

        return archived
