"""SDK handlers of the payload-cap test (imported by `sextant run --module payloads`)."""

import json

from sextant.resources.inputs import InputError
from sextant.resources.job import PAYLOAD_MAX_BYTES, payload_size
from sextant.sdk import handler


def sized(size: int, tag: str) -> dict:
    """A payload of exactly `size` bytes as compact JSON."""
    base = payload_size({"tag": tag, "blob": ""})
    return {"tag": tag, "blob": "x" * (size - base)}


@handler("chain-sized")
def chain_sized(job, ctx):
    try:
        ctx.jobs.create(queue="q", handler="sink", payload=sized(PAYLOAD_MAX_BYTES + 1, "sdk-over"))
    except InputError as exc:
        print(f"refused: {exc}")
    else:
        raise AssertionError("a payload over the cap was accepted")
    created = ctx.jobs.create(queue="q", handler="sink", payload=sized(PAYLOAD_MAX_BYTES, "sdk"),
                              idempotency_key=f"sized-{job.name}")
    print(json.dumps({"created": created}))
