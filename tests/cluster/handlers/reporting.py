"""SDK handlers of the snooze, output and progress tests (`--module reporting`), in a pod and on a worker alike.

The payload steers them: `dir` (where the snoozer leaves its mark: it snoozes once, then returns), `from` (the job
whose output the consumer reads), `until` (a file the progresser waits for after reporting its progress)."""

import pathlib
import time

from sextant.sdk import handler


@handler("snoozer")
def snoozer(job, ctx):
    mark = pathlib.Path(job.payload["dir"], f"{job.name}.snoozed")
    if not mark.exists():
        mark.touch()
        ctx.snooze("1s")  # raises: nothing below runs this time
    return {"ran": "after the snooze", "attempt": job.attempt}


@handler("producer")
def producer(job, ctx):
    ctx.jobs.create(queue=job.queue, handler="consumer", payload={"from": job.id},
                    idempotency_key=f"consume-{job.id}")
    return {"rows": 3, "by": job.id}


@handler("consumer")
def consumer(job, ctx):
    got = ctx.jobs.output(job.payload["from"])
    if got is None:  # the producer's end is not recorded yet: look again shortly, without using up an attempt
        ctx.snooze("500ms")
    return {"got": got}


@handler("progresser")
def progresser(job, ctx):
    ctx.progress(0.25, "started")
    ctx.progress(0.5, "half way")  # the latest wins
    until = pathlib.Path(job.payload["until"])
    deadline = time.monotonic() + 90
    while not until.exists() and time.monotonic() < deadline and not ctx.cancelled.is_set():
        time.sleep(0.1)
    ctx.progress(1.0, "done")
    return "finished"
