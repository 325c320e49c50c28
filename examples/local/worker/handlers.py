"""SDK handlers of the local worker example, served by

    .venv/bin/sextant worker -n default --module examples.local.worker.handlers

(run from the repository's root: the worker imports --module with the current directory on sys.path). The same
functions would run unchanged in an attempt pod (`sextant run --module ...`); a worker runs them in its own process.
"""

from sextant.sdk import NonRetryableError, handler


@handler("welcome")
def welcome(job, ctx):
    """A `def` runs in the worker's thread pool (an `async def` would run on its event loop)."""
    name = job.payload.get("name")
    if not isinstance(name, str) or not name:
        raise NonRetryableError("payload.name must be a non-empty string")  # the job ends dead, no retry
    print(f"welcome, {name}! ({job.id}, attempt {job.attempt})", flush=True)
    # Chaining: the next job, at most once per welcome job even if this attempt fails after it and is retried.
    ctx.jobs.create(queue=job.queue, handler="shout", payload={"text": f"welcome, {name}"},
                    idempotency_key=f"shout-{job.id}")
