"""Live and archived jobs as one list, a page at a time (GET /v2/jobs, `sextant jobs list`, the dashboard).

The order: the live jobs first, in the API server's order (by name), from one snapshot of the list (its continue
token); then the archived ones, newest first, by the archive's keyset (recorded_at, uid). Jobs move from the first
to the second while a client walks the pages (a job finishes, its record is written, its object is deleted), and
the walk must list each job once. `t0`, when the walk began (just before the snapshot), splits them:

- a job unfinished in the snapshot finishes after t0, so its record sorts after t0: the archive part lists only
  records of jobs that finished before t0 (recorded_at < t0), and never shows it again;
- a job finished in the snapshot whose record (of this finish: its sequence) had landed when its live page was read
  is left to the archive part, which lists it (it finished before t0);
- a job listed in the live part that may yet show up in the archive part (finished, not yet recorded; or holding
  an older record, from before a retry) is marked as seen, in the cursor, and skipped there. The marks are the few
  jobs the archive's writer has not caught up with; each is dropped once passed, so the cursor shrinks again.

Left out, as by any snapshot: jobs created after t0. One hole is known: a job unfinished in the snapshot that is
deleted while it waits and archived with a time before t0 can be listed twice (docs/archive.md, "Readers").

Pure but for `merged_page`, which is given the two sources: a function reading one live page, and the archive.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from ..resources import inputs
from ..resources.common import format_time, parse_duration, parse_time
from ..resources.job import is_finished, sequence_of
from .objects import object_of
from .query import Filters, Page

# Marks carried at most: the live jobs the archive's writer had not yet recorded when their page was read. Each is
# MARK_BYTES in the cursor (a 48-bit hash of the uid: a false match, which would skip a job, is ~400 in 2^48); 400
# keep the cursor under 4 KiB, well within a URL. More means the writer is far behind: the caller is told to wait.
MARK_BYTES = 6
SEEN_MAX = 400
# A page's size when none is asked, and the most one page holds (the HTTP API's and the archive's own).
DEFAULT_PAGE, MAX_PAGE = 100, 1000
CURSOR_VERSION = 1
# t0 is taken this much before the snapshot: a job's finishedAt (whole seconds) is stamped a moment before its write
# lands, so a job shown unfinished in the snapshot must not have a finish time before t0.
SNAPSHOT_MARGIN = timedelta(seconds=2)

Phase = Literal["live", "archive"]


class BadListCursor(ValueError):
    """A cursor this list did not hand out."""


class WriterBehind(RuntimeError):
    """Too many live jobs are finished but not yet archived for a cursor to carry them: list again shortly."""


@dataclass(frozen=True)
class ListFilters:
    """What every reader of the merged list filters on. `since`/`until` bound when a job finished, as [since,
    until): a job not finished yet finishes after any `since` and before no `until`."""

    queue: str | None = None
    state: str | None = None
    handler: str | None = None
    label: tuple[str, str] | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class Cursor:
    """Where a walk is: its phase, when it began (t0), the source's own token (the API server's continue token, or
    the archive's keyset cursor; None: from the start), and the marks of jobs to skip in the archive part."""

    phase: Phase
    t0: datetime
    token: str | None = None
    seen: frozenset[bytes] = field(default_factory=frozenset)


def mark(uid: str) -> bytes:
    return hashlib.blake2b(uid.encode(), digest_size=MARK_BYTES).digest()


def encode(cursor: Cursor) -> str:
    header = json.dumps([CURSOR_VERSION, cursor.phase, format_time(cursor.t0), cursor.token],
                        separators=(",", ":")).encode()
    raw = header + b"\n" + b"".join(sorted(cursor.seen))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(text: str) -> Cursor:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        header, _, marks = raw.partition(b"\n")
        version, phase, t0, token = json.loads(header)
        moment = parse_time(t0)
        if (version != CURSOR_VERSION or phase not in ("live", "archive") or moment is None
                or not (token is None or isinstance(token, str)) or len(marks) % MARK_BYTES):
            raise ValueError
    except (ValueError, TypeError):
        raise BadListCursor("not a cursor from a previous page of this list") from None
    seen = frozenset(marks[i:i + MARK_BYTES] for i in range(0, len(marks), MARK_BYTES))
    return Cursor(phase, moment, token, seen)


# A label as `key=value`, both as Kubernetes takes them (an optional DNS prefix and a name; a value of at most 63).
_LABEL_KEY = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_RE = re.compile(rf"^(?P<key>{_LABEL_KEY})=(?P<value>(([A-Za-z0-9][-A-Za-z0-9_.]{{0,61}})?[A-Za-z0-9])?)$")


def label(field: str, text: str) -> tuple[str, str]:
    match = _LABEL_RE.match(text)
    if match is None or len(match["key"]) > 316:
        raise inputs.InputError(field, f"{text[:80]!r} is not a label: use key=value, e.g. team=mail")
    return match["key"], match["value"]


def moment(field: str, text: str, now: datetime) -> datetime:
    """A time range's end: an RFC 3339 time, or a duration meaning that long before now (1h, 30m)."""
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        return inputs.run_at(field, text)
    except inputs.InputError:
        raise inputs.InputError(field, f"{text[:80]!r} is neither an RFC 3339 time (2026-12-01T10:00:00Z) nor a "
                                       "duration before now (1h, 30m)") from None


