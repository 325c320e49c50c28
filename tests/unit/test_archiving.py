"""controller/archiving.py on a real SQLite archive, without a cluster: eager records land in batches and are then
known landed by (uid, resourceVersion); what does not fit is dropped, never blocking the informer; a newer version
of a job is not taken as landed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

from sextant.archive.settings import ArchiveSettings
from sextant.archive.store import Archive
from sextant.controller import archiving
from sextant.controller.archiving import Archiver, refusal
from sextant.kube import metrics


def finished(name: str, rv: int = 10) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "shop", "uid": f"u-{name}", "resourceVersion": str(rv),
                         "generation": 1, "creationTimestamp": "2026-03-01T12:00:00Z"},
            "spec": {"queue": "q", "handler": "h", "payload": {"n": 1}},
            "status": {"state": "succeeded", "finishedAt": "2026-03-01T12:01:00Z", "sequence": 1,
                       "attempts": [{"attempt": 1, "sequence": 1, "result": "succeeded"}]}}


async def migrated(path: Path) -> str:
    dsn = f"sqlite:///{path}"
    await (await Archive.open(dsn, migrate=True)).close()
    return dsn


def test_eager_records_land_in_a_batch_and_are_known_landed_by_version(tmp_path):
    async def go() -> None:
        dsn = await migrated(tmp_path / "a.sqlite")
        leading = asyncio.Event()
        leading.set()
        landed: list[tuple[str, str]] = []
        archiver = Archiver(ArchiveSettings(dsn), kube=None, leading=leading, landed=landed.append)  # type: ignore[arg-type]
        await archiver.check()
        for i in range(3):
            archiver.offer(finished(f"job-{i}"))
        archiver.offer(finished("job-0", rv=11))  # a newer version of the same job replaces the older
        writer = asyncio.create_task(archiver.run())
        try:
            for _ in range(100):
                if len(landed) == 3:
                    break
                await asyncio.sleep(0.05)
        finally:
            writer.cancel()
        assert sorted(landed) == [("shop", "job-0"), ("shop", "job-1"), ("shop", "job-2")]
        assert archiver.landed("u-job-0", 11) and not archiver.landed("u-job-0", 10)
        assert archiver.landed("u-job-1", 10) and not archiver.landed("u-job-1", 12)
        assert metrics.REGISTRY.get_sample_value("sextant_archive_unavailable") == 0
        assert "records waiting" in archiver.status() and "ArchiveUnavailable" not in archiver.status()
        await archiver.close()
        reader = await Archive.open(dsn)
        try:
            record = await reader.get("shop", "job-0")
            assert record is not None and record.state == "succeeded" and record.payload == {"n": 1}
        finally:
            await reader.close()

    asyncio.run(go())


def test_offers_past_the_bound_or_from_a_standby_are_dropped(tmp_path, monkeypatch):
    async def go() -> None:
        dsn = await migrated(tmp_path / "b.sqlite")
        leading = asyncio.Event()
        archiver = Archiver(ArchiveSettings(dsn), kube=None, leading=leading)  # type: ignore[arg-type]
        archiver.offer(finished("job-standby"))
        assert archiver._pending == {}  # a standby writes nothing
        leading.set()
        monkeypatch.setattr(archiving, "EAGER_MAX", 2)
        for i in range(5):
            archiver.offer(finished(f"job-{i}"))
        assert list(archiver._pending) == [("shop", "job-0"), ("shop", "job-1")]  # the rest: the delete path's
        archiver.request(("shop", "job-9"), "u-job-9", 10)  # a delete's request is still taken (to be read)
        assert archiver._pending[("shop", "job-9")] == ("u-job-9", 10, None)

    asyncio.run(go())


def test_a_schema_mismatch_or_a_file_that_cannot_be_made_is_refused_in_one_line(tmp_path):
    async def go() -> None:
        empty = f"sqlite:///{tmp_path / 'empty.sqlite'}"
        line = await refusal(ArchiveSettings(empty), migrate=False)
        assert line is not None and "sextant archive migrate" in line and "\n" not in line
        assert await refusal(ArchiveSettings(empty), migrate=True) is None  # the embedded file: migrated
        nowhere = tmp_path / "file"
        nowhere.write_text("")
        unreachable = f"sqlite:///{nowhere}/under/a/file.sqlite"  # its directory cannot be made
        line = await refusal(ArchiveSettings(unreachable), migrate=True)
        assert line is not None and "cannot be created" in line and "under/a" in line and "\n" not in line

    asyncio.run(go())


def test_which_archive_the_operator_uses():
    """$SEXTANT_ARCHIVE_DSN when set (never migrated by the operator); else `sextant dev`'s embedded SQLite file
    (migrated: its own); else none. A bad value is refused naming its variable."""
    import argparse

    import pytest

    from sextant.archive.settings import SettingsError
    from sextant.controller.command import archive_settings

    operator, dev = argparse.Namespace(embedded_archive=False), argparse.Namespace(embedded_archive=True)
    assert archive_settings(operator, {}) == (None, False)
    told, migrate = archive_settings(dev, {})
    assert told is not None and told.dsn.startswith("sqlite:///") and told.dsn.endswith("archive.sqlite") and migrate
    told, migrate = archive_settings(dev, {"SEXTANT_ARCHIVE_DSN": "postgresql://u@db/sx"})
    assert told is not None and told.dsn == "postgresql://u@db/sx" and not migrate
    with pytest.raises(SettingsError, match="not an archive's DSN"):
        archive_settings(operator, {"SEXTANT_ARCHIVE_DSN": "mysql://u@h/db"})
    with pytest.raises(SettingsError, match="SEXTANT_ARCHIVE_RETENTION"):
        archive_settings(operator, {"SEXTANT_ARCHIVE_DSN": "sqlite:////tmp/a.sqlite", "SEXTANT_ARCHIVE_RETENTION": "x"})


def test_an_operator_without_an_archive_does_not_load_the_database_libraries():
    """SQLAlchemy and Alembic cost ~40 MB of RSS: the operator and its HTTP API load them only to open an archive."""
    code = ("import sys, sextant.controller.operator, sextant.controller.command, sextant.http.api; "
            "print(sorted(m for m in ('sqlalchemy', 'alembic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
