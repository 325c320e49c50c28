"""The archive's store (archive/store.py) on a real database of each backend: one suite, which every backend runs."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from sextant.__main__ import main as sextant
from sextant.archive.errors import SchemaMismatch
from sextant.archive.migrations import VERSION_TABLE
from sextant.archive.query import Filters
from sextant.archive.record import Record, record_of
from sextant.archive.schema import metadata
from sextant.archive.settings import PAYLOAD_MAX_BYTES
from sextant.archive.store import Archive, ArchiveUnavailable
from tests.harness import wait_for
from tests.harness.jobs import T0, raw_job


def rec(n: int, **fields) -> Record:
    return record_of(raw_job(n, **fields), PAYLOAD_MAX_BYTES)


async def everything(archive: Archive, filters: Filters = Filters(), page: int = 50) -> list[Record]:
    out: list[Record] = []
    cursor = None
    while True:
        got = await archive.list(filters, cursor, page)
        out += got.records
        if got.cursor is None:
            return out
        cursor = got.cursor


async def uids(archive: Archive, filters: Filters = Filters()) -> set[str]:
    return {r.uid for r in await everything(archive, filters)}


async def test_a_record_reads_back_as_it_was_written(archive: Archive):
    raw = raw_job(1, labels={"team": "größe", "sextant.dev/schedule": "nightly"}, key="k",
                  payload={"text": "日本語 ✓", "big": 2**63, "nested": [{"a": None}, 1.5, True]}, error="boom")
    record = record_of(raw, PAYLOAD_MAX_BYTES)
    assert await archive.write([record]) == 1
    for key in ("job_00000001", "job-00000001", "uid-00000001"):
        assert await archive.get("ns", key) == record
    assert await archive.get("other", "job_00000001") is None
    assert await archive.get("ns", "job_00000002") is None


async def test_written_twice_is_one_row(archive: Archive):
    batch = [rec(n) for n in range(20)]
    await archive.write(batch)
    await archive.write(batch)
    await archive.write(batch + batch)  # one batch holding a job twice, too
    assert len(await everything(archive)) == 20


async def test_the_newer_record_of_a_job_stays(archive: Archive):
    first = rec(1, state="dead", sequence=2)
    retried = rec(1, state="succeeded", sequence=3, finished=T0 + timedelta(hours=1))
    await archive.write([retried])
    await archive.write([first])  # late, older: ignored
    assert (await archive.get("ns", "uid-00000001")).state == "succeeded"
    await archive.write([rec(2, state="dead", sequence=2)])
    await archive.write([rec(2, state="succeeded", sequence=3, finished=T0 + timedelta(hours=1))])
    assert (await archive.get("ns", "uid-00000002")).state == "succeeded"
    await archive.write([first, retried])  # both in one batch: the newer
    assert (await archive.get("ns", "uid-00000001")).sequence == 3


async def test_every_filter(archive: Archive):
    await archive.write([
        rec(1, queue="emails", state="succeeded", labels={"team": "a"}),
        rec(2, queue="emails", state="dead", error="SMTP said 550: 100% Refused", labels={"team": "b"}),
        rec(3, queue="reports", handler="render", state="dead", error="out of memory"),
        rec(4, namespace="other", queue="emails", state="dead", error="smtp timeout"),
        rec(5, queue="emails", state="cancelled", finished=T0 + timedelta(hours=2)),
    ])
    assert await uids(archive) == {f"uid-0000000{n}" for n in range(1, 6)}
    cases = {
        Filters(namespace="ns"): {1, 2, 3, 5},
        Filters(namespace="ns", queue="emails"): {1, 2, 5},
        Filters(queue="emails"): {1, 2, 4, 5},
        Filters(namespace="ns", state="dead"): {2, 3},
        Filters(namespace="ns", handler="render"): {3},
        Filters(label=("team", "a")): {1},
        Filters(label=("team", "c")): set(),
        Filters(error="SMTP"): {2, 4},  # any case
        Filters(error="100%"): {2},  # % is text, not a wildcard
        Filters(error="0%"): {2},
        Filters(error="_"): set(),
        Filters(since=T0 + timedelta(hours=1)): {5},
        Filters(until=T0 + timedelta(hours=1)): {1, 2, 3, 4},
        Filters(since=T0 + timedelta(seconds=5), until=T0 + timedelta(seconds=7)): {2, 3},  # finished 3 s after
        Filters(namespace="ns", queue="emails", state="dead", label=("team", "b"), error="550"): {2},
    }
    for filters, wanted in cases.items():
        assert await uids(archive, filters) == {f"uid-0000000{n}" for n in wanted}, filters


async def test_pages_are_newest_first_and_a_cursor_continues_without_repeats_or_gaps(archive: Archive):
    # Ties on recorded_at (ten jobs finish in each second) are ordered by uid, so no page boundary splits them wrongly.
    await archive.write([rec(n, finished=T0 + timedelta(seconds=n // 10)) for n in range(95)])
    seen = await everything(archive, page=7)
    assert [r.uid for r in seen] == sorted((r.uid for r in seen), key=lambda u: (int(u[4:]) // 10, u),
                                           reverse=True)
    assert len(seen) == 95
    first = await archive.list(Filters(), None, 95)
    assert first.cursor is None


async def test_pagination_under_concurrent_writes_never_repeats_or_skips(archive: Archive):
    await archive.write([rec(n, finished=T0 + timedelta(seconds=n % 40)) for n in range(400)])
    before = await uids(archive)
    shuffle = random.Random(7)
    done = asyncio.Event()
    batches = []

    async def writer() -> None:
        n = 1000
        while not done.is_set():  # new jobs anywhere in the order, and rewrites of old ones
            old = shuffle.randrange(400)
            await archive.write([rec(n + i, finished=T0 + timedelta(seconds=shuffle.randrange(-5, 45)))
                                 for i in range(5)] + [rec(old, finished=T0 + timedelta(seconds=old % 40))])
            n += 5
            batches.append(n)
            await asyncio.sleep(0)

    task = asyncio.create_task(writer())
    listed: list[str] = []
    cursor = None
    try:
        while True:
            page = await archive.list(Filters(namespace="ns"), cursor, 13)
            listed += [r.uid for r in page.records]
            if page.cursor is None:
                break
            cursor = page.cursor
            await asyncio.sleep(0)
    finally:
        done.set()
        await task
    assert len(batches) >= 3, "the writes did not overlap the listing"
    assert len(listed) == len(set(listed)), "a record was listed twice"
    assert before <= set(listed), "a record was skipped"


async def test_an_idempotency_key_finds_its_first_job_within_its_window(archive: Archive):
    await archive.write([
        rec(1, key="order-7", created=T0),
        rec(2, key="order-7", created=T0 + timedelta(minutes=5), duplicate_of="job-00000001"),
        rec(3, key="order-7", created=T0 + timedelta(hours=25)),  # the key's next window
        rec(4, key="order-7", namespace="other", created=T0),
    ])
    first = await archive.by_idempotency_key("ns", "order-7", T0 - timedelta(hours=1))
    assert first is not None and first.name == "job-00000001"
    later = await archive.by_idempotency_key("ns", "order-7", T0 + timedelta(hours=1))
    assert later is not None and later.name == "job-00000003"
    assert await archive.by_idempotency_key("ns", "order-7", T0 + timedelta(hours=26)) is None
    assert await archive.by_idempotency_key("ns", "order-8", T0 - timedelta(hours=1)) is None


async def test_prune_deletes_only_older_records_in_batches(archive: Archive):
    await archive.write([rec(n, finished=T0 + timedelta(days=n % 10)) for n in range(100)])
    cut = T0 + timedelta(days=6)
    assert await archive.prune(cut, batch=7) == 60
    left = await everything(archive)
    assert len(left) == 40 and all(r.recorded_at >= cut for r in left)
    assert await archive.prune(cut, batch=7) == 0


async def test_stats_on_a_known_data_set(archive: Archive):
    records = [rec(n, queue="q", state="succeeded", finished=T0 + timedelta(seconds=n), wait=n / 10, run=n / 20)
               for n in range(1, 101)]  # minute 0: 59 jobs, minute 1: 41; waits 0.1..10 s, runs 0.05..5 s
    records += [rec(n, queue="q", state="dead", finished=T0 + timedelta(seconds=n - 100)) for n in range(101, 104)]
    records += [rec(200, queue="other", finished=T0 + timedelta(seconds=5))]
    records += [rec(300, queue="q", finished=T0 + timedelta(hours=2))]  # outside the window
    await archive.write(records)
    stats = await archive.stats("ns", "q", T0, T0 + timedelta(hours=1))
    assert stats.per_minute == [(T0, "dead", 3), (T0, "succeeded", 59), (T0 + timedelta(minutes=1), "succeeded", 41)]
    # 103 jobs: waits 100..10000 ms and three of 1000 ms; percentile_cont over them
    waits = sorted([n * 100 for n in range(1, 101)] + [1000] * 3)
    runs = sorted([n * 50 for n in range(1, 101)] + [2000] * 3)
    assert stats.wait_ms is not None and stats.run_ms is not None
    for got, values in ((stats.wait_ms, waits), (stats.run_ms, runs)):
        for fraction, value in ((0.5, got.p50), (0.95, got.p95), (0.99, got.p99)):
            place = fraction * (len(values) - 1)
            low = int(place)
            assert value == pytest.approx(values[low] + (values[min(low + 1, 102)] - values[low]) * (place - low))
    empty = await archive.stats("ns", "none", T0, T0 + timedelta(hours=1))
    assert empty.per_minute == [] and empty.wait_ms is None and empty.run_ms is None


async def test_an_old_schema_is_refused_with_one_line_then_migrated_by_the_command(dsn: str):
    with pytest.raises(SchemaMismatch) as refused:
        await Archive.open(dsn)
    line = str(refused.value)
    assert "\n" not in line and "older than this Sextant's" in line
    assert f"`sextant archive migrate --dsn {dsn}`" in line
    assert await asyncio.to_thread(sextant, ["archive", "migrate", "--dsn", dsn]) == 0
    archive = await Archive.open(dsn)
    try:
        async with archive.engine.connect() as conn:  # the migrated database is what schema.py describes
            diff = await conn.run_sync(lambda c: compare_metadata(
                MigrationContext.configure(c, opts={"version_table": VERSION_TABLE}), metadata))
            assert diff == []
            await conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = 'ffff'"))
            await conn.commit()
    finally:
        await archive.close()
    with pytest.raises(SchemaMismatch, match="migrated by a newer Sextant"):
        await Archive.open(dsn, migrate=True)


async def test_postgresql_down_is_unavailable_and_the_same_batch_lands_once_after(postgres):
    dsn = postgres.create_database()
    archive = await Archive.open(dsn, migrate=True)
    try:
        batch = [rec(n) for n in range(50)]
        await archive.write(batch[:10])
        postgres.stop()
        try:
            with pytest.raises(ArchiveUnavailable):
                await archive.write(batch)
            with pytest.raises(ArchiveUnavailable):
                await archive.get("ns", "job_00000001")
        finally:
            postgres.start()
        wait_for(postgres.running, 30, message="PostgreSQL up again")
        assert await archive.write(batch) == 50
        assert len(await everything(archive)) == 50
    finally:
        await archive.close()
