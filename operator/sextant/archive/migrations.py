"""The archive's schema versions: Alembic revisions (revisions/versions/), run from code, never from an alembic.ini.
A database behind the code is refused with one line naming the command that migrates it; `migrate` runs them."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

REVISIONS = Path(__file__).resolve().parent / "revisions"
# Alembic's bookkeeping table, named for Sextant: the archive may share a database with an application's own Alembic.
VERSION_TABLE = "sextant_archive_version"


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(REVISIONS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    revision = ScriptDirectory.from_config(_config()).get_current_head()
    assert revision is not None
    return revision


def current(connection: Connection) -> str | None:
    """The revision the database is at; None for one without the archive's schema."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def behind(revision: str | None) -> bool:
    """Whether a database at `revision` is one this code can migrate: no schema yet, or an older revision of its own."""
    known = {script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()}
    return revision != head() and (revision is None or revision in known)


def refusal(revision: str | None, shown_dsn: str) -> str | None:
    """Why a database at `revision` cannot be used by this code (one line), or None."""
    wanted = head()
    if revision == wanted:
        return None
    if not behind(revision):
        return (f"the archive at {shown_dsn} has schema revision {revision}, which this Sextant does not know "
                f"(it reads {wanted}): it was migrated by a newer Sextant; run that version")
    at = f"at schema revision {revision}" if revision else "without the archive's schema"
    return (f"the archive at {shown_dsn} is {at}, older than this Sextant's {wanted}: run "
            f"`sextant archive migrate --dsn {shown_dsn}`")


def upgrade(connection: Connection) -> None:
    """Migrate to the newest revision, in the caller's transaction (PostgreSQL's DDL is transactional)."""
    command.upgrade(_config(connection), "head")
