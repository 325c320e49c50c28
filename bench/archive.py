"""The archive's cost (issue 42's targets): load N finished jobs' records into a fresh archive in batches, as the
operator would write them, then time the reads a user makes of it.

    .venv/bin/python bench/archive.py [--backend postgresql|sqlite] [--records N] [--batch 500] [--samples 300]

PostgreSQL is a server of its own (tests/harness/postgres.py, with PostgreSQL's durable defaults: fsync on),
default 1,000,000 records; SQLite a file in a temporary directory, default 200,000. The jobs are spread over a day,
4 namespaces, 8 queues, 6 handlers, 90 % succeeded, 7 % dead (with an error), 3 % cancelled, one in five with an
idempotency key, a ~300-byte payload. Reported:
- write cost: this process's CPU per record (building the record from the raw Job, and writing it), the database
  server's CPU per record (the postmaster and its backends, from /proc; SQLite runs inside this process), the
  archive's bytes per record (pg_total_relation_size, indexes and TOAST included; the SQLite file after a
  checkpoint), and records per second;
- read latency, p50/p99 over --samples each, after ANALYZE (autovacuum does the same on its own, later): `get` of a
  random archived job by its id, a filtered `list` page (namespace + queue + state, 50 records; half of the
  samples are the next page of a list, from its cursor), and a page filtered by label and by error text. Target on PostgreSQL:
  p50 ≤ 50 ms, p99 ≤ 200 ms.
Writes bench/results/<stamp>-archive-<backend>.md and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from bench.report import git_revision, write_report  # noqa: E402
from sextant.archive.query import Filters  # noqa: E402
from sextant.archive.record import record_of  # noqa: E402
from sextant.archive.settings import PAYLOAD_MAX_BYTES  # noqa: E402
from sextant.archive.store import Archive  # noqa: E402
from tests.harness.jobs import T0, raw_job  # noqa: E402
from tests.harness.postgres import Postgres  # noqa: E402

NAMESPACES = [f"team-{i}" for i in range(4)]
QUEUES = [f"queue-{i}" for i in range(8)]
HANDLERS = [f"handler-{i}" for i in range(6)]
DAY = timedelta(days=1)
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def job(n: int, total: int, pick: random.Random) -> dict[str, Any]:
    roll = pick.random()
    state = "succeeded" if roll < 0.9 else "dead" if roll < 0.97 else "cancelled"
    return raw_job(n, namespace=NAMESPACES[n % 4], state=state, queue=QUEUES[n % 8], handler=HANDLERS[n % 6],
                   created=T0 + DAY * (n / total), wait=pick.expovariate(2), run=pick.expovariate(1),
                   attempts=1 if state != "dead" else 3, key=f"order-{n}" if n % 5 == 0 else None,
                   error=f"exit status 1: upstream {pick.choice(['timeout', 'refused', 'reset'])} after "
                         f"{pick.randrange(1, 60)} s" if state == "dead" else None,
                   labels={"app.kubernetes.io/part-of": "shop", "tier": pick.choice(["gold", "silver", "bronze"])},
                   payload={"order": n, "customer": f"cust-{pick.randrange(100_000)}", "items": [
                       {"sku": f"sku-{pick.randrange(10_000)}", "qty": pick.randrange(1, 5)} for _ in range(4)],
                       "note": "é" * 80})


def server_cpu(pid: int) -> float:
    """Seconds of CPU of a process, its live children and its reaped ones (PostgreSQL's backends)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(entry.name) == pid:
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        elif int(fields[1]) == pid:
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICK


def quantiles(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_ms": round(cuts[49], 2), "p99_ms": round(cuts[98], 2), "max_ms": round(max(samples), 2)}


async def timed(samples: int, call) -> dict[str, float]:
    out = []
    for i in range(samples):
        start = time.perf_counter()
        await call(i)
        out.append((time.perf_counter() - start) * 1000)
    return quantiles(out)


async def run(dsn: str, backend: str, records: int, batch: int, samples: int, db_pid: int | None,
              size_of) -> dict[str, Any]:
    archive = await Archive.open(dsn, migrate=True, pool_size=2)
    pick = random.Random(42)
    build_cpu = write_cpu = 0.0
    db_before = server_cpu(db_pid) if db_pid else 0.0
    wall = time.monotonic()
    for first in range(0, records, batch):
        raws = [job(n, records, pick) for n in range(first, min(first + batch, records))]
        t0 = time.process_time()
        built = [record_of(raw, PAYLOAD_MAX_BYTES) for raw in raws]
        t1 = time.process_time()
        await archive.write(built)
        write_cpu += time.process_time() - t1
        build_cpu += t1 - t0
        if first and first % (batch * 200) == 0:
            print(f"{first} records, {first / (time.monotonic() - wall):.0f}/s", file=sys.stderr)
    wall = time.monotonic() - wall
    db_cpu = server_cpu(db_pid) - db_before if db_pid else None
    async with archive.engine.connect() as conn:
        await conn.execute(text("ANALYZE"))
        await conn.commit()
    size = await size_of(archive)

    async def get(i: int) -> None:
        n = pick.randrange(records)
        got = await archive.get(NAMESPACES[n % 4], f"job_{n:08d}")
        assert got is not None

    cursors: dict[int, str | None] = {}

    def by_queue(i: int, **more: Any) -> Filters:
        return Filters(namespace=NAMESPACES[i % 8 % 4], queue=QUEUES[i % 8], **more)  # job n: queue n%8, ns n%4

    async def page(i: int) -> None:
        cursor = cursors.get(i % 8) if i % 16 >= 8 else None  # the next page of the same list
        got = await archive.list(by_queue(i, state="dead"), cursor, 50)
        assert got.records or cursor
        cursors[i % 8] = got.cursor

    async def by_label(i: int) -> None:
        assert (await archive.list(Filters(namespace=NAMESPACES[i % 4], label=("tier", "gold")), None, 50)).records

    async def by_error(i: int) -> None:
        assert (await archive.list(by_queue(i, error="REFUSED"), None, 50)).records

    reads = {"get": await timed(samples, get), "list page (namespace+queue+state)": await timed(samples, page),
             "list page (label)": await timed(samples // 3, by_label),
             "list page (queue + error text)": await timed(samples // 3, by_error)}
    await archive.close()
    return {"backend": backend, "records": records, "batch": batch, "write_s": round(wall, 1),
            "records_per_s": round(records / wall),
            "client_cpu_ms_per_record": {"build": round(build_cpu * 1000 / records, 4),
                                         "write": round(write_cpu * 1000 / records, 4)},
            "db_cpu_ms_per_record": round(db_cpu * 1000 / records, 4) if db_cpu is not None else None,
            "bytes_per_record": round(size / records), "archive_bytes": size, "reads": reads}


async def pg_size(archive: Archive) -> int:
    async with archive.engine.connect() as conn:
        return (await conn.execute(text("SELECT pg_total_relation_size('sextant_jobs')"))).scalar_one()


def markdown(report: dict[str, Any]) -> str:
    r = report["result"]
    lines = [f"# Archive benchmark, {r['backend']}: {r['records']:,} records ({report['stamp']})", "",
             f"`{report['command']}` on commit {report['commit']} ({report['cpus']} CPUs, load "
             f"{report['loadavg']} at the end; other processes shared the machine).", "",
             "| write | value |", "| --- | --- |",
             f"| records/s (batches of {r['batch']}) | {r['records_per_s']:,} |",
             f"| writer CPU ms/record: build the record | {r['client_cpu_ms_per_record']['build']} |",
             f"| writer CPU ms/record: write it | {r['client_cpu_ms_per_record']['write']} |",
             f"| database server CPU ms/record | {r['db_cpu_ms_per_record'] if r['db_cpu_ms_per_record'] is not None else 'in the writer (SQLite)'} |",
             f"| bytes/record (table, indexes, TOAST) | {r['bytes_per_record']:,} |", "",
             "| read | p50 ms | p99 ms | max ms |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | {q['p50_ms']} | {q['p99_ms']} | {q['max_ms']} |" for name, q in r["reads"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--records", type=int, default=None, help="default 1,000,000 (PostgreSQL), 200,000 (SQLite)")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    records = args.records or (1_000_000 if args.backend == "postgresql" else 200_000)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    commit = git_revision(ROOT) or "?"  # the code measured: what was checked out when it started
    work = Path(tempfile.mkdtemp(prefix="sextant-archive-bench-"))
    server = None
    try:
        if args.backend == "postgresql":
            server = Postgres(durable=True)
            server.start()
            result = asyncio.run(run(server.create_database("bench"), "postgresql", records, args.batch,
                                     args.samples, server.server_pid(), pg_size))
        else:
            path = work / "archive.sqlite"

            async def sqlite_size(archive: Archive) -> int:
                async with archive.engine.connect() as conn:
                    await conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
                return sum(p.stat().st_size for p in work.glob("archive.sqlite*"))

            result = asyncio.run(run(f"sqlite:///{path}", "sqlite", records, args.batch, args.samples, None,
                                     sqlite_size))
    finally:
        if server is not None:
            server.destroy()
    report = {"stamp": stamp, "command": " ".join(["python bench/archive.py", *sys.argv[1:]]),
              "commit": commit, "cpus": os.cpu_count(),
              "loadavg": [round(x, 2) for x in os.getloadavg()], "result": result}
    base = write_report(args.out, f"{stamp}-archive-{args.backend}", report, markdown(report))
    print(f"wrote {base}.json and .md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
