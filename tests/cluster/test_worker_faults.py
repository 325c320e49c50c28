"""Worker protocol v2 under faults, with real processes (`sextant operator`, `sextant worker`, command handlers) on
the real control plane: crashes of the operator and of the worker at the worst moment, `kill -9` of a worker while
its command runs, API-server outages shorter and longer than the renew deadline.

The crash, kill and outage scenarios run against every worker implementation (the Python `sextant worker` and
@sextant/node's `sextant-worker`, test_worker_conformance.IMPLEMENTATIONS): fencing and outage behaviour is the
worker's half of the protocol, which each SDK implements for itself.

What ran is judged twice, independently: from the API (every Worker version, from a watch opened before the test
acts: never one job assigned live on two workers) and from the commands themselves, which take a per-job flock(2)
for as long as any process of theirs lives, so that a second attempt of a job starting while the first still runs
is seen by the kernel (the lock is released only when the last process holding it is gone, however it died).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sextant.kube import kubeconfig
from sextant.resources.job import written_status
from tests.harness import holds_for, wait_for
from tests.harness.faultproxy import FaultProxy
from tests.harness.watching import Versions, live_assignments, most_at_once

from .support import Operator, WorkerProcess, apply, job, queue, timeline_of, wait_all, wait_state
from .test_worker_conformance import IMPLEMENTATIONS, WorkerArgs, command, worker_object

BACKOFF = {"backoff": {"policy": "fixed", "initial": "200ms"}, "cancelGrace": "1s"}


def locked(runs: Path, body: str) -> str:
    """A script that records each run in `runs` and holds the job's lock while it (and its children) live; a run
    that finds the lock taken records an overlap."""
    return (f'exec 9>>{runs.parent}/"$SEXTANT_JOB_NAME".lock; '
            f'flock -n 9 || {{ echo "$SEXTANT_JOB_NAME $SEXTANT_SEQUENCE overlap" >> {runs}; exit 3; }}; '
            f'echo "$SEXTANT_JOB_NAME $SEXTANT_SEQUENCE start" >> {runs}; {body}; '
            f'echo "$SEXTANT_JOB_NAME $SEXTANT_SEQUENCE end" >> {runs}')


def runs_of(runs: Path) -> list[tuple[str, int, str]]:
    if not runs.exists():
        return []
    return [(j, int(s), what) for j, s, what in (line.split() for line in runs.read_text().splitlines())]


class ImplementedWorker(WorkerProcess):
    """A worker of one implementation: its own command line (Implementation.argv), then the scenario's flags."""

    def __init__(self, argv: list[str], *rest: Any) -> None:
        super().__init__(*rest)
        self.argv = argv

    def command(self) -> list[str]:
        return [*self.argv, *self.args]


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda impl: impl.id)
def workers(cluster, namespace, tmp_path_factory, request) -> Iterator[Any]:
    made: list[WorkerProcess] = []
    request.node._sextant_workers = made  # their logs join a failed test's report (conftest.py)
    logs = tmp_path_factory.mktemp("workers")

    def start(name: str, *args: str, config: Path | None = None) -> WorkerProcess:
        # Every scenario's handlers are commands: the implementation's argv allows them; the scenario gives
        # queues, handlers and slots as flags, which every implementation takes alike.
        kubeconfig = config or cluster.kubeconfig
        argv = request.param.argv(WorkerArgs(kubeconfig, namespace, name, (), (), 1))
        worker = ImplementedWorker(argv, kubeconfig, namespace, name, logs, *args).start()
        made.append(worker)
        return worker

    yield start
    for worker in made:
        worker.kill()


def wait_live(cluster, namespace: str, name: str, timeout: float = 60) -> dict[str, Any]:
    return wait_for(lambda: (w := worker_object(cluster, namespace, name)).get("status", {}).get("state") == "live"
                    and w, timeout, message=f"worker {name} to be live")


def assert_never_twice(seen: Versions, runs: Path) -> None:
    per_job, _ = most_at_once(seen)
    assert set(per_job.values()) <= {1}, f"a job assigned live on two workers at once: {per_job}"
    assert not [r for r in runs_of(runs) if r[2] == "overlap"], f"two runs of one job at once: {runs_of(runs)}"


# ================================================================ crashes
@pytest.mark.parametrize("worker_too", [False, True],
    ids=["operator", "operator-and-worker"])
