"""`kubectl sextant …` on the real control plane: the real kubectl binary runs the plugin (kubectl-sextant).

Jobs that must run use kwok handlers (sextant/dev/localcluster/kwok-stages.yaml), `logs` uses the local node agent
whose pods really run. Every call asserts that no stack trace reaches the user (plugin_support.sextant).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import yaml

from sextant.kube import kubeconfig
from sextant.client import Client
from tests.harness import wait_for

from .plugin_support import ID_RE, grant, job_json, ok, sextant, sextant_many, snapshot, token_kubeconfig
from .support import apply, handler, queue

EXIT = "sextant.dev/test-exit-code"
FOREVER = {"sextant.dev/test-outcome": "run-forever"}
FAST = {"backoff": {"policy": "fixed", "initial": "200ms"}}


def column(table: str, name: str) -> dict[str, str]:
    """A column of a CLI table by each row's first cell, read by position (the columns are aligned; a cell may
    hold a space, as "in 5m" does)."""
    header, *rows = table.splitlines()
    start = header.index(name)
    rest = header[start + len(name):]
    end = start + len(name) + len(rest) - len(rest.lstrip()) if rest.strip() else None
    return {row.split()[0]: row[start:end].strip() for row in rows}


def state_of(cluster, namespace: str, ident: str) -> str | None:
    return (job_json(cluster, namespace, ident).get("status") or {}).get("state")


def wait_state(cluster, namespace: str, ident: str, state: str, timeout: float = 30) -> None:
    wait_for(lambda: state_of(cluster, namespace, ident) == state, timeout,
             message=lambda: f"job {ident} to be {state}, it is {state_of(cluster, namespace, ident)}")


# --------------------------------------------------------------------------------------------------- no operator
def test_plugin_is_found_and_global_flags_work_before_and_after_the_subcommand(cluster, namespace, crds, tmp_path):
    plugins = subprocess.run([cluster.local.kubectl_binary, "plugin", "list"], capture_output=True, text=True,
                             env=cluster.env)
    assert "kubectl-sextant" in plugins.stdout, plugins.stdout + plugins.stderr
    first = ok(sextant(cluster, "-n", namespace, "jobs", "create", "--queue", "q", "--handler", "h")).strip()
    second = ok(sextant(cluster, "jobs", "create", "--queue", "q", "--handler", "h", "--namespace", namespace)).strip()
    assert ID_RE.match(first) and ID_RE.match(second) and first != second
    # `jobs` alone lists, as `jobs list` does.
    lists = sextant_many(cluster, [["-n", namespace, "jobs", "list"], ["jobs", "-n", namespace, "list"],
                                   ["jobs", "list", "-n", namespace], ["jobs", "-n", namespace],
                                   ["-n", namespace, "jobs", "--handler", "h"], ["-A", "jobs", "list"],
                                   ["jobs", "list", "-A"], ["jobs", "list", "--all-namespaces"], ["jobs", "-A"]])
    for proc in lists[:5]:
        table = ok(proc)
        assert table.splitlines()[0].split() == ["ID", "STATE", "ATTEMPT", "QUEUE", "HANDLER", "PRIORITY", "RUN-AT",
                                                 "AGE"]
        assert first in table and second in table
    for proc in lists[5:]:
        rows = [line.split() for line in ok(proc).splitlines()]
        assert rows[0][0] == "NAMESPACE" and [namespace, first] in [r[:2] for r in rows]
    # The namespace defaults to the kubeconfig context's; --context and --kubeconfig pick the kubeconfig.
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    base = config["contexts"][0]
    config["contexts"] = [{"name": "elsewhere", "context": {**base["context"], "namespace": "default"}},
                          {"name": "mine", "context": {**base["context"], "namespace": namespace}}]
    config["current-context"] = "mine"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in cluster.env.items() if k != "KUBECONFIG"}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config to fall back on
    calls = [["--kubeconfig", str(path), "jobs", "list"], ["jobs", "list", "--kubeconfig", str(path)],
             ["jobs", "list", "--kubeconfig", str(path), "--context", "elsewhere"],
             ["--context", "mine", "jobs", "get", first, "--kubeconfig", str(path)],
             ["jobs", "list", "--kubeconfig", str(path), "--context", "nope"]]
    with ThreadPoolExecutor(4) as pool:
        before, after, elsewhere, got, missing = pool.map(lambda args: sextant(cluster, *args, env=env), calls)
    assert first in ok(before) and first in ok(after) and first in ok(got)
    assert first not in ok(elsewhere)
    assert missing.returncode == 1 and "error: cannot use kubeconfig" in missing.stderr and "nope" in missing.stderr


def test_twenty_concurrent_creates_with_one_key_make_one_job(cluster, namespace, crds):
    args = ["jobs", "create", "-n", namespace, "--queue", "q", "--handler", "h", "--idempotency-key", "order-42",
            "--payload", '{"orderId": 42}']
    start = threading.Barrier(20)

    def create(_: int) -> subprocess.CompletedProcess[str]:
        start.wait()
        return sextant(cluster, *args)

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(create, range(20)))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results if r.returncode]
    ids = {r.stdout.strip() for r in results}
    assert len(ids) == 1 and ID_RE.match(ids.pop())
    assert len(snapshot(cluster, namespace)) == 1
    replays = [r for r in results if "already used" in r.stderr]
    assert len(replays) == 19 and "order-42" in replays[0].stderr
    # The same key in another namespace is another job.
    other = cluster.create_namespace(f"{namespace[:50]}-other")
    try:
        again = ok(sextant(cluster, *args[:2], "-n", other, *args[4:])).strip()
        assert again not in {r.stdout.strip() for r in results}
    finally:
        cluster.delete_namespace(other)


def test_bad_input_gets_a_clear_error_and_changes_nothing(cluster, namespace, crds, tmp_path):
    existing = ok(sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "h")).strip()
    before = snapshot(cluster, namespace)
    create = ["jobs", "create", "-n", namespace, "--queue", "q", "--handler", "h"]
    cases = [
        (create + ["--payload", "{oops"], "--payload: not valid JSON"),
        (create + ["--payload", "[1, 2]"], "the payload must be a JSON object"),
        (create + ["--payload", f"@{tmp_path}/nothing.json"], "cannot read"),
        (["jobs", "create", "-n", namespace, "--queue", "Emails!", "--handler", "h"], "'Emails!' is not a valid queue"),
        (["jobs", "create", "-n", namespace, "--handler", "h"], "--queue and --handler are required (or --from-file FILE)"),
        (create + ["--in", "ten minutes"], "--in: 'ten minutes' is not a duration"),
        (create + ["--run-at", "2026-12-01T10:00:00"], "has no time zone"),
        (["jobs", "list", "-n", namespace, "--state", "done"], "'done' is not a state; use one of scheduled"),
        (["jobs", "get", "JOB_1!", "-n", namespace], "is not a job id"),
        (["jobs", "get", "job_zzzzzzzz", "-n", namespace], f"job job_zzzzzzzz not found in namespace {namespace}"),
        (["jobs", "cancel", "job_zzzzzzzz", "-n", namespace], f"job job_zzzzzzzz not found in namespace {namespace}"),
        (["jobs", "retry", "job-zzzzzzzz", "-n", namespace], f"job job_zzzzzzzz not found in namespace {namespace}"),
        (["jobs", "list", "-n", "Not_A_Namespace"], "is not a valid namespace"),
        (["jobs", "get", existing, "-A"], "-A/--all-namespaces cannot be used with `jobs get`"),
        (["logs", existing, "-n", namespace], f"job {existing} has not run yet"),
        (["schedules", "trigger", "nightly", "-n", namespace], f"schedule nightly not found in namespace {namespace}"),
    ]
    for (args, words), proc in zip(cases, sextant_many(cluster, [args for args, _ in cases])):
        assert proc.returncode != 0, f"{args} succeeded: {proc.stdout}"
        assert words in proc.stderr, f"{args}: expected {words!r} in {proc.stderr!r}"
        assert proc.stdout == "", f"{args} printed {proc.stdout!r}"
    assert snapshot(cluster, namespace) == before


def test_rbac_denial_is_the_api_servers_forbidden_message(cluster, namespace, crds, tmp_path):
    token = grant(cluster, namespace, "alice")  # alice may work with jobs in this namespace only
    other = cluster.create_namespace(f"{namespace[:50]}-b")
    try:
        theirs = ok(sextant(cluster, "jobs", "create", "-n", other, "--queue", "q", "--handler", "h")).strip()
        mine = ok(sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "h")).strip()
        before = job_json(cluster, other, theirs)
        denied = sextant(cluster, "jobs", "cancel", theirs, "-n", other, "--token", token)
        assert denied.returncode == 1
        assert denied.stderr.strip() == (
            f'error: Error from server (Forbidden): jobs.sextant.dev "{theirs.replace("_", "-")}" is forbidden: '
            f'User "system:serviceaccount:{namespace}:alice" cannot patch resource "jobs" in API group "sextant.dev" '
            f'in the namespace "{other}"')
        assert job_json(cluster, other, theirs) == before
        # The same with a kubeconfig for the service account (its context's namespace is its own).
        config = token_kubeconfig(cluster, token, namespace, tmp_path / "alice.kubeconfig")
        env = {**cluster.env, "KUBECONFIG": str(config)}
        listed = sextant(cluster, "jobs", "list", "-n", other, env=env)
        assert listed.returncode == 1 and "Forbidden" in listed.stderr and "cannot list resource" in listed.stderr
        assert "cancel requested" in ok(sextant(cluster, "jobs", "cancel", mine, env=env))
        assert job_json(cluster, namespace, mine)["spec"]["cancel"] is True
        bad = sextant(cluster, "jobs", "list", "--token", "not-a-token", "-n", namespace)
        assert bad.returncode == 1 and "(Unauthorized)" in bad.stderr
    finally:
        cluster.delete_namespace(other)


def test_schedules_list_and_trigger(cluster, namespace, crds):
    schedule = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule", "metadata": {"name": "nightly"},
                "spec": {"cron": "0 2 * * *", "timeZone": "Europe/Berlin",
                         "jobTemplate": {"queue": "reports", "handler": "build", "payload": {"kind": "daily"},
                                         "priority": 3}}}
    apply(cluster, namespace, schedule)
    nxt = (datetime.now(timezone.utc) + timedelta(hours=5)).replace(microsecond=0)
    stamp = nxt.isoformat().replace("+00:00", "Z")
    cluster.kubectl("patch", "-n", namespace, "schedules.sextant.dev", "nightly", "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": {"nextScheduleTime": stamp}}))
    table = ok(sextant(cluster, "schedules", "list", "-n", namespace))
    alone = ok(sextant(cluster, "schedules", "-n", namespace))  # `schedules` alone lists, as `schedules list` does
    assert [line.split()[:-1] for line in alone.splitlines()] == [line.split()[:-1] for line in table.splitlines()]
    rows = [line.split() for line in table.splitlines()]
    assert rows[0] == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "NEXT", "AGE"]
    assert rows[1][0] == "nightly" and " ".join(rows[1][1:6]) == "0 2 * * *"
    assert rows[1][6:9] == ["Europe/Berlin", "False", "0"] and stamp in rows[1] and "(in" in rows[1]
    listed = json.loads(ok(sextant(cluster, "schedules", "list", "-n", namespace, "-o", "json")))
    assert listed["items"][0]["status"]["nextScheduleTime"] == stamp

    ident = ok(sextant(cluster, "schedules", "trigger", "nightly", "-n", namespace)).strip()
    assert ID_RE.match(ident)
    made = job_json(cluster, namespace, ident)
    assert made["metadata"]["labels"]["sextant.dev/schedule"] == "nightly"
    at = made["metadata"]["annotations"]["sextant.dev/scheduled-at"]
    assert made["spec"]["idempotencyKey"] == f"nightly/manual/{at}"
    assert abs(datetime.fromisoformat(at.replace("Z", "+00:00")) - datetime.now(timezone.utc)) < timedelta(minutes=1)
    assert {k: made["spec"][k] for k in ("queue", "handler", "payload", "priority")} == {
        "queue": "reports", "handler": "build", "payload": {"kind": "daily"}, "priority": 3}
    # A double click (a second trigger in the same second) returns the same job.
    client = Client(kubeconfig.load(str(cluster.kubeconfig)))
    try:
        when = datetime.fromisoformat(at.replace("Z", "+00:00")) + timedelta(milliseconds=400)
        again, created, _ = client.trigger_schedule(namespace, "nightly", now=when)
        assert not created and again["metadata"]["name"] == ident.replace("_", "-")
        later, created, _ = client.trigger_schedule(namespace, "nightly", now=when + timedelta(seconds=1))
        assert created and later["metadata"]["name"] != ident.replace("_", "-")
    finally:
        client.close()
    assert len(snapshot(cluster, namespace)) == 2


# --------------------------------------------------------------------------------------------------- with operator
def test_create_wait_get_list_inspect(cluster, namespace, operator, tmp_path):
    flaky = {f"{EXIT}-attempt-1": "1"}
    apply(cluster, namespace, queue("q", maxAttempts=2, **FAST), handler("ok"), handler("flaky", annotations=flaky),
          handler("fails", annotations={EXIT: "3"}), handler("slow", annotations=FOREVER))
    create = ["jobs", "create", "-n", namespace, "--queue", "q"]
    (tmp_path / "payload.json").write_text('{"from": "file"}')
    run_at = (datetime.now(timezone.utc) + timedelta(days=1)).replace(microsecond=0)
    from_stdin = ok(sextant(cluster, *create, "--handler", "ok", "--payload", "-", input='{"from": "stdin"}')).strip()
    good, from_file, later, pinned, retried, doomed, slow = [ok(p).strip() for p in sextant_many(cluster, [
        [*create, "--handler", "ok", "--payload", '{"orderId": 42}'],
        [*create, "--handler", "ok", "--payload", f"@{tmp_path}/payload.json"],
        [*create, "--handler", "ok", "--in", "1h", "--priority", "5"],
        [*create, "--handler", "ok", "--run-at", run_at.isoformat()],
        [*create, "--handler", "flaky"], [*create, "--handler", "fails"], [*create, "--handler", "slow"]])]
    for ident in (good, from_file, from_stdin, later, pinned, retried, doomed, slow):
        assert ID_RE.match(ident), ident

    wait_state(cluster, namespace, slow, "running")
    done, retried_done, dead, timed_out = sextant_many(cluster, [
        ["jobs", "wait", good, "-n", namespace, "--timeout", "30s"],
        ["jobs", "wait", retried.replace("_", "-"), "-n", namespace],
        ["jobs", "wait", doomed, "-n", namespace, "--timeout", "30s"],
        ["jobs", "wait", slow, "-n", namespace, "--timeout", "1s"]])
    assert done.returncode == 0 and done.stdout.startswith(f"job {good} succeeded")
    assert retried_done.returncode == 0
    assert dead.returncode == 1 and f"job {doomed} is dead after 2 attempt(s)" in dead.stderr
    assert "Error (exit code 3)" in dead.stderr
    assert timed_out.returncode == 124 and "timed out after 1s" in timed_out.stderr and "running" in timed_out.stderr
    wait_state(cluster, namespace, from_stdin, "succeeded")
    wait_state(cluster, namespace, from_file, "succeeded")
    wait_state(cluster, namespace, later, "scheduled")
    wait_state(cluster, namespace, pinned, "scheduled")

    lst = ["jobs", "list", "-n", namespace]
    got, got_yaml, row, succeeded, failing, scheduled, other, dead_json, text, shown, running = [
        ok(p) for p in sextant_many(cluster, [
            ["jobs", "get", good, "-n", namespace, "-o", "json"],
            ["jobs", "get", from_file, "-n", namespace, "-o", "yaml"],
            ["jobs", "get", good, "-n", namespace],
            [*lst, "--state", "succeeded"], [*lst, "--handler", "fails"], [*lst, "--queue", "q", "--state", "scheduled"],
            [*lst, "--queue", "other"], [*lst, "--state", "dead", "-o", "json"],
            ["inspect", retried, "-n", namespace], ["inspect", retried, "-n", namespace, "-o", "json"],
            ["inspect", slow, "-n", namespace]])]
    got = json.loads(got)
    assert got["spec"]["payload"] == {"orderId": 42} and got["status"]["state"] == "succeeded"
    assert "managedFields" not in got["metadata"]
    assert yaml.safe_load(got_yaml)["spec"]["payload"] == {"from": "file"}
    assert job_json(cluster, namespace, from_stdin)["spec"]["payload"] == {"from": "stdin"}
    later_job = job_json(cluster, namespace, later)
    delay = datetime.fromisoformat(later_job["spec"]["runAt"].replace("Z", "+00:00")) - datetime.now(timezone.utc)
    assert timedelta(minutes=55) < delay <= timedelta(hours=1) and later_job["spec"]["priority"] == 5
    assert job_json(cluster, namespace, pinned)["spec"]["runAt"] == run_at.isoformat().replace("+00:00", "Z")
    assert row.splitlines()[1].split()[:6] == [good, "succeeded", "1/2", "q", "ok", "0"]

    def ids(table: str) -> set[str]:
        return {line.split()[0] for line in table.splitlines()[1:]}

    assert ids(succeeded) == {good, from_file, from_stdin, retried}
    assert ids(failing) == {doomed} and ids(scheduled) == {later, pinned} and ids(other) == set()
    # RUN-AT: when a scheduled job runs, relative; a job without runAt has none.
    run_at_cells = column(scheduled, "RUN-AT")
    assert re.fullmatch(r"in (59|60)m", run_at_cells[later]) and re.fullmatch(r"in 2[34]h", run_at_cells[pinned])
    assert set(column(succeeded, "RUN-AT").values()) == {"<none>"}
    assert [j["metadata"]["name"] for j in json.loads(dead_json)["items"]] == [doomed.replace("_", "-")]

    fields = dict(line.split(":", 1) for line in text.split("\n\n", 1)[0].splitlines())
    assert {k: v.strip() for k, v in fields.items() if k in ("Job", "State", "Attempt", "Handler")} == {
        "Job": retried, "State": "succeeded", "Attempt": "2/2", "Handler": "flaky"}
    timeline = text.split("Timeline:\n", 1)[1].splitlines()
    assert timeline[0].split() == ["ATTEMPT", "POD", "NODE", "STARTED", "FINISHED", "DURATION", "RESULT", "ERROR"]
    first, second = timeline[1].split(), timeline[2].split()
    name = retried.replace("_", "-")
    assert first[:3] == ["1", f"{name}-1", first[2]] and first[2].startswith("node-")
    assert first[6:] == ["failed", "Error", "(exit", "code", "1)"]
    # kwok's pod ran nothing: the succeeded attempt says so (its pod's termination message)
    assert second[1] == f"{name}-2" and second[6:8] == ["succeeded", "simulated:"]
    shown = json.loads(shown)
    assert [(a["attempt"], a["result"], a["reason"]) for a in shown["attempts"]] == [(1, "failed", "Error"),
                                                                                      (2, "succeeded", None)]
    assert all(a["durationSeconds"] >= 0 and a["node"] for a in shown["attempts"])
    assert "running" in running and "so far" in running


def test_cancel_retry_and_refusals(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", maxAttempts=1, cancelGrace="1s", **FAST), handler("ok"),
          handler("fails", annotations={EXIT: "3"}), handler("slow", annotations=FOREVER))
    create = ["jobs", "create", "-n", namespace, "--queue", "q", "--handler"]
    slow, good, doomed = [ok(p).strip() for p in sextant_many(cluster, [[*create, "slow"], [*create, "ok"],
                                                                          [*create, "fails"]])]
    wait_state(cluster, namespace, slow, "running")
    wait_state(cluster, namespace, good, "succeeded")
    wait_state(cluster, namespace, doomed, "dead")
    before = job_json(cluster, namespace, good)
    no_retry, no_cancel, retried = sextant_many(cluster, [["jobs", "retry", slow, "-n", namespace],
                                                          ["jobs", "cancel", good, "-n", namespace],
                                                          ["jobs", "retry", doomed, "-n", namespace]])
    assert no_retry.returncode == 1
    assert no_retry.stderr.strip() == (f"error: job {slow}: cannot retry: the job is running; only failed or dead "
                                       "jobs can be retried")
    assert "retryToken" not in job_json(cluster, namespace, slow)["spec"]
    assert no_cancel.returncode == 1
    assert no_cancel.stderr.strip() == (f"error: job {good}: cannot cancel: the job is succeeded; only scheduled, "
                                        "queued, running or failed jobs can be cancelled")
    assert job_json(cluster, namespace, good)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "retry requested (it was dead)" in ok(retried)

    assert "the running handler is stopped" in ok(sextant(cluster, "jobs", "cancel", slow, "-n", namespace))
    stopped = sextant(cluster, "jobs", "wait", slow, "-n", namespace, "--timeout", "30s")
    assert stopped.returncode == 1 and f"job {slow} was cancelled" in stopped.stderr
    assert ok(sextant(cluster, "jobs", "cancel", slow, "-n", namespace)).strip() == f"job {slow} is cancelled"
    wait_for(lambda: len(job_json(cluster, namespace, doomed)["status"].get("attempts", [])) == 2
             and state_of(cluster, namespace, doomed) == "dead", 30, message="the retried job to run again and die")


def test_watch_prints_every_change(cluster, namespace, operator):
    # The handler runs for 3 s, so the job is written running; a pod that ends before the operator's first look is
    # recorded succeeded in one write (no running row), which this test is not about.
    apply(cluster, namespace, queue("q", **FAST), handler("ok", annotations={"sextant.dev/test-duration": "3s"}))
    proc = subprocess.Popen([cluster.local.kubectl_binary, "sextant", "jobs", "list", "-w", "-n", namespace],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: lines and lines[0].split()[0] == "ID", 20, message="the watch's header")
        ident = ok(sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "ok")).strip()
        wait_for(lambda: any(line.split()[:2] == [ident, "succeeded"] for line in lines), 30,
                 message=lambda: f"a succeeded row for {ident} in {lines}")
        states = [line.split()[1] for line in lines[1:] if line.split()[0] == ident]
        assert states[0] in ("<pending>", "queued", "running") and "running" in states
    finally:
        proc.terminate()
        proc.wait(10)
    assert "Traceback" not in proc.stderr.read()


def test_queues_list(cluster, namespace, operator):
    """`queues list` shows the numbers the operator keeps in each Queue's status, and says so when nobody keeps
    them: a queue no operator has counted, and one edited since it was last counted, once the operator is gone."""
    apply(cluster, namespace, queue("q", concurrency=1), handler("slow", annotations=FOREVER))
    ids = [ok(sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "slow")).strip()
           for _ in range(3)]
    wait_state(cluster, namespace, ids[0], "running")
    wait_for(lambda: all(state_of(cluster, namespace, i) == "queued" for i in ids[1:]), 20, message="two queued")

    def table() -> tuple[list[list[str]], str]:
        proc = sextant(cluster, "queues", "list", "-n", namespace)
        return [line.split() for line in ok(proc).splitlines()], proc.stderr

    def q_row() -> list[str]:
        return {r[0]: r for r in table()[0][1:]}["q"]

    wait_for(lambda: q_row()[1:6] == ["1/1", "2", "0", "0", "0"], 20,
             message=lambda: f"the operator's numbers for q, got {q_row()}")  # written within 3 s of a change
    rows, err = table()
    assert rows[0] == ["NAME", "RUNNING", "QUEUED", "STARTING", "SCHEDULED", "FAILED", "OLDEST-QUEUED", "PAUSED",
                       "STARTS", "RATE-LIMITED", "KEYS", "AGE"]
    alone = sextant(cluster, "queues", "-n", namespace)  # `queues` alone lists, as `queues list` does
    assert [line.split()[:3] for line in ok(alone).splitlines()] == [r[:3] for r in rows] and alone.stderr == ""
    assert rows[1][6] != "-" and err == ""
    data = {q["name"]: q for q in json.loads(ok(sextant(cluster, "queues", "list", "-n", namespace, "-o", "json")))[
        "items"]}
    assert (data["q"]["running"], data["q"]["queued"], data["q"]["concurrency"], data["q"]["status"]) == \
        (1, 2, 1, "current")
    assert data["q"]["oldestQueuedSeconds"] >= 0
    assert [r[:3] for r in (line.split() for line in ok(sextant(cluster, "queues", "list", "-A")).splitlines())
            if r[0] == namespace] == [[namespace, "q", "1/1"]]

    operator.stop()
    apply(cluster, namespace, queue("q", concurrency=2), queue("fresh"))
    rows, err = table()
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["fresh"][1:6] == ["-/10", "-", "-", "-", "-"] and by_name["q"][1:3] == ["1/2", "2"]
    assert "No numbers for fresh: the operator has not written this queue's status yet" in err
    assert "Numbers for q were counted for an older spec of the queue" in err


def test_a_paused_queue_starts_nothing_until_it_is_resumed_and_then_in_order(cluster, namespace, operator):
    apply(cluster, namespace, queue("q", concurrency=1), handler("slow", annotations=FOREVER))
    ids = [ok(sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "slow")).strip()
           for _ in range(3)]
    wait_state(cluster, namespace, ids[0], "running")
    said = ok(sextant(cluster, "queues", "pause", "q", "-n", namespace))
    assert said.startswith("queue q paused") and "nothing new starts" in said

    def status() -> dict:
        return json.loads(cluster.kubectl("get", "squeue", "q", "-n", namespace, "-o", "json").stdout).get(
            "status") or {}

    wait_for(lambda: status().get("paused") is True, 20, message="the operator to say q is paused")
    # The running attempt's slot frees: while paused, the next in line does not take it.
    ok(sextant(cluster, "jobs", "cancel", ids[0], "-n", namespace))
    wait_state(cluster, namespace, ids[0], "cancelled")
    wait_for(lambda: status().get("running") == 0 and status().get("queued") == 2, 20,
             message=lambda: f"q's numbers after the cancel, got {status()}")
    assert [state_of(cluster, namespace, i) for i in ids[1:]] == ["queued", "queued"]
    row = {r[0]: r for r in (line.split() for line in ok(sextant(cluster, "queues", "-n", namespace)).splitlines())}
    assert row["q"][7] == "yes"
    assert "PAUSED" in cluster.kubectl("get", "squeue", "q", "-n", namespace).stdout.splitlines()[0].upper()
    # inspect of a job held back says why: its Queue is paused
    assert "Queue:" in (said := ok(sextant(cluster, "inspect", ids[2], "-n", namespace))) and \
        "paused (sextant queues resume q)" in said, said

    assert ok(sextant(cluster, "queues", "resume", "q", "-n", namespace)).startswith("queue q resumed")
    wait_state(cluster, namespace, ids[1], "running")  # the first in line
    assert state_of(cluster, namespace, ids[2]) == "queued"  # concurrency 1 still holds
    wait_for(lambda: status().get("paused") is False, 20, message="the operator to say q is resumed")
    missing = sextant(cluster, "queues", "pause", "nope", "-n", namespace)
    assert missing.returncode == 1 and f"queue nope not found in namespace {namespace}" in missing.stderr


def test_logs_of_attempts_on_a_node_that_runs_them(cluster, namespace, operator, local_node):  # noqa: F811
    script = 'echo "hello from $SEXTANT_JOB_ID attempt $SEXTANT_ATTEMPT"; [ "$SEXTANT_ATTEMPT" -ge 2 ]'
    local = {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": "echo"},
             "spec": {"heartbeat": False, "template": {"spec": {
                 "containers": [{"name": "handler", "image": "registry.example/ignored:1",
                                 "command": ["sh", "-c", script]}],
                 "tolerations": [dict(local_node.toleration)], "nodeSelector": dict(local_node.node_selector)}}}}
    apply(cluster, namespace, queue("q", maxAttempts=3, **FAST), local)
    ident = ok(sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "echo")).strip()
    assert sextant(cluster, "jobs", "wait", ident, "-n", namespace, "--timeout", "60s").returncode == 0
    assert ok(sextant(cluster, "logs", ident, "-n", namespace)) == f"hello from {ident} attempt 2\n"
    assert ok(sextant(cluster, "logs", ident, "-n", namespace, "--attempt", "1")) == f"hello from {ident} attempt 1\n"
    missing = sextant(cluster, "logs", ident, "-n", namespace, "--attempt", "3")
    assert missing.returncode == 1 and f"job {ident} has no attempt 3 (its attempts: 1, 2)" in missing.stderr
    inspected = ok(sextant(cluster, "inspect", ident, "-n", namespace))
    assert local_node.name in inspected and "Error (exit code 1)" in inspected
    pod = f"{ident.replace('_', '-')}-1"
    cluster.kubectl("delete", "pod", "-n", namespace, pod, "--wait=true")
    gone = sextant(cluster, "logs", ident, "-n", namespace, "--attempt", "1")
    assert gone.returncode == 1
    assert f"the pod {pod} of attempt 1 of job {ident} is gone" in gone.stderr and "no longer available" in gone.stderr
