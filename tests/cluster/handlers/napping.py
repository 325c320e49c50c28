"""SDK handlers of the worker tests (`sextant worker --module napping`).

The payload steers them: `seconds` (how long the first attempt takes), `then` (later attempts; default 0), and
`dir` (where to leave marks: <job>.<attempt>.started / .cancelled / .done, a line per process that got there, so a
test sees what ran, and how many times)."""

import asyncio
import os
import pathlib
import time

from sextant.sdk import handler


def _mark(job, what: str) -> None:
    where = job.payload.get("dir")
    if where:
        with pathlib.Path(where, f"{job.name}.{job.attempt}.{what}").open("a") as mark:
            mark.write(f"{os.getpid()} {time.time()}\n")


def _seconds(job) -> float:
    return job.payload.get("seconds", 0.3) if job.attempt == 1 else job.payload.get("then", 0)


@handler("nap")
async def nap(job, ctx):
    _mark(job, "started")
    try:
        await asyncio.sleep(_seconds(job))
    except asyncio.CancelledError:
        _mark(job, "cancelled")
        raise
    _mark(job, "done")


@handler("nap-sync")
def nap_sync(job, ctx):
    _mark(job, "started")
    if ctx.cancelled.wait(_seconds(job)):
        _mark(job, "cancelled")
        return
    _mark(job, "done")
