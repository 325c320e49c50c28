"""What the lifecycle tests share: the operator as a real process, resource builders, and a pod recorder
that sees every pod change through a watch (so limits are asserted from every event, not from samples)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from tests.harness import wait_for

KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Operator:
    """`sextant operator` as its own process, watching one namespace, so a test may kill -9 it."""

    def __init__(self, kubeconfig: Path, namespace: str, log_dir: Path, *extra: str,
                 env: dict[str, str] | None = None) -> None:
        self.kubeconfig, self.namespace, self.extra = kubeconfig, namespace, extra
        self.env = env or {}  # added to the test's environment (e.g. SEXTANT_ARCHIVE_DSN)
        self.log_path = log_dir / f"operator-{namespace}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.http_port = free_port()
        self.http_url = f"http://127.0.0.1:{self.http_port}"

    def start(self) -> None:
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"--- start {self.starts}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sextant", "--kubeconfig", str(self.kubeconfig), "operator",
             "--watch-namespace", self.namespace, "--log-level", "info", "--http-host", "127.0.0.1",
             "--http-port", str(self.http_port), *self.extra],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last write."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def token_kubeconfig(cluster: Any, token: str, path: Path) -> Path:
    """A kubeconfig for the cluster's server that authenticates with a bearer token (a service account's)."""
    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [server],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": server["name"], "user": "sa"}}],
        "current-context": "sa"}))
    return path


def proxied_kubeconfig(cluster: Any, url: str, path: Path) -> Path:
    """A copy of the cluster's kubeconfig that reaches the API server through a proxy (tests/harness/faultproxy.py:
    plain HTTP, no credentials: the proxy authenticates upstream)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"] = {"server": url}
    config["users"][0]["user"] = {}
    path.write_text(yaml.safe_dump(config))
    return path


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def handler(name: str, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A Handler whose pods land on kwok nodes; `annotations` steer the kwok Stages (how the pod ends)."""
    template = {
        "metadata": {"annotations": annotations or {}},
        "spec": {
            "containers": [{"name": "handler", "image": "registry.example/handler:1", "command": ["run"]}],
            "tolerations": [KWOK_TOLERATION],
            "nodeSelector": {"type": "kwok"},
        },
    }
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": name},
            "spec": {"template": template, **spec}}


def job(name: str, queue_name: str = "q", handler_name: str = "h", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job", "metadata": {"name": name},
            "spec": {"queue": queue_name, "handler": handler_name, **spec}}


def apply(cluster: Any, namespace: str, *objects: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess:
    # JSON documents (JSON is YAML): PyYAML leaves a string such as 71e265 unquoted, and kubectl reads it as a number.
    text = "".join(f"---\n{json.dumps(obj)}\n" for obj in objects)
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", input=text, check=check)


def get_json(cluster: Any, namespace: str, *what: str) -> dict[str, Any]:
    """`kubectl get -n namespace WHAT -o json`. The forms tests poll with (a type, a name or a label/field selector)
    are read over one kept connection instead: a kubectl process per poll costs ~0.1 s of CPU, which a 2-core machine
    running the control plane cannot spare. Anything else, and any error, is kubectl's (its output, its errors)."""
    found = _Reader.of(cluster.kubeconfig).get(namespace, what)
    if found is not None:
        return found
    return json.loads(cluster.kubectl("get", "-n", namespace, *what, "-o", "json").stdout)


class _Reader:
    """GETs of a few resource types by their REST paths, with the client library's connection pool."""

    # kubectl's names for them → (API path prefix, plural)
    TYPES = {
        "pod": ("/api/v1", "pods"), "pods": ("/api/v1", "pods"), "events": ("/api/v1", "events"),
        "lease": ("/apis/coordination.k8s.io/v1", "leases"), "leases": ("/apis/coordination.k8s.io/v1", "leases"),
        "squeue": ("/apis/sextant.dev/v1alpha1", "queues"),
        **{f"{plural}.sextant.dev": ("/apis/sextant.dev/v1alpha1", plural)
           for plural in ("jobs", "queues", "handlers", "schedules", "workers", "workerpools")},
    }
    SELECTORS = {"-l": "labelSelector", "--selector": "labelSelector", "--field-selector": "fieldSelector"}
    _kept: dict[str, _Reader] = {}

    def __init__(self, kubeconfig: Path) -> None:
        self.api = k8s_config.new_client_from_config(str(kubeconfig))

    @classmethod
    def of(cls, kubeconfig: Path) -> _Reader:
        if str(kubeconfig) not in cls._kept:
            cls._kept[str(kubeconfig)] = cls(kubeconfig)
        return cls._kept[str(kubeconfig)]

    def get(self, namespace: str, what: tuple[str, ...]) -> dict[str, Any] | None:
        """The object or list kubectl would print; None for a form this does not read, or an error."""
        words: list[str] = []
        query: list[tuple[str, str]] = []
        args = iter(what)
        for word in args:
            if not word.startswith("-"):
                words.append(word)
            elif word in self.SELECTORS and (value := next(args, None)) is not None:
                query.append((self.SELECTORS[word], value))
            else:
                return None
        if len(words) == 1 and "/" in words[0]:
            words = words[0].split("/", 1)
        if not 1 <= len(words) <= 2 or words[0] not in self.TYPES or (len(words) == 2 and query):
            return None
        prefix, plural = self.TYPES[words[0]]
        path = f"{prefix}/namespaces/{namespace}/{plural}" + (f"/{words[1]}" if len(words) == 2 else "")
        try:
            request = self.api.param_serialize("GET", path, query_params=query, auth_settings=["BearerToken"])
            response = self.api.call_api(*request, _request_timeout=30)
            if response.status != 200:
                return None
            body = json.loads(response.read())
        except Exception:  # noqa: BLE001 - kubectl says it, as before
            return None
        if len(words) == 1:  # as kubectl prints a list: each item with its apiVersion and kind
            kind = str(body.get("kind", "")).removesuffix("List")
            body["items"] = [{"apiVersion": body.get("apiVersion"), "kind": kind, **item} for item in body["items"]]
            body["kind"], body["metadata"] = "List", {"resourceVersion": ""}
        for obj in body["items"] if len(words) == 1 else [body]:
            obj.get("metadata", {}).pop("managedFields", None)  # kubectl leaves them out
        return body


def jobs(cluster: Any, namespace: str) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["name"]: j for j in get_json(cluster, namespace, "jobs.sextant.dev")["items"]}