def test_an_operator_killed_between_assignment_and_its_first_job_write_loses_no_attempt(
        cluster, namespace, operator, workers, tmp_path, worker_too):
    runs = tmp_path / "runs"
    count = 4
    apply(cluster, namespace, queue("q", leaseDuration="4s", **BACKOFF), command("nap", locked(runs, "sleep 2")))
    args = ("--queue=q", "--handler=nap", "--concurrency", str(count))
    worker = workers("w", *args)
    wait_live(cluster, namespace, "w")
    with Versions(cluster.kubeconfig, namespace, "workers") as seen, \
            Versions(cluster.kubeconfig, namespace, "jobs") as job_seen:
        apply(cluster, namespace, *(job(f"job-{i}", handler_name="nap") for i in range(count)))
        wait_for(lambda: any(live_assignments(v.obj) for v in seen.versions()), 30, interval=0.01,
                 message="a first assignment")
        operator.kill()
        if worker_too:
            worker.kill()
        at_kill = {v.name: v.obj for v in job_seen.versions()}
        untouched = [n for n, obj in at_kill.items() if not written_status(obj.get("status"))]
        assigned = {a["job"] for v in seen.versions() for a in live_assignments(v.obj)}
        assert assigned & set(untouched), "the kill came after the first Job status write: the test proves nothing"
        if worker_too:
            workers("w", *args)  # the same name, a new incarnation
        operator.start()
        final = wait_all(cluster, namespace, count, {"succeeded", "dead"}, 90)
    for name, obj in final.items():
        st = obj["status"]
        assert [t for t in timeline_of(st) if t[0] == "succeeded"] == [("succeeded", None)], (name, st)
        assert st["state"] == "succeeded" and st["attempt"] == len(st["attempts"]), (name, st)
        if worker_too and name in assigned:  # its command died with the worker: the attempt counts
            assert timeline_of(st) == [("failed", "LeaseExpired"), ("succeeded", None)], (name, st)
        elif not worker_too:
            assert timeline_of(st) == [("succeeded", None)], (name, st)
    assert_never_twice(seen, runs)


def test_kill_9_of_a_worker_takes_its_command_with_it_before_the_retry_starts(cluster, namespace, operator, workers,
                                                                          tmp_path):
    pid_file, verdict = tmp_path / "pid", tmp_path / "verdict"
    script = (f'if [ "$SEXTANT_SEQUENCE" = 1 ]; then echo $$ > {pid_file}; exec sleep 120; fi; '
              f's=$(cut -d" " -f3 /proc/$(cat {pid_file})/stat 2>/dev/null); '
              f'if [ -z "$s" ] || [ "$s" = Z ]; then echo gone > {verdict}; else echo alive > {verdict}; fi')
    apply(cluster, namespace, queue("q", leaseDuration="3s", **BACKOFF), command("nap", script))
    first = workers("w1", "--queue=q", "--handler=nap")
    wait_live(cluster, namespace, "w1")
    apply(cluster, namespace, job("job-k", handler_name="nap"))
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30, message="the command to start")
    first.kill()  # SIGKILL: no cleanup of its own
    workers("w2", "--queue=q", "--handler=nap")
    final = wait_state(cluster, namespace, "job-k", "succeeded", timeout=60)
    assert timeline_of(final) == [("failed", "LeaseExpired"), ("succeeded", None)]
    assert verdict.read_text().strip() == "gone", "the first attempt's command outlived its worker into the retry"


