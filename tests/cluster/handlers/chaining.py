"""SDK handlers of the chaining test (imported by `sextant run --module chaining`)."""

from sextant.sdk import NonRetryableError, handler


@handler("charge-card")
def charge(job, ctx):
    order = job.payload["orderId"]
    ctx.jobs.create(queue="q", handler="send-receipt", payload={"orderId": order, "chargeId": f"ch_{order}"},
                    idempotency_key=f"receipt-{order}")
    if job.attempt == 1:
        raise RuntimeError("the card network timed out after the receipt was chained")


@handler("send-receipt")
def send(job, ctx):
    print(f"receipt for order {job.payload['orderId']} (charge {job.payload['chargeId']})")


@handler("refuse")
def refuse(job, ctx):
    raise NonRetryableError("card declined")
