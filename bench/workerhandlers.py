"""The SDK handlers that the workers of configuration W serve (`sextant worker --module bench.workerhandlers`).

They do nothing, so a run measures what Sextant itself costs per job: the create, the operator's assignment and
the worker's result. `fail-first` fails each job's first attempt, like the pod-mode Stages of `fail` workloads.
"""

from sextant.sdk import handler


@handler("ok")
async def ok(job, ctx) -> None:
    return None


@handler("fail-first")
async def fail_first(job, ctx) -> None:
    if job.attempt == 1:
        raise RuntimeError("the benchmark fails every first attempt of this handler")
