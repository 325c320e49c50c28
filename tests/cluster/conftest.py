"""Cluster-test fixtures for the operator: one `sextant operator` process per test, watching its namespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .localnode_fixture import local_node  # noqa: F401  (registered once here: one agent per session)
from .support import Operator

CRDS = Path(__file__).resolve().parents[2] / "crds"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    op = getattr(item, "_sextant_operator", None)
    if report.when == "call" and report.failed and op is not None:
        report.sections.append((f"operator log ({op.namespace})", op.log_tail()))
    if report.when == "call" and report.failed and op is not None and "local_node" in item.fixturenames:
        # What the pods on the local node said (the runner's own lines among them): a lease or a start that went
        # wrong shows there, not in the operator's log.
        node = item.funcargs["local_node"]
        for log in sorted((node.workdir / "logs" / op.namespace).glob("*/*.log")):
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            report.sections.append((f"local node: {log.parent.name}/{log.name}", tail))
        mine = [line for line in node.log_tail(5000).splitlines() if op.namespace in line]
        report.sections.append(("local node agent log (this namespace)", "\n".join(mine[-40:])))
    if report.when == "call" and report.failed:
        for worker in getattr(item, "_sextant_workers", ()):  # tests/cluster/test_worker.py
            report.sections.append((f"worker {worker.name} log", "\n".join(worker.log().splitlines()[-40:])))


@pytest.fixture
def operator(cluster, namespace, crds, tmp_path_factory, request) -> Iterator[Operator]:
    op = Operator(cluster.kubeconfig, namespace, tmp_path_factory.mktemp("operator"))
    request.node._sextant_operator = op
    op.start()
    yield op
    op.stop()


@pytest.fixture(scope="session")
def crds(cluster) -> None:
    """The CRDs, installed once per session."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    names = [f"crd/{p.name.removesuffix('.yaml')}" for p in sorted(CRDS.glob("*.yaml"))]
    cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=60s")
