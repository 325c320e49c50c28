"""Alembic's entry point for the archive's revisions: it runs them on the connection migrations.py hands it."""

from alembic import context

from sextant.archive.migrations import VERSION_TABLE

context.configure(connection=context.config.attributes["connection"], version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
