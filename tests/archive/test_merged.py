"""The merged list of live and archived jobs (archive/merged.py) walked page by page while jobs finish, are archived
and deleted between the pages: no job twice, none that was there when the walk began skipped. The archive is a real
one (SQLite, and the harness's PostgreSQL); the live side is a model of the API server's list: one snapshot per walk,
continued by its token, as the API server's continue tokens are."""

from __future__ import annotations

import asyncio
import copy
import itertools
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sextant.archive import merged
from sextant.archive.merged import BadListCursor, Cursor, ListFilters, WriterBehind, merged_page
from sextant.archive.objects import is_archived
from sextant.archive.record import record_of
from sextant.archive.store import Archive
from sextant.resources.common import format_time
from tests.harness.jobs import T0, raw_job

NS = "ns"
_dbs = itertools.count()


class World:
    """Live jobs (by name) and a real archive, with a clock that moves one second per step."""

    def __init__(self, archive: Archive) -> None:
        self.archive = archive
        self.live: dict[str, dict[str, Any]] = {}
        self.now = T0 + timedelta(hours=1)
        self.snapshots: list[list[dict[str, Any]]] = []
        self.next = 1000
        self.filters = ListFilters()  # applied to each page, as the readers' live fetches do (merged.live_matches)

    async def fetch_live(self, token: str | None, limit: int) -> tuple[list[dict[str, Any]], str | None]:
        if token is None:
            self.snapshots.append([copy.deepcopy(self.live[n]) for n in sorted(self.live)])
            snap, start = len(self.snapshots) - 1, 0
        else:
            snap, start = map(int, token.split(":"))
        items = self.snapshots[snap][start:start + limit]
        end = start + limit
        return ([j for j in items if merged.live_matches(j, self.filters)],
                f"{snap}:{end}" if end < len(self.snapshots[snap]) else None)

    def tick(self) -> None:
        self.now += timedelta(seconds=1)

    def create(self) -> None:
        self.next += 1
        job = raw_job(self.next, namespace=NS, state="queued", created=self.now)
        self.live[job["metadata"]["name"]] = job

    def finish(self, job: dict[str, Any]) -> None:
        job["status"]["state"] = "succeeded"
        job["status"]["finishedAt"] = format_time(self.now, precise=False)

    async def step(self, op: str, pick: int) -> None:
        self.tick()
        names = sorted(self.live)
        if op == "create" or not names:
            self.create()
            return
        job = self.live[names[pick % len(names)]]
        finished = job["status"]["state"] == "succeeded"
        if op == "finish" and not finished:
            self.finish(job)
        elif op == "archive" and finished:
            await self.archive.write([record_of(job, 1024)])
        elif op == "delete" and finished:  # retention deletes only what has landed in the archive
            held = await self.archive.recorded(NS, [job["metadata"]["uid"]])
            if held:
                del self.live[job["metadata"]["name"]]


async def _world(archive: Archive, unfinished: int, finished: int, archived: int, gone: int) -> World:
    """Jobs 1.. in four kinds, in this order: unfinished, finished (not archived), finished and archived (still
    live), archived and deleted."""
    world = World(archive)
    kinds = ["unfinished"] * unfinished + ["finished"] * finished + ["archived"] * archived + ["gone"] * gone
    for n, kind in enumerate(kinds, 1):
        job = raw_job(n, namespace=NS, state="queued" if kind == "unfinished" else "succeeded")
        world.live[job["metadata"]["name"]] = job
        if kind in ("archived", "gone"):
            await archive.write([record_of(job, 1024)])
        if kind == "gone":
            del world.live[job["metadata"]["name"]]
    return world


async def _walk(world: World, limit: int, ops: list[tuple[str, int]]) -> tuple[list[str], set[str]]:
    before = {j["metadata"]["uid"] for j in world.live.values()}
    page = await world.archive.list(merged.Filters(namespace=NS), limit=1000)
    before |= {r.uid for r in page.records}
    listed: list[str] = []
    cursor: Cursor | None = None
    steps = iter(ops)
    while True:
        jobs, token = await merged_page(world.fetch_live, world.archive, NS, ListFilters(), cursor, limit, world.now)
        listed.extend(j["metadata"]["uid"] for j in jobs)
        if token is None:
            return listed, before
        cursor = merged.decode(token)
        for op, pick in itertools.islice(steps, 3):
            await world.step(op, pick)


