"""The real-cluster examples (examples/*.yaml), applied as written and run on the local node: the Queue, the
Handlers, the Job and the Schedule (triggered by hand), each reaching `succeeded`.

Two things stand in for what a real cluster would have, and nothing else changes in the YAML:
- placement: the local node is tainted and selected by `type: local`, so the pod templates get that nodeSelector
  and toleration (on a real cluster the pods go wherever the scheduler puts them);
- the image: the local node ignores images and runs the command on this machine, so the code the image would
  hold (`receipts.send`, `payments.handlers`, `payments.invoice`) is a tiny package written by the test and put
  on PYTHONPATH (one variable added to the container's env; the worker gets it from its own environment, and
  passes it to its command with --command-env PYTHONPATH, as an image's ENV would have to be).
The commands themselves are exactly the examples': `sextant run -- python -m receipts.send` in the pod,
`python -m payments.invoice` and the SDK function `charge-card` on a worker (`sextant worker --module
payments.handlers --allow-command send-invoice`).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import yaml

from tests.harness import repo_root, wait_for

from .plugin_support import ID_RE, ok, sextant
from .support import WorkerProcess, apply, jobs, wait_state

EXAMPLES = repo_root() / "examples"

CODE = {  # what the example's images would contain
    "receipts/__init__.py": "",
    "receipts/send.py": """
        import json, os, sys
        payload = json.load(sys.stdin)  # the runner hands the job's payload over on stdin
        what = f"order {payload['orderId']}" if "orderId" in payload else f"a batch {payload}"
        print(f"receipt for {what} sent via {os.environ['SMTP_HOST']} "
              f"({os.environ['SEXTANT_JOB_ID']}, attempt {os.environ['SEXTANT_ATTEMPT']})")
    """,
    "payments/__init__.py": "",
    "payments/handlers.py": """
        from sextant.sdk import handler

        @handler("charge-card")
        def charge(job, ctx):
            order = job.payload["orderId"]
            receipt = ctx.jobs.create(queue="emails", handler="send-receipt", payload={"orderId": order},
                                      idempotency_key=f"receipt-{order}")
            print(f"charged order {order}; receipt job {receipt}")
    """,
    "payments/invoice.py": """
        import json, sys
        print(f"invoice for order {json.load(sys.stdin)['orderId']}")
    """,
}


def examples() -> list[dict[str, Any]]:
    objects = []
    for name in ("queue.yaml", "handler.yaml", "job.yaml", "schedule.yaml"):
        objects += [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    return objects


def write_code(root: Path) -> Path:
    for path, text in CODE.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text).lstrip())
    return root


def on_the_local_node(obj: dict[str, Any], local_node: Any, pythonpath: Path) -> dict[str, Any]:
    """A pod-mode Handler placed on the local node, its image's code on PYTHONPATH; its command as written."""
    pod_spec = obj["spec"]["template"]["spec"]
    pod_spec["nodeSelector"] = dict(local_node.node_selector)
    pod_spec["tolerations"] = [*pod_spec.get("tolerations", []), dict(local_node.toleration)]
    container = pod_spec["containers"][0]
    container["env"] = [*container.get("env", []), {"name": "PYTHONPATH", "value": str(pythonpath)}]
    return obj


def test_the_examples_run_as_written(cluster, namespace, operator, local_node, tmp_path, request, monkeypatch):
    code = write_code(tmp_path / "code")
    objects = examples()
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == ["Handler", "Job", "Queue", "Schedule"], kinds
    pod_handlers = [o for o in objects if o["kind"] == "Handler" and "template" in o["spec"]]
    assert [h["metadata"]["name"] for h in pod_handlers] == ["send-receipt"]
    for h in pod_handlers:
        command = h["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[:3] == ["sextant", "run", "--"], f"{h['metadata']['name']}: {command} bypasses the runner"
        on_the_local_node(h, local_node, code)
    apply(cluster, namespace, *objects)

    # The example Job (its runAt long past) runs in a pod: the runner gives the payload on stdin.
    [job] = [o for o in objects if o["kind"] == "Job"]
    name = job["metadata"]["name"]
    final = wait_state(cluster, namespace, name, "succeeded", "dead", timeout=90)
    assert final["state"] == "succeeded", final
    pod = final["attempts"][0]["pod"]
    out = cluster.kubectl("logs", "-n", namespace, pod).stdout
    assert f"receipt for order 42 sent via smtp.example ({name.replace('-', '_', 1)}, attempt 1)" in out, out

    # The Schedule, triggered by hand (its cron fires at 02:00 Berlin time): its job runs the same way.
    triggered = ok(sextant(cluster, "schedules", "trigger", "nightly-receipts", "-n", namespace)).strip()
    assert ID_RE.match(triggered)
    final = wait_state(cluster, namespace, triggered.replace("_", "-"), "succeeded", "dead", timeout=90)
    assert final["state"] == "succeeded", final
    out = cluster.kubectl("logs", "-n", namespace, final["attempts"][0]["pod"]).stdout
    assert "receipt for a batch {'resendFailed': True} sent via smtp.example" in out, out

    # The worker-mode Handlers, on a worker serving the example's module. charge-card chains the receipt with the
    # key receipt-42, which the example Job holds: the SDK returns that job and creates none.
    # The example's code first, then whatever already chose this tree's sextant (a worktree's PYTHONPATH).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p))
    worker = WorkerProcess(cluster.kubeconfig, namespace, "payments", tmp_path, "--module", "payments.handlers",
                           "--allow-command", "send-invoice", "--command-env", "PYTHONPATH")
    request.node._sextant_workers = [worker]
    worker.start()
    try:
        charge = ok(sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "emails", "--handler",
                            "charge-card", "--payload", '{"orderId": 42}')).strip()
        invoice = ok(sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "emails", "--handler",
                             "send-invoice", "--payload", '{"orderId": 42}')).strip()
        for ident in (charge, invoice):
            final = wait_state(cluster, namespace, ident.replace("_", "-"), "succeeded", "dead", timeout=90)
            assert final["state"] == "succeeded", (ident, final, worker.log()[-2000:])
        wait_for(lambda: "invoice for order 42" in worker.log(), 30, message=worker.log)
        assert f"charged order 42; receipt job {name.replace('-', '_', 1)}" in worker.log(), worker.log()
        receipts = [n for n, j in jobs(cluster, namespace).items() if j["spec"]["handler"] == "send-receipt"
                    and (j["metadata"].get("labels") or {}).get("sextant.dev/schedule") is None]
        assert receipts == [name], receipts
    finally:
        worker.stop()
