"""The archive's failures, apart from the modules that talk to the database: a process that only handles them (the
operator without an archive configured, the HTTP API) does not load SQLAlchemy and Alembic (~40 MB of RSS)."""

from __future__ import annotations


class ArchiveUnavailable(RuntimeError):
    """The database cannot be reached (down, refusing connections, locked): nothing of the call landed, or it
    landed whole; try again later."""


class SchemaMismatch(RuntimeError):
    """The database's schema is not the one this code reads: older (migrate it) or newer (upgrade Sextant)."""
