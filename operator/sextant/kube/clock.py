"""The wall clock every process reads: now, aware, in UTC. Whatever takes a `now` callable (a reconciler, the
lease keepers, the HTTP API) defaults to this one, so that a test can hand it another."""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
