"""The archive's database suite runs every test on both backends: a fresh SQLite file, and a fresh database on the
session's own PostgreSQL server (tests/harness/postgres.py, started only if a PostgreSQL test runs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sextant.archive.store import Archive

BACKENDS = ["sqlite", "postgresql"]



@pytest.fixture(params=BACKENDS)
def dsn(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'archive.sqlite'}"
    return request.getfixturevalue("postgres").create_database()


@pytest.fixture
async def archive(dsn: str) -> AsyncIterator[Archive]:
    opened = await Archive.open(dsn, migrate=True)
    try:
        yield opened
    finally:
        await opened.close()