async def _open(dsn: str) -> Archive:
    return await Archive.open(dsn, migrate=True)


@pytest.fixture(scope="module")
def sqlite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("merged")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=st.tuples(*[st.integers(0, 6)] * 4), limit=st.integers(1, 5),
       ops=st.lists(st.tuples(st.sampled_from(["create", "finish", "archive", "delete"]), st.integers(0, 50)),
                    max_size=60))
def test_no_job_twice_none_skipped_while_jobs_are_archived(sqlite_dir: Path, counts: tuple[int, int, int, int],
                                                           limit: int, ops: list[tuple[str, int]]):
    async def run() -> None:
        archive = await _open(f"sqlite:///{sqlite_dir / f'{next(_dbs)}.sqlite'}")
        try:
            world = await _world(archive, *counts)
            listed, before = await _walk(world, limit, ops)
        finally:
            await archive.close()
        assert len(listed) == len(set(listed)), "a job listed twice"
        assert before <= set(listed), f"skipped: {sorted(before - set(listed))}"

    asyncio.run(run())


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_live_first_then_archived_marked(backend: str, tmp_path: Path, request: pytest.FixtureRequest):
    dsn = (f"sqlite:///{tmp_path / 'a.sqlite'}" if backend == "sqlite"
           else request.getfixturevalue("postgres").create_database())
    archive = await _open(dsn)
    try:
        world = await _world(archive, 2, 1, 1, 2)
        jobs, token = await merged_page(world.fetch_live, archive, NS, ListFilters(), None, 10, world.now)
        assert token is None
        live = [j["metadata"]["name"] for j in jobs if not is_archived(j)]
        archived = [j for j in jobs if is_archived(j)]
        # The live part in name order, the finished-and-archived job left to the archive part, newest first there.
        assert live == ["job-00000001", "job-00000002", "job-00000003"]
        assert [j["metadata"]["name"] for j in archived] == ["job-00000006", "job-00000005", "job-00000004"]
        assert archived[0]["status"]["state"] == "succeeded" and archived[0]["spec"]["payload"] == {"n": 6}
        # Filters apply to both parts; the time range is over when a job finished (an unfinished one: after any).
        world.filters = ListFilters(since=T0 + timedelta(seconds=8))  # job n finished at T0 + n + 3 s
        jobs, _ = await merged_page(world.fetch_live, archive, NS, world.filters, None, 10, world.now)
        assert [j["metadata"]["name"] for j in jobs] == ["job-00000001", "job-00000002", "job-00000006",
                                                         "job-00000005"]
    finally:
        await archive.close()


async def test_a_cursor_must_be_one_this_list_handed_out(tmp_path: Path):
    for text in ("", "abc", "e30", merged.encode(Cursor("live", T0))[:-3] + "!!!"):
        with pytest.raises(BadListCursor):
            merged.decode(text)
    at = Cursor("archive", T0, "tok", frozenset({merged.mark("a"), merged.mark("b")}))
    assert merged.decode(merged.encode(at)) == at
    archive = await _open(f"sqlite:///{tmp_path / 'a.sqlite'}")
    try:
        world = await _world(archive, 0, 0, 0, 0)
        with pytest.raises(BadListCursor):  # an archive cursor where no archive is configured
            await merged_page(world.fetch_live, None, NS, ListFilters(), at, 10, world.now)
    finally:
        await archive.close()


async def test_a_writer_far_behind_is_said_not_carried(tmp_path: Path):
    archive = await _open(f"sqlite:///{tmp_path / 'a.sqlite'}")
    try:
        world = await _world(archive, 0, merged.SEEN_MAX + 1, 0, 0)
        with pytest.raises(WriterBehind):
            await merged_page(world.fetch_live, archive, NS, ListFilters(), None, 1000, world.now)
    finally:
        await archive.close()


def test_time_range_over_when_a_job_finished():
    at = datetime(2026, 12, 1, 12, tzinfo=T0.tzinfo)
    assert merged.in_time_range(at, ListFilters(since=at, until=at + timedelta(seconds=1)))
    assert not merged.in_time_range(at, ListFilters(until=at))
    assert merged.in_time_range(None, ListFilters(since=at)) and not merged.in_time_range(None, ListFilters(until=at))
