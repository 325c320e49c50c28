"""The `local_node` fixture: a node whose pods really run, as local processes (sextant.dev.localnode).

tests/cluster/conftest.py registers the fixture once for the session (importing it into several test modules
would make one agent per module, all serving the same node, and run each pod several times). A test asks for it:

    def test_x(cluster, namespace, local_node):
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(local_node.pod("p", "echo hi")))
        ...
        assert "hi" in local_node.logs(namespace, "p")

A Handler's template lands there with `tolerations: [local_node.toleration]` and
`nodeSelector: local_node.node_selector` (i.e. {type: local}). One agent serves the whole session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sextant.dev.localnode import NODE_SELECTOR, TAINT_KEY, TOLERATION, AgentProcess, read
from tests.harness import wait_for

NODE_NAME = "local-node-0"


@dataclass
class LocalNodeHandle:
    name: str
    workdir: Path
    agent: AgentProcess
    toleration = TOLERATION
    node_selector = NODE_SELECTOR

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        """The container's output, read from the agent's log file ('' before it starts)."""
        return read(self.workdir, namespace, pod, container)

    def log_tail(self, lines: int = 60) -> str:
        """The agent's own log."""
        return self.agent.log_tail(lines)

    def pod(self, name: str, script: str, *, env: list[dict[str, Any]] | dict[str, str] | None = None,
            args: list[str] | None = None, container: str = "main", grace: int | None = None,
            finalizers: list[str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """A bare pod (restartPolicy Never) running `sh -c script` on the local node."""
        if isinstance(env, dict):
            env = [{"name": k, "value": v} for k, v in env.items()]
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "nodeSelector": dict(self.node_selector),
            "tolerations": [dict(self.toleration)],
            "containers": [{"name": container, "image": "registry.example/ignored:1",
                            "command": ["sh", "-c", script], **({"args": args} if args else {}),
                            **({"env": env} if env else {})}],
        }
        if grace is not None:
            spec["terminationGracePeriodSeconds"] = grace
        metadata: dict[str, Any] = {"name": name, "labels": labels or {}}
        if finalizers:
            metadata["finalizers"] = finalizers
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _node_ready(cluster: Any, name: str) -> bool:
    node = json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
    # Pods schedule once the node-lifecycle controller has lifted the not-ready taint of a new node.
    blocking = [t for t in node["spec"].get("taints") or [] if t["key"] != TAINT_KEY]
    return ready and not blocking


@pytest.fixture(scope="session")
def local_node(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNodeHandle]:
    workdir = tmp_path_factory.mktemp("localnode")
    agent = AgentProcess(cluster.kubeconfig, NODE_NAME, workdir, log_file=workdir / "agent.log")
    agent.start()
    try:
        agent.wait_ready(60)
        wait_for(lambda: _node_ready(cluster, NODE_NAME), 60, interval=0.2,
                 message=lambda: f"node {NODE_NAME} Ready and schedulable; agent log:\n{agent.log_tail()}")
        yield LocalNodeHandle(NODE_NAME, workdir, agent)
    finally:
        agent.stop()
