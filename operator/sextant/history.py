"""The Python client's reads of live and archived jobs (docs/archive.md, "Readers"): a job by id, live or else
archived; live and archived jobs as one list, a page at a time (archive/merged.py, the HTTP API's rule); and the
archive's answer for an idempotency key whose first job left etcd.

The client talks to the Kubernetes API server with the user's kubeconfig, not to the operator's HTTP API, so the
archive is read directly: its DSN is given (the CLI's --archive) or SEXTANT_ARCHIVE_DSN names it. Without either,
the archive is not configured and every read is what etcd holds. The archive's calls are asynchronous; they run
here on a private event loop, so that every call of this module is synchronous, as the client's are.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from typing import TYPE_CHECKING

from .archive import merged
from .archive.objects import object_of
from .archive.settings import ENV_DSN, SettingsError, check_dsn
from .client import ArchivedHolder, Client, HistoryUnavailable
from .kube.client import NotFound
from .resources import contract
from .resources.job import object_name

if TYPE_CHECKING:
    from .archive.store import Archive

NOT_CONFIGURED = (f"the archive is not configured (set {ENV_DSN} or pass --archive DSN): only live jobs are shown, "
                  "and a job's history ends with its retention")


class HistoryError(RuntimeError):
    """The archive cannot be read: its DSN, its schema, or the database (one line, for a person)."""


def archive_dsn(given: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The archive to read: the one given, else SEXTANT_ARCHIVE_DSN's; None when neither names one."""
    dsn = given or environ.get(ENV_DSN) or None
    if dsn is None:
        return None
    try:
        return check_dsn(dsn)
    except SettingsError as exc:
        raise HistoryError(str(exc)) from None


class History:
    """A client, and the archive (None: not configured), opened on first use and closed by close()."""

    def __init__(self, client: Client, dsn: str | None) -> None:
        self.client = client
        self.dsn = dsn
        self._runner: asyncio.Runner | None = None
        self._archive: Archive | None = None

    @property
    def configured(self) -> bool:
        return self.dsn is not None

    def _run(self, call: Any) -> Any:
        """Run one of the archive's coroutines (made by `call(archive)`) to its end. The database's libraries are
        imported here, when the archive is first read: every other command starts without them."""
        from .archive.errors import SchemaMismatch
        from .archive.store import Archive, ArchiveUnavailable

        if self._runner is None:
            self._runner = asyncio.Runner()
        try:
            if self._archive is None:
                assert self.dsn is not None
                self._archive = self._runner.run(Archive.open(self.dsn))  # never migrates: a reader's schema check
            return self._runner.run(call(self._archive))
        except (ArchiveUnavailable, SchemaMismatch, ValueError) as exc:
            raise HistoryError(str(exc)) from None

    def close(self) -> None:
        if self._runner is not None:
            if self._archive is not None:
                self._runner.run(self._archive.close())
            self._runner.close()
        self._runner = self._archive = None

    def archived_job(self, namespace: str, job: str) -> dict[str, Any] | None:
        """The archived job (a Job object marked archived) by id, name or uid; None when the archive has none (or
        is not configured)."""
        if self.dsn is None:
            return None
        record = self._run(lambda archive: archive.get(namespace, job))
        return object_of(record) if record is not None else None

    def get_job(self, namespace: str, job: str) -> dict[str, Any]:
        """The live job, else the archived one; NotFound (the API server's) when neither holds it."""
        try:
            return self.client.get_job(namespace, job)
        except NotFound:
            archived = self.archived_job(namespace, object_name(job))
            if archived is None:
                raise
            return archived

    def list_page(self, namespace: str | None, filters: merged.ListFilters, cursor: str | None, limit: int,
                  now: datetime) -> tuple[list[dict[str, Any]], str | None]:
        """One page of live and archived jobs (namespace None: every namespace) and the next page's cursor (None
        after the last). merged.BadListCursor for a cursor this list did not hand out."""
        path = contract.jobs_path(namespace)
        label = "=".join(filters.label) if filters.label else None

        async def fetch_live(token: str | None, n: int) -> tuple[list[dict[str, Any]], str | None]:
            # Filtered here, not by field selectors: the same answer with CRDs older than this client.
            body = self.client.list_page(path, limit=n, continue_=token, label_selector=label)
            items = [j for j in body.get("items") or [] if merged.live_matches(j, filters)]
            return items, (body.get("metadata") or {}).get("continue") or None

        at = merged.decode(cursor) if cursor else None
        if self.dsn is None:
            return asyncio.run(merged.merged_page(fetch_live, None, namespace, filters, at, limit, now))
        return self._run(lambda archive: merged.merged_page(fetch_live, archive, namespace, filters, at, limit, now))

    def key_holder(self) -> ArchivedHolder | None:
        """client.create_job's question to the archive (None when none is configured)."""
        if self.dsn is None:
            return None

        def archived(namespace: str, key: str, since: datetime) -> dict[str, Any] | None:
            try:
                record = self._run(lambda archive: archive.by_idempotency_key(namespace, key, since))
            except HistoryError as exc:
                raise HistoryUnavailable(f"idempotency key {key!r}: the archive could not be asked whether it names "
                                         f"a job that left etcd ({exc})") from None
            return object_of(record) if record is not None else None

        return archived