def list_filters(values: Mapping[str, str | None], now: datetime, names: Mapping[str, str] = {}) -> ListFilters:
    """A reader's filters from its inputs by name (queue, state, handler, label, since, until; absent: None),
    checked; an InputError names the input (as `names` calls it: the CLI's --queue) and its rule."""
    def named(key: str) -> str:
        return names.get(key, key)

    def given(key: str) -> str | None:
        return values.get(key)

    queue, handler, state = given("queue"), given("handler"), given("state")
    since = moment(named("since"), given("since") or "", now) if given("since") else None
    until = moment(named("until"), given("until") or "", now) if given("until") else None
    if since is not None and until is not None and until <= since:
        raise inputs.InputError(named("until"), f"must be after {named('since')} ({format_time(since)}), "
                                                f"got {format_time(until)}")
    return ListFilters(
        queue=inputs.object_name(named("queue"), queue, "queue name") if queue is not None else None,
        state=inputs.state(named("state"), state) if state is not None else None,
        handler=inputs.object_name(named("handler"), handler, "handler name") if handler is not None else None,
        label=label(named("label"), given("label") or "") if given("label") is not None else None,
        since=since, until=until)


def finished_at(job: Mapping[str, Any]) -> datetime | None:
    """When a live job finished (None while it has not)."""
    status = job.get("status") or {}
    if not is_finished(status.get("state")):
        return None
    try:
        return parse_time(status.get("finishedAt"))
    except ValueError:
        return None


def in_time_range(moment: datetime | None, filters: ListFilters) -> bool:
    """Whether a job that finished at `moment` (None: not yet) is in the filters' range."""
    if filters.since is not None and moment is not None and moment < filters.since:
        return False
    return filters.until is None or (moment is not None and moment < filters.until)


def live_matches(job: Mapping[str, Any], filters: ListFilters) -> bool:
    """Whether a live job passes the filters (the API server applies queue, state, handler and label where it can;
    the time range only this can)."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    labels = (job.get("metadata") or {}).get("labels") or {}
    return ((filters.queue is None or spec.get("queue") == filters.queue)
            and (filters.handler is None or spec.get("handler") == filters.handler)
            and (filters.state is None or status.get("state") == filters.state)
            and (filters.label is None or labels.get(filters.label[0]) == filters.label[1])
            and in_time_range(finished_at(job), filters))


def archive_filters(namespace: str | None, filters: ListFilters, t0: datetime) -> Filters:
    """The archive part's filters: the reader's, and only jobs that finished before the walk began."""
    until = t0 if filters.until is None else min(filters.until, t0)
    return Filters(namespace=namespace, queue=filters.queue, state=filters.state, handler=filters.handler,
                   label=filters.label, since=filters.since, until=until)


def live_step(items: Iterable[dict[str, Any]], records: Mapping[str, tuple[datetime, int]],
              t0: datetime) -> tuple[list[dict[str, Any]], set[bytes]]:
    """Of a live page (already filtered), the jobs the live part lists, and the marks of those the archive part
    must skip. `records` is what the archive held, when the page was read, of the page's uids: (recorded_at,
    sequence)."""
    shown, seen = [], set()
    for job in items:
        uid = str((job.get("metadata") or {}).get("uid") or "")
        finished = is_finished((job.get("status") or {}).get("state"))
        held = records.get(uid)
        if finished and held is not None and held[0] < t0 and held[1] >= sequence_of(job.get("status")):
            continue  # this very finish is archived: the archive part lists it
        shown.append(job)
        if finished or held is not None:
            seen.add(mark(uid))
    return shown, seen


def archive_step(records: Iterable[Any], seen: set[bytes]) -> list[Any]:
    """Of an archive page, the records not listed in the live part; the marks passed are dropped from `seen` (a
    uid is one row: it cannot come again)."""
    out = []
    for record in records:
        m = mark(record.uid)
        if m in seen:
            seen.discard(m)
        else:
            out.append(record)
    return out


class Source(Protocol):
    """What the merged list reads of the archive (archive.store.Archive)."""

    async def list(self, filters: Filters = ..., cursor: str | None = ..., limit: int = ...) -> Page: ...

    async def recorded(self, namespace: str | None, uids: list[str]) -> dict[str, tuple[datetime, int]]: ...


# (token, limit) → a page of live jobs already filtered, and the next page's token (None after the last).
LiveFetch = Callable[[str | None, int], Awaitable[tuple[list[dict[str, Any]], str | None]]]


async def merged_page(fetch_live: LiveFetch, archive: Source | None, namespace: str | None, filters: ListFilters,
                      cursor: Cursor | None, limit: int, now: datetime) -> tuple[list[dict[str, Any]], str | None]:
    """One page: at most one live page read, and, once the live part has ended, the archive's records to fill it
    (rebuilt as Job objects, marked archived); namespace None: every namespace. Returns the jobs and the next cursor (None after the last page). A
    page may hold fewer than `limit` jobs (filtered, or skipped) while more follow: only None ends the list."""
    at = cursor or Cursor("live", now - SNAPSHOT_MARGIN)
    seen, out = set(at.seen), []
    if at.phase == "live":
        items, token = await fetch_live(at.token, limit)
        if archive is not None and items:
            uids = [str(j["metadata"].get("uid") or "") for j in items]
            items, marks = live_step(items, await archive.recorded(namespace, uids), at.t0)
            seen |= marks
            if len(seen) > SEEN_MAX:
                raise WriterBehind(f"{len(seen)} live jobs are finished but not archived yet")
        out.extend(items)
        if token is not None:
            return out, encode(replace(at, token=token, seen=frozenset(seen)))
        if archive is None:
            return out, None
        at = Cursor("archive", at.t0)
    if archive is None:
        raise BadListCursor("this list has no archive part: the archive is not configured")
    if len(out) >= limit:
        return out, encode(replace(at, seen=frozenset(seen)))
    page = await archive.list(archive_filters(namespace, filters, at.t0), at.token, limit - len(out))
    out.extend(object_of(r) for r in archive_step(page.records, seen))
    return out, None if page.cursor is None else encode(replace(at, token=page.cursor, seen=frozenset(seen)))
