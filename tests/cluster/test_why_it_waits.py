"""Why a job waits, in plain sight (issue 29): a job whose queue, handler or worker is missing says so in its status
message, in `kubectl get sjob -o wide` and in `sextant jobs list`; an invalid Schedule says why it never fires in
`kubectl get ssched` and `sextant schedules list`."""

from __future__ import annotations

import pytest

from tests.harness import external_cluster, wait_for

from .plugin_support import ok, sextant
from .support import apply, handler, job, queue, status


WORKER_HANDLER = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": "w"},
                  "spec": {"worker": {}}}


def schedule(name: str, **spec: object) -> dict:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule", "metadata": {"name": name},
            "spec": {"jobTemplate": {"queue": "q", "handler": "h"}, **spec}}


def test_a_blocked_job_says_why_it_waits_everywhere_a_user_looks(cluster, namespace, operator):
    apply(cluster, namespace, queue("q"), handler("h"), WORKER_HANDLER,
          job("job-no-queue", queue_name="gretings"), job("job-no-handler", handler_name="nobody"),
          job("job-no-worker", handler_name="w"))
    wanted = {"job-no-queue": "QueueNotFound", "job-no-handler": "HandlerNotFound", "job-no-worker": "NoWorker"}

    def messages() -> dict[str, str]:
        return {name: status(cluster, namespace, name).get("message", "") for name in wanted}

    wait_for(lambda: all(messages()[n].startswith(f"blocked ({r}): ") for n, r in wanted.items()), 30,
             message=lambda: f"each job's message to say why it waits: {messages()}")
    assert "'gretings' does not exist" in messages()["job-no-queue"]

    wide = cluster.kubectl("get", "-n", namespace, "sjob", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[:8] == ["NAME", "STATE", "ATTEMPT", "QUEUE", "HANDLER", "AGE", "REASON", "MESSAGE"]
    rows = {line.split()[0]: line for line in wide[1:]}
    for name, reason in wanted.items():
        assert f" {reason} " in rows[name] and f"blocked ({reason})" in rows[name], rows[name]
    plain = cluster.kubectl("get", "-n", namespace, "sjob").stdout.splitlines()[0].split()
    assert plain == ["NAME", "STATE", "ATTEMPT", "QUEUE", "HANDLER", "AGE"]  # the narrow view stays as documented

    table = ok(sextant(cluster, "-n", namespace, "jobs", "list"))
    for name, reason in wanted.items():
        line = next(row for row in table.splitlines() if row.startswith(name.replace("-", "_", 1)))
        assert f"queued (blocked: {reason})" in line, table

    # The queue appears: the job waits for a slot again, and says so.
    apply(cluster, namespace, queue("gretings"))
    wait_for(lambda: messages()["job-no-queue"] != "" and not messages()["job-no-queue"].startswith("blocked"), 30,
             message=lambda: f"the message once the queue exists: {messages()}")


def test_an_invalid_schedule_says_why_in_get_and_in_schedules_list(cluster, namespace, operator):
    apply(cluster, namespace, queue("q"), handler("h"),
          schedule("mars", cron="* * * * *", timeZone="Mars/Olympus"), schedule("fine", interval="1h"))

    def get() -> dict[str, str]:
        lines = cluster.kubectl("get", "-n", namespace, "ssched", "-o", "wide").stdout.splitlines()
        return {line.split()[0]: line for line in lines[1:]} | {"": lines[0]}

    wait_for(lambda: "InvalidTimeZone" in get().get("mars", "") and "Scheduled" in get().get("fine", ""), 30,
             message=lambda: f"the schedules' status column: {get()}")
    assert "STATUS" in get()[""].split() and "Mars/Olympus" in get()["mars"]
    narrow = cluster.kubectl("get", "-n", namespace, "ssched").stdout
    assert "InvalidTimeZone" in narrow  # not only with -o wide

    listed = sextant(cluster, "-n", namespace, "schedules", "list")
    rows = {line.split()[0]: line for line in ok(listed).splitlines()[1:]}
    assert "<invalid: InvalidTimeZone>" in rows["mars"] and "<invalid" not in rows["fine"]
    assert "schedule mars never fires: " in listed.stderr and "Mars/Olympus" in listed.stderr


@pytest.mark.skipif(external_cluster(), reason="Sextant's own kwok Stages (a local control plane) say it")
def test_a_pod_job_on_a_simulated_node_says_nothing_ran(cluster, namespace, operator):
    """On the local control plane a pod that selects no `type: local` node lands on a kwok node, where nothing runs:
    its job still succeeds (kwok plays the pod's phases), and says so in its message and its attempt's."""
    apply(cluster, namespace, queue("q"), handler("h"), job("job-1"))
    wait_for(lambda: status(cluster, namespace, "job-1").get("state") == "succeeded", 60, message="job-1 to succeed")
    final = status(cluster, namespace, "job-1")
    node = final["attempts"][-1]["node"]
    said = f"simulated: node {node} is a kwok node, nothing ran"
    assert final["message"].startswith("attempt 1 of ") and said in final["message"], final["message"]
    assert said in final["attempts"][-1]["message"]
    row = next(line for line in ok(sextant(cluster, "-n", namespace, "inspect", "job-1")).splitlines() if said in line)
    assert row
