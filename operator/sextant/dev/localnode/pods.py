"""One pod on the local node: its process, its status in the API, its graceful deletion.

A PodRunner owns one pod (by uid) from the moment the agent sees it bound to the node until it is gone
from the API. Its task runs the pod's life in order: start the first container's command, report
Running, wait for the process to end (or for a deletion or the pod's activeDeadlineSeconds to stop it with
SIGTERM, then SIGKILL after the grace period), report the terminated state, and, once the pod has a
deletionTimestamp, delete it for good with gracePeriodSeconds=0, as a kubelet finishes a graceful deletion.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ...kube.client import ApiError, Conflict, Kube, NotFound
from ...kube.clock import utcnow
from ...resources import contract
from ...resources.common import format_time
from .logs import log_path

log = logging.getLogger(__name__)


class Node(Protocol):
    """What a pod reads of the node that runs it (agent.LocalNode), without importing the agent that imports it."""

    name: str
    node_ip: str
    workdir: Path
    base_env: dict[str, str]
    api: Kube

STRATEGIC_PATCH = "application/strategic-merge-patch+json"
# What a kubelet keeps of a failed container's log as its termination message (FallbackToLogsOnError).
MESSAGE_LINES, MESSAGE_BYTES = 80, 2048
# Where `sextant run` writes its termination message here (runner/env.TERMINATION_LOG_ENV: the same name; not
# imported, so that the node agent loads nothing of the runner).
TERMINATION_LOG_ENV = "SEXTANT_TERMINATION_LOG"
_FIELD_LABEL = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def now() -> str:
    return format_time(utcnow(), precise=False)


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command, args and env values: $$ is a literal $, unknown stays as is."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env[name] if name in env else text[i:end + 1])
                    i = end + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


def exit_code_of(returncode: int) -> int:
    """A process killed by signal N reports 128+N, as in a container."""
    return 128 - returncode if returncode < 0 else returncode


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _descendant_groups(pid: int) -> set[int]:
    """The process groups of pid's descendants, from /proc."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append((int(entry.name), int(fields[2])))  # ppid: (pid, pgrp)
    groups, todo = set(), [pid]
    while todo:
        for child, group in children.get(todo.pop(), ()):
            groups.add(group)
            todo.append(child)
    return groups


def kill_container(pid: int) -> None:
    """SIGKILL the group of a pod's main process and every group its processes started (the runner's handler has
    its own), as a container's end takes all of its processes."""
    groups = _descendant_groups(pid) - {pid}  # found while the tree is whole: the main process's end breaks it
    # Its own group first: a main process whose children died first could exit on its own (status 0) before its
    # SIGKILL came, and the container would look like it completed.
    for group in (pid, *groups):
        signal_group(group, signal.SIGKILL)