def follow(list_call: Any, *args: Any, on_event: Any, stop: threading.Event, version: str | None = None,
           **kwargs: Any) -> None:
    """Watch list_call(*args, **kwargs) from `version` (None: from a list) and hand each event to on_event, until
    `stop` is set; a dropped watch resumes from the last resourceVersion seen. For the recorders' threads."""
    while not stop.is_set():
        since = {"resource_version": version} if version is not None else {}
        try:
            for event in k8s_watch.Watch().stream(list_call, *args, timeout_seconds=5, **since, **kwargs):
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"] if isinstance(obj, dict) else obj.metadata.resource_version
                on_event(event)
                if stop.is_set():
                    return
        except Exception:  # a dropped watch resumes from the last version seen
            stop.wait(0.2)


def wait_events(cluster: Any, namespace: str, *selector: str, until: Any, timeout: float = 30,
                what: str = "the Events") -> list[dict[str, Any]]:
    """The namespace's Events (narrowed by `selector`, e.g. "--field-selector", "involvedObject.name=x") once
    `until(events)` holds. The operator posts Events off its hot path, after the status write a test waits for."""
    seen: list[dict[str, Any]] = []

    def arrived() -> list[dict[str, Any]] | None:
        seen[:] = get_json(cluster, namespace, "events", *selector)["items"]
        return list(seen) if until(seen) else None

    return wait_for(arrived, timeout, message=lambda: f"{what}; seen {[(e['reason'], e['message']) for e in seen]}")