# ================================================================ API-server outages
def proxied(cluster, proxy: FaultProxy, path: Path) -> Path:
    """A copy of the cluster's kubeconfig that reaches the API server through the proxy (plain HTTP, no
    credentials: the proxy authenticates upstream)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"] = {"server": proxy.url}
    config["users"][0]["user"] = {}
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def proxy(cluster) -> Iterator[FaultProxy]:
    with FaultProxy(kubeconfig.load(str(cluster.kubeconfig)), lifetime=300) as p:
        p.faulty = False  # no rotating faults: only the outage
        yield p


def test_an_outage_shorter_than_the_renew_deadline_costs_nothing(cluster, namespace, crds, workers, proxy, tmp_path):
    runs = tmp_path / "runs"
    config = proxied(cluster, proxy, tmp_path / "kubeconfig")
    op = Operator(config, namespace, tmp_path)
    op.start()
    try:
        # leaseDuration 60 s: the worker's renew deadline (2/3 of it) is 40 s, the outage 20 s.
        apply(cluster, namespace, queue("q", leaseDuration="60s", **BACKOFF),
              command("nap", locked(runs, "sleep $(tr -dc 0-9)")))
        worker = workers("w", "--queue=q", "--handler=nap", "--concurrency", "2", config=config)
        incarnation = wait_live(cluster, namespace, "w")["spec"]["incarnation"]
        # One ends during the outage (its result waits), one runs through it.
        apply(cluster, namespace, job("job-short", handler_name="nap", payload={"seconds": 4}),
              job("job-long", handler_name="nap", payload={"seconds": 26}))
        for name in ("job-short", "job-long"):
            wait_state(cluster, namespace, name, "running", timeout=30)
        proxy.down = True
        try:
            holds_for(lambda: worker.proc.poll() is None, 20, interval=0.5, message="the worker runs through it")
        finally:
            proxy.down = False
        assert proxy.down_requests > 0, "nobody noticed the outage: the test proves nothing"
        assert ("job-short", 1, "end") in runs_of(runs), "the short job ended during the outage"
        for name in ("job-short", "job-long"):
            final = wait_state(cluster, namespace, name, "succeeded", timeout=60)
            assert timeline_of(final) == [("succeeded", None)] and final["attempt"] == 1, (name, final)
            assert final["attempts"][0]["worker"] == f"w/{incarnation}"
        assert worker.proc.poll() is None, "no worker exit"
        assert worker_object(cluster, namespace, "w")["spec"]["incarnation"] == incarnation, "no re-registration"
        assert sorted(r for r in runs_of(runs) if r[2] == "start") == [("job-long", 1, "start"),
                                                                        ("job-short", 1, "start")], "each ran once"
    finally:
        op.stop()


def test_a_longer_outage_stops_the_handlers_and_the_worker_registers_again_without_exiting(
        cluster, namespace, crds, workers, proxy, tmp_path):
    runs, term = tmp_path / "runs", tmp_path / "term"
    config = proxied(cluster, proxy, tmp_path / "kubeconfig")
    op = Operator(config, namespace, tmp_path)
    op.start()
    try:
        # leaseDuration 6 s: renew deadline 4 s, the outage 15 s.
        script = locked(runs, f'if [ "$SEXTANT_SEQUENCE" = 1 ]; then trap "touch {term}; exit 143" TERM; '
                              'sleep 120 & wait; fi')
        apply(cluster, namespace, queue("q", leaseDuration="6s", **BACKOFF), command("nap", script))
        worker = workers("w", "--queue=q", "--handler=nap", config=config)
        incarnation = wait_live(cluster, namespace, "w")["spec"]["incarnation"]
        apply(cluster, namespace, job("job-o", handler_name="nap"))
        wait_for(lambda: ("job-o", 1, "start") in runs_of(runs), 30, message="the command to start")
        proxy.down = True
        try:
            wait_for(term.exists, 12, message="the worker to stop its handler past its renew deadline")
            holds_for(lambda: worker.proc.poll() is None, 15 - 4, interval=0.5, message="the worker keeps running")
        finally:
            proxy.down = False
        wait_for(lambda: worker_object(cluster, namespace, "w").get("spec", {}).get("incarnation") not in
                 (None, incarnation), 60, message="the worker to register again, with a new incarnation")
        final = wait_state(cluster, namespace, "job-o", "succeeded", timeout=60)
        assert timeline_of(final) == [("failed", "LeaseExpired"), ("succeeded", None)]
        assert worker.proc.poll() is None, "it never exits"
        assert not [r for r in runs_of(runs) if r[2] == "overlap"]
    finally:
        op.stop()


def test_a_job_its_worker_cannot_read_yet_is_read_again_not_failed(cluster, namespace, crds, workers, proxy,
                                                                    tmp_path):
    """The worker's GETs of its job answered 503, more often than one read retries: no answer about the job. It reads
    again, and the job's one attempt runs (maxAttempts 1: reported NotFound, the job would have ended dead)."""
    runs = tmp_path / "runs"
    op = Operator(cluster.kubeconfig, namespace, tmp_path)  # the operator talks to the API server directly
    op.start()
    try:
        apply(cluster, namespace, queue("q", maxAttempts=1, **BACKOFF), command("nap", locked(runs, "true")))
        workers("w", "--queue=q", "--handler=nap", config=proxied(cluster, proxy, tmp_path / "kubeconfig"))
        wait_live(cluster, namespace, "w")
        proxy.refuse(12, lambda request: request.method == "GET" and request.path.endswith("/jobs/job-r"))
        apply(cluster, namespace, job("job-r", handler_name="nap"))
        final = wait_state(cluster, namespace, "job-r", "succeeded", timeout=90)
        assert proxy.counts["refused on demand"] == 12, "the worker's reads were not refused: the test proves nothing"
        assert timeline_of(final) == [("succeeded", None)] and final["attempt"] == 1, final
        assert runs_of(runs) == [("job-r", 1, "start"), ("job-r", 1, "end")]
    finally:
        op.stop()
