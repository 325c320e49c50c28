"""The thin pytest side of sextant.dev.localcluster.

- `cluster` (session): one local control plane for the whole run, started only if a test asks for it
  (unit tests never do); SEXTANT_TEST_KUBECONFIG points the tests at an existing cluster instead.
- `namespace` (function): a fresh namespace per test, deleted afterwards without waiting.
- tests under tests/cluster/ are marked `cluster` (deselect them with `-m "not cluster"`).
- `postgres` (session): one PostgreSQL server of its own (tests/harness/postgres.py), started only if a test asks
  for it (the archive's suite, the cluster tests of the archive), each test making its own database in it.
- a failing cluster test gets the tail of every component's log in its report.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `from tests.harness import ...` in any import mode
    sys.path.insert(0, str(ROOT))

from sextant.dev.localcluster import ControlPlaneUnavailable, LocalCluster, LocalClusterError, new_name  # noqa: E402
from tests.harness import Cluster, namespace_name  # noqa: E402
from tests.harness.postgres import Postgres, PostgresUnavailable  # noqa: E402

CLUSTER_DIR = Path(__file__).resolve().parent / "cluster"
LOG_LINES = 40
_session_cluster: Cluster | None = None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    global _session_cluster
    local = LocalCluster(name=new_name(), nodes=2)
    try:
        local.up()
    except (ControlPlaneUnavailable, LocalClusterError) as exc:
        pytest.fail(f"no control plane: {exc}", pytrace=False)
    _session_cluster = Cluster(local)
    try:
        yield _session_cluster
    finally:
        _session_cluster = None
        local.down()


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = cluster.create_namespace(namespace_name(request.node.name))
    yield name
    cluster.delete_namespace(name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and "cluster" in getattr(item, "fixturenames", ()) and _session_cluster is not None:
        for component, text in _session_cluster.component_logs(LOG_LINES).items():
            report.sections.append((f"{component} log (last {LOG_LINES} lines)", text))
    return report


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    try:
        server = Postgres()
        server.start()
    except PostgresUnavailable as exc:
        pytest.fail(f"no PostgreSQL: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.destroy()