def status(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    return get_json(cluster, namespace, "jobs.sextant.dev", name).get("status") or {}


def wait_state(cluster: Any, namespace: str, name: str, *states: str, timeout: float = 60) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.clear()  # the status as it is now: a field the operator removed must not linger from an earlier poll
        seen.update(status(cluster, namespace, name))
        return seen.get("state") in states

    wait_for(reached, timeout, message=lambda: f"job {name} to be {'/'.join(states)}, last status {seen}")
    return seen


def wait_all(cluster: Any, namespace: str, count: int, states: set[str], timeout: float) -> dict[str, dict]:
    found: dict[str, dict] = {}

    def done() -> bool:
        found.clear()
        found.update(jobs(cluster, namespace))
        return len(found) == count and all((j.get("status") or {}).get("state") in states for j in found.values())

    def describe() -> str:
        by_state: dict[str, int] = defaultdict(int)
        for j in found.values():
            by_state[(j.get("status") or {}).get("state", "new")] += 1
        return f"{count} jobs to reach {states}; now {dict(by_state)}"

    wait_for(done, timeout, interval=0.5, message=describe)
    return found


def timeline_of(status_: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(a["result"], a.get("reason")) for a in status_.get("attempts", [])]


@dataclass
class PodRecord:
    at: float
    kind: str  # ADDED | MODIFIED | DELETED
    name: str
    job: str
    queue: str
    phase: str
    deleting: bool
    created: str


@dataclass
class PodRecorder:
    """Every change of the namespace's Sextant pods, from one watch started before the test acts."""

    kubeconfig: Path
    namespace: str
    records: list[PodRecord] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> PodRecorder:
        api = k8s_client.CoreV1Api(k8s_config.new_client_from_config(str(self.kubeconfig)))
        self._thread = threading.Thread(target=self._run, args=(api,), daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "pod watch did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _run(self, api: k8s_client.CoreV1Api) -> None:
        listed = api.list_namespaced_pod(self.namespace, label_selector="sextant.dev/job")
        version = listed.metadata.resource_version
        self._ready.set()

        def record(event: dict[str, Any]) -> None:
            pod = event["object"]
            labels = pod.metadata.labels or {}
            self.records.append(PodRecord(
                time.monotonic(), event["type"], pod.metadata.name, labels.get("sextant.dev/job", ""),
                labels.get("sextant.dev/queue", ""), pod.status.phase or "Pending",
                pod.metadata.deletion_timestamp is not None, str(pod.metadata.creation_timestamp)))

        follow(api.list_namespaced_pod, self.namespace, label_selector="sextant.dev/job", on_event=record,
               stop=self._stop, version=version)

    def _replay(self) -> list[tuple[PodRecord, dict[str, PodRecord]]]:
        alive: dict[str, PodRecord] = {}
        out = []
        for r in list(self.records):
            finished = r.phase in ("Succeeded", "Failed")
            if r.kind == "DELETED" or finished:
                alive.pop(r.name, None)
            else:
                alive[r.name] = r
            out.append((r, dict(alive)))
        return out

    def max_unfinished(self, queue_name: str) -> int:
        """The most pods of the queue that were not finished at one moment."""
        return max((sum(1 for p in alive.values() if p.queue == queue_name) for _, alive in self._replay()),
                   default=0)

    def max_unfinished_by(self, group: Callable[[PodRecord], str]) -> dict[str, int]:
        """The most unfinished pods of each group (e.g. a job's concurrency key) at one moment."""
        most: dict[str, int] = defaultdict(int)
        for _, alive in self._replay():
            now: dict[str, int] = defaultdict(int)
            for p in alive.values():
                now[group(p)] += 1
            for key, n in now.items():
                most[key] = max(most[key], n)
        return dict(most)

    def max_alive_per_job(self) -> int:
        """The most pods of one job alive (running or terminating) at one moment."""
        return max(self.max_unfinished_by(lambda p: p.job).values(), default=0)

    def creation_order(self) -> list[str]:
        """Jobs in the order their first pod appeared."""
        order: list[str] = []
        for r in self.records:
            if r.kind == "ADDED" and r.job not in order:
                order.append(r.job)
        return order

    def pods_created(self) -> dict[str, set[str]]:
        created: dict[str, set[str]] = defaultdict(set)
        for r in self.records:
            if r.kind == "ADDED":
                created[r.job].add(r.name)
        return created


HANDLERS_DIR = Path(__file__).parent / "handlers"


class WorkerProcess:
    """`sextant worker` as its own process (so a test may SIGKILL or SIGTERM it), its handler modules from
    tests/cluster/handlers; its output in a log file."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str, log_dir: Path, *args: str) -> None:
        self.kubeconfig, self.namespace, self.name, self.args = kubeconfig, namespace, name, args
        self.log_path = log_dir / f"worker-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "sextant", "--kubeconfig", str(self.kubeconfig), "worker",
                "-n", self.namespace, "--name", self.name, *self.args]

    def start(self) -> WorkerProcess:
        log = open(self.log_path, "ab")
        path = os.pathsep.join(p for p in (str(HANDLERS_DIR), os.environ.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"})
        return self

    def signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no drain, no last write; its Lease is left to expire."""
        self.signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait(10)

    def wait(self, timeout: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class JobRecord:
    at: float
    kind: str  # ADDED | MODIFIED | DELETED
    name: str
    state: str
    worker: str | None
    sequence: int
    priority: int
    created: int  # the order the recorder first saw it in


@dataclass
class JobRecorder:
    """Every change of the namespace's Sextant jobs, from one watch started before the test acts: what ran where
    and when, as the API server saw it (not as the workers say)."""

    kubeconfig: Path
    namespace: str
    records: list[JobRecord] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> JobRecorder:
        api = k8s_client.CustomObjectsApi(k8s_config.new_client_from_config(str(self.kubeconfig)))
        self._thread = threading.Thread(target=self._run, args=(api,), daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "job watch did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _run(self, api: k8s_client.CustomObjectsApi) -> None:
        args = ("sextant.dev", "v1alpha1", self.namespace, "jobs")
        version = api.list_namespaced_custom_object(*args)["metadata"]["resourceVersion"]
        order: dict[str, int] = {}
        self._ready.set()

        def record(event: dict[str, Any]) -> None:
            obj = event["object"]
            name, st = obj["metadata"]["name"], obj.get("status") or {}
            order.setdefault(name, len(order))
            self.records.append(JobRecord(time.monotonic(), event["type"], name, st.get("state") or "new",
                                          st.get("worker"), st.get("sequence", 0),
                                          (obj.get("spec") or {}).get("priority", 0), order[name]))

        follow(api.list_namespaced_custom_object, *args, on_event=record, stop=self._stop, version=version)

    def _replay(self) -> list[dict[str, JobRecord]]:
        """After each event: the jobs running at that moment."""
        running: dict[str, JobRecord] = {}
        out = []
        for r in list(self.records):
            if r.kind != "DELETED" and r.state == "running":
                running[r.name] = r
            else:
                running.pop(r.name, None)
            out.append(dict(running))
        return out

    def max_running(self) -> int:
        return max((len(running) for running in self._replay()), default=0)

    def max_running_per_worker(self) -> dict[str, int]:
        most: dict[str, int] = defaultdict(int)
        for running in self._replay():
            per: dict[str, int] = defaultdict(int)
            for r in running.values():
                per[r.worker or "-"] += 1
            for worker, count in per.items():
                most[worker] = max(most[worker], count)
        return dict(most)

    def start_order(self) -> list[str]:
        """Jobs in the order their first attempt started."""
        order: list[str] = []
        for r in self.records:
            if r.state == "running" and r.name not in order:
                order.append(r.name)
        return order
