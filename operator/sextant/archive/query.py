"""What a reader asks the archive for: a list's filters, its page, and the keyset cursor that continues it."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime

from ..resources.common import format_time, parse_time
from .record import Record

# A list page's size when none is asked, and the most one page holds.
PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


class BadCursor(ValueError):
    """A cursor this archive did not hand out (or one from another list)."""


@dataclass(frozen=True)
class Filters:
    """A list's filters, all optional and all applied together. `since`/`until` bound recorded_at (when the job
    finished) as [since, until); `label` is a (key, value) pair; `error` is text the last attempt's error contains,
    in any case."""

    namespace: str | None = None
    queue: str | None = None
    state: str | None = None
    handler: str | None = None
    label: tuple[str, str] | None = None
    since: datetime | None = None
    until: datetime | None = None
    error: str | None = None


@dataclass(frozen=True)
class Position:
    """Where a page ended: the last record's (recorded_at, uid). Lists are newest first by exactly this pair, so a
    page that continues from it neither repeats nor skips a record, whatever was written meanwhile."""

    recorded_at: datetime
    uid: str


@dataclass(frozen=True)
class Page:
    records: list[Record]
    cursor: str | None  # None: this was the last page


def encode_cursor(position: Position) -> str:
    text = json.dumps([format_time(position.recorded_at), position.uid], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    try:
        at, uid = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        moment = parse_time(at)
        if moment is None or not isinstance(uid, str):
            raise ValueError
        return Position(moment, uid)
    except (ValueError, TypeError):
        raise BadCursor(f"{cursor[:40]!r} is not a cursor this archive handed out") from None