def _proc_start_ticks(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, starttime


@dataclass
class Outcome:
    exit_code: int
    reason: str  # Completed | Error | StartError | DeadlineExceeded (pod) ...
    message: str = ""
    pod_reason: str = ""  # status.reason of the pod, e.g. DeadlineExceeded
    pod_message: str = ""


class PodRunner:
    def __init__(self, node: Node, pod: dict[str, Any], mode: str = "new") -> None:
        """mode: "new" (start it), "lost" (it ran under an earlier agent; its process is gone), "finished"."""
        self.node = node
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.mode = mode
        container = (pod["spec"].get("containers") or [{}])[0]
        self.container: dict[str, Any] = container
        self.container_name: str = container.get("name", "main")
        self.process: asyncio.subprocess.Process | None = None
        self.started_at: str | None = None
        self.outcome: Outcome | None = None
        self.changed = asyncio.Event()  # a newer pod object arrived
        self.gone = False  # the pod no longer exists in the API
        self.task: asyncio.Task[None] | None = None
        self.deleted_for_good = False

    # ---- events from the watch -------------------------------------------------------------------------------

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        self.changed.set()

    def vanish(self) -> None:
        """The pod was removed from the API (deleted with grace 0 by someone, or by us): stop at once."""
        self.gone = True
        if self.running:
            kill_container(self.process.pid)  # type: ignore[union-attr]
        self.changed.set()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def deletion_requested(self) -> bool:
        return self.gone or bool(self.pod["metadata"].get("deletionTimestamp"))

    @property
    def path(self) -> str:
        return contract.pods_path(self.namespace, self.name)

    # ---- the life of the pod -----------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            if self.mode == "new" and not self.deletion_requested:
                await self._start()
                if self.process is not None:
                    await self._report_running()
                    self.outcome = await self._supervise()
                await self._report_terminated()
            elif self.mode == "lost":
                self.outcome = Outcome(137, "Error", "the process was lost: the local node agent restarted")
                await self._report_terminated()
            await self._finish_deletion()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pod %s/%s: the local node agent failed to run it", self.namespace, self.name)

    async def _start(self) -> None:
        spec = self.pod["spec"]
        if len(spec.get("containers") or []) > 1:
            log.warning("pod %s/%s: only its first container %r runs on the local node", self.namespace,
                        self.name, self.container_name)
        if spec.get("initContainers"):
            log.warning("pod %s/%s: init containers are ignored on the local node", self.namespace, self.name)
        env = self._environment()
        argv = [expand(str(a), env) for a in (self.container.get("command") or []) + (self.container.get("args") or [])]
        self.started_at = now()
        if not self.container.get("command"):
            self.outcome = Outcome(128, "StartError", "the local node ignores images: the container needs a command")
            return
        workdir = self.container.get("workingDir")
        if workdir:
            cwd = Path(workdir)
            if not cwd.is_dir():
                self.outcome = Outcome(128, "StartError", f"workingDir {workdir} does not exist on this machine")
                return
        else:
            cwd = self.node.workdir / "pods" / self.namespace / self.name
            cwd.mkdir(parents=True, exist_ok=True)
        logfile = log_path(self.node.workdir, self.namespace, self.name, self.container_name)
        logfile.parent.mkdir(parents=True, exist_ok=True)
        self._termination_log().parent.mkdir(parents=True, exist_ok=True)
        self._termination_log().unlink(missing_ok=True)
        try:
            with logfile.open("wb") as out:
                self.process = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
                    cwd=str(cwd), env=env, start_new_session=True,
                )
        except OSError as exc:
            self.outcome = Outcome(128, "StartError", f"cannot start {argv[0]!r}: {exc.strerror or exc}")
            return
        self._write_pidfile()
        log.info("pod %s/%s: started pid %d: %s", self.namespace, self.name, self.process.pid, argv)

    def _termination_log(self) -> Path:
        """Where the container's termination message is written: a kubelet mounts a file at terminationMessagePath
        (/dev/termination-log), which a local process cannot write; the runner writes here instead, told by
        SEXTANT_TERMINATION_LOG."""
        return self.node.workdir / "pods" / self.namespace / self.name / ".termination-log"

    def _environment(self) -> dict[str, str]:
        env = dict(self.node.base_env)
        env["HOSTNAME"] = self.name
        env[TERMINATION_LOG_ENV] = str(self._termination_log())
        for var in self.container.get("env") or []:
            name = var.get("name")
            if not name:
                continue
            if "valueFrom" in var:
                value = self._value_from(name, var["valueFrom"])
                if value is None:
                    continue
                env[name] = value
            else:
                env[name] = expand(str(var.get("value", "")), env)
        if self.container.get("envFrom"):
            log.warning("pod %s/%s: envFrom is ignored on the local node", self.namespace, self.name)
        return env

    def _value_from(self, name: str, source: dict[str, Any]) -> str | None:
        ref = source.get("fieldRef")
        if ref is None:
            log.warning("pod %s/%s: env %s: only valueFrom.fieldRef is supported on the local node; skipped",
                        self.namespace, self.name, name)
            return None
        field = ref.get("fieldPath", "")
        meta, spec = self.pod["metadata"], self.pod["spec"]
        ip = self.node.node_ip
        simple = {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "metadata.uid": self.uid,
            "spec.nodeName": self.node.name,
            "spec.serviceAccountName": spec.get("serviceAccountName", ""),
            "status.podIP": ip,
            "status.podIPs": ip,
            "status.hostIP": ip,
            "status.hostIPs": ip,
        }
        if field in simple:
            return simple[field]
        match = _FIELD_LABEL.fullmatch(field)
        if match:
            return (meta.get(match.group(1)) or {}).get(match.group(2), "")
        log.warning("pod %s/%s: env %s: fieldRef %r is not supported on the local node; skipped",
                    self.namespace, self.name, name, field)
        return None

    def _pidfile(self) -> Path:
        return self.node.workdir / "run" / f"{self.uid}.json"

    def _write_pidfile(self) -> None:
        assert self.process is not None
        path = self._pidfile()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"pid": self.process.pid, "start": _proc_start_ticks(self.process.pid),
                                    "namespace": self.namespace, "name": self.name}))

    async def _supervise(self) -> Outcome:
        """Wait for the process to end, stopping it on deletion or when activeDeadlineSeconds pass."""
        proc = self.process
        assert proc is not None
        waiter = asyncio.ensure_future(proc.wait())
        started = time.monotonic()
        deadline_seconds = self.pod["spec"].get("activeDeadlineSeconds")
        deadline = started + deadline_seconds if deadline_seconds is not None else None
        stop_reason = ""
        kill_at: float | None = None
        try:
            while not waiter.done():
                grace = self._grace_seconds()
                if kill_at is None and self.deletion_requested:
                    stop_reason = "deleted"
                    kill_at = self._stop(grace)
                elif kill_at is None and deadline is not None and time.monotonic() >= deadline:
                    stop_reason = "deadline"
                    kill_at = self._stop(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
                elif kill_at is not None and self.deletion_requested:
                    kill_at = min(kill_at, time.monotonic() + grace)  # a second delete may shorten the grace
                if kill_at is not None and time.monotonic() >= kill_at:
                    kill_container(proc.pid)
                    kill_at = float("inf")
                timeouts = [kill_at - time.monotonic()] if kill_at not in (None, float("inf")) else []
                if deadline is not None and stop_reason == "":
                    timeouts.append(deadline - time.monotonic())
                self.changed.clear()
                changed = asyncio.ensure_future(self.changed.wait())
                await asyncio.wait({waiter, changed}, return_when=asyncio.FIRST_COMPLETED,
                                   timeout=max(0.0, min(timeouts)) if timeouts else None)
                changed.cancel()
        finally:
            if not waiter.done():
                waiter.cancel()
        # The container is gone when its main process is: so is whatever it left in its process group.
        signal_group(proc.pid, signal.SIGKILL)
        self._pidfile().unlink(missing_ok=True)
        code = exit_code_of(proc.returncode if proc.returncode is not None else -signal.SIGKILL)
        log.info("pod %s/%s: pid %d exited %d", self.namespace, self.name, proc.pid, code)
        outcome = Outcome(code, "Completed" if code == 0 else "Error")
        try:  # as a kubelet: the termination message, at most 4096 bytes of it
            outcome.message = self._termination_log().read_bytes()[:4096].decode("utf-8", "replace")
        except OSError:
            pass
        if code != 0 and not outcome.message and \
                self.container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            outcome.message = self._log_tail()
        if stop_reason == "deadline":
            outcome.pod_reason = "DeadlineExceeded"
            outcome.pod_message = "Pod was active on the node longer than the specified deadline"
        return outcome

    def _grace_seconds(self) -> float:
        if self.gone:
            return 0
        meta = self.pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        return max(0, int(grace))

    def _stop(self, grace: float) -> float:
        """SIGTERM the process group; the time to SIGKILL it."""
        assert self.process is not None
        log.info("pod %s/%s: SIGTERM to pid %d, SIGKILL in %s s", self.namespace, self.name, self.process.pid, grace)
        if grace > 0:
            signal_group(self.process.pid, signal.SIGTERM)
        else:
            kill_container(self.process.pid)
        return time.monotonic() + grace

    def _log_tail(self) -> str:
        path = log_path(self.node.workdir, self.namespace, self.name, self.container_name)
        try:
            data = path.read_bytes()[-MESSAGE_BYTES:]
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-MESSAGE_LINES:])

    # ---- status --------------------------------------------------------------------------------------------------

    def _conditions(self, ready: bool, reason: str = "") -> list[dict[str, Any]]:
        stamp = now()
        existing = {c.get("type"): c for c in self.pod.get("status", {}).get("conditions") or []}
        wanted = {"PodReadyToStartContainers": not self.outcome, "Initialized": True, "Ready": ready,
                  "ContainersReady": ready, "PodScheduled": True}
        out = []
        for ctype, value in wanted.items():
            status = "True" if value else "False"
            old = existing.get(ctype) or {}
            cond: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None,
                                    "lastTransitionTime": old.get("lastTransitionTime") if old.get("status") == status
                                    else stamp}
            if not value and reason and ctype in ("Ready", "ContainersReady"):
                cond["reason"] = reason
            out.append(cond)
        return out

    def _container_statuses(self, state: dict[str, Any], ready: bool) -> list[dict[str, Any]]:
        statuses = []
        for i, container in enumerate(self.pod["spec"].get("containers") or []):
            image = container.get("image", "")
            status: dict[str, Any] = {"name": container.get("name", ""), "image": image, "imageID": image,
                                      "restartCount": 0}
            if i == 0:
                status.update(state=state, ready=ready, started="running" in state,
                              containerID=f"localnode://{self.uid}")
            else:
                status.update(ready=False, started=False, state={"waiting": {
                    "reason": "NotRunOnLocalNode", "message": "the local node runs only a pod's first container"}})
            statuses.append(status)
        return statuses

    async def _patch_status(self, status: dict[str, Any]) -> None:
        if self.gone:
            return
        body = {"metadata": {"uid": self.uid}, "status": status}
        try:
            updated = await self.node.api.request("PATCH", self.path + "/status", body=body,
                                                  content_type=STRATEGIC_PATCH)
        except ApiError as exc:
            if isinstance(exc, (NotFound, Conflict)) or exc.status == 422:
                log.info("pod %s/%s: status not written (%s)", self.namespace, self.name, exc)
                return
            raise
        if updated.get("metadata", {}).get("uid") == self.uid:
            self.pod = updated

    async def _report_running(self) -> None:
        ip = self.node.node_ip
        await self._patch_status({
            "phase": "Running",
            "hostIP": ip, "hostIPs": [{"ip": ip}],
            "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": self.started_at,
            "conditions": self._conditions(True),
            "containerStatuses": self._container_statuses({"running": {"startedAt": self.started_at}}, True),
        })

    async def _report_terminated(self) -> None:
        outcome = self.outcome
        assert outcome is not None
        self.changed.set()
        ip = self.node.node_ip
        started = self.started_at or now()
        terminated: dict[str, Any] = {"exitCode": outcome.exit_code, "reason": outcome.reason,
                                      "startedAt": started, "finishedAt": now(),
                                      "containerID": f"localnode://{self.uid}"}
        if outcome.message:
            terminated["message"] = outcome.message
        phase = "Succeeded" if outcome.exit_code == 0 and not outcome.pod_reason else "Failed"
        status: dict[str, Any] = {
            "phase": phase,
            "hostIP": ip, "hostIPs": [{"ip": ip}],
            "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": self.pod.get("status", {}).get("startTime") or started,
            "conditions": self._conditions(False, "PodCompleted"),
            "containerStatuses": self._container_statuses({"terminated": terminated}, False),
        }
        if outcome.pod_reason:
            status["reason"] = outcome.pod_reason
            status["message"] = outcome.pod_message
        await self._patch_status(status)

    async def _finish_deletion(self) -> None:
        """Once the pod has a deletionTimestamp (now or later), delete it with grace 0, as a kubelet does."""
        while not self.deletion_requested:
            self.changed.clear()
            await self.changed.wait()
        if self.gone:
            return
        try:
            await self.node.api.delete(self.path, 0, {"uid": self.uid})
            log.info("pod %s/%s: deleted", self.namespace, self.name)
        except (NotFound, Conflict):
            pass  # gone already, or another pod by that name now
        self.deleted_for_good = True

    async def abort(self, message: str) -> None:
        """The agent is stopping: kill the process now and report it Failed (137)."""
        if self.running:
            assert self.process is not None
            kill_container(self.process.pid)
            await self.process.wait()
            self._pidfile().unlink(missing_ok=True)
            self.outcome = Outcome(exit_code_of(self.process.returncode or -signal.SIGKILL), "Error", message)
            await self._report_terminated()


def reap_leftovers(workdir: Path) -> None:
    """Kill the process groups an earlier agent of this workdir left behind (it was killed without cleanup)."""
    run = workdir / "run"
    for path in run.glob("*.json") if run.is_dir() else ():
        try:
            info = json.loads(path.read_text())
            pid = int(info["pid"])
        except (OSError, ValueError, KeyError):
            path.unlink(missing_ok=True)
            continue
        if info.get("start") and _proc_start_ticks(pid) == info["start"]:
            log.warning("killing pid %d of pod %s/%s, left by an earlier agent", pid, info.get("namespace"),
                        info.get("name"))
            kill_container(pid)
        path.unlink(missing_ok=True)
