"""The layering (README, Layout; docs/operator.md), read from the source:

- lifecycle/ (the pure rules) imports nothing of the project but resources/ (the public API's models) and itself, so
  that its rules stay testable without I/O, a clock or a cluster; nor does it read the environment or the clock, nor
  say when a status is written: that is the operator's write policy (controller/writes.py), pure too;
- kube/ (Kubernetes plumbing for every process) imports only resources/ and itself: it knows no lifecycle rule;
- only controller/ imports controller/ (the operator's internals), except the `sextant` command's composition root;
- archive/ (the database of finished jobs) imports nothing of the project but resources/, lifecycle/ and itself, and
  nothing imports it but the composition root (`sextant archive migrate`), the operator (controller/, which writes
  it) and the readers (http/, cli/, dashboard/ and history.py, the Python client's reads);
- nothing imports or reaches into kopf's private modules (`kopf._…`);
- no two packages import each other, directly or through others (no package cycles);
- no two modules import each other either, directly or through others, not even for types;
- no module keeps an unused import or a name that does not resolve (pyflakes);
- the view has one writer, the informers: only their callbacks (controller/jobs.py's on_job, on_pod, on_lease, and
  nothing else) call the view's job, pod and Lease feeding methods (Worker objects aside: controller/workerview.py).
"""

from __future__ import annotations

import ast
import io
from collections import defaultdict
from pathlib import Path

import pytest
from pyflakes.api import check
from pyflakes.reporter import Reporter

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "operator" / "sextant"
MODULES = sorted(PACKAGE_DIR.rglob("*.py"))
# The one module that composes every command of `sextant` (the operator's among them).
COMPOSITION_ROOT = "sextant.__main__"


def project_imports(source: str, package: str) -> set[str]:
    """The modules of sextant that source, a module of package, imports, by absolute name (relative imports
    resolved, imports inside functions included; `from m import x` counts m and m.x, as x may be a module)."""
    parts = package.split(".")
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = parts[:len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)  # a name may be a module
    return {m for m in found if m == "sextant" or m.startswith("sextant.")}


def module_name(path: Path) -> str:
    parts = ["sextant", *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path) -> str:
    return ".".join(["sextant", *path.relative_to(PACKAGE_DIR).parent.parts])


def imports_of(path: Path) -> set[str]:
    return project_imports(path.read_text(), package_of(path))


def outside(modules: set[str], allowed: tuple[str, ...]) -> set[str]:
    return {m for m in modules if not any(m == a or m.startswith(a + ".") for a in allowed)}


def top_package(module: str) -> str:
    """sextant.kube.client → kube; sextant.sdk → sdk; sextant → sextant."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def in_package(name: str):
    return [p for p in MODULES if p.relative_to(PACKAGE_DIR).parts[0] == name]


@pytest.mark.parametrize("path", in_package("lifecycle"), ids=lambda p: p.name)
def test_lifecycle_imports_nothing_of_sextant_but_resources_and_itself(path: Path):
    assert not outside(imports_of(path), ("sextant.resources", "sextant.lifecycle")), path.relative_to(PACKAGE_DIR)


@pytest.mark.parametrize("path", in_package("lifecycle"), ids=lambda p: p.name)
def test_lifecycle_reads_no_environment_clock_or_randomness(path: Path):
    tree = ast.parse(path.read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    attrs = {f"{n.value.id}.{n.attr}" for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"os", "random", "secrets", "time"}, path.name
    assert not attrs & {"datetime.now", "datetime.utcnow", "date.today", "os.environ"}, path.name
    assert "environ" not in names, path.name


# The operator's write policy: pure like the rules it follows, so that it is a table test (tests/unit/test_writes.py).
WRITE_POLICY = PACKAGE_DIR / "controller" / "writes.py"


def test_the_write_policy_imports_only_the_rules_and_the_models():
    assert not outside(imports_of(WRITE_POLICY), ("sextant.resources", "sextant.lifecycle"))


def test_the_write_policy_reads_no_environment_clock_or_randomness():
    test_lifecycle_reads_no_environment_clock_or_randomness(WRITE_POLICY)


@pytest.mark.parametrize("path", in_package("lifecycle"), ids=lambda p: p.name)
def test_the_rules_say_nothing_of_when_to_write(path: Path):
    """The rules decide the state; when it is written is the write policy's (controller/writes.py)."""
    assert "RECORD_" not in path.read_text(), path.relative_to(PACKAGE_DIR)


@pytest.mark.parametrize("path", in_package("kube"), ids=lambda p: p.name)
def test_kube_imports_nothing_of_sextant_but_resources_and_itself(path: Path):
    assert not outside(imports_of(path), ("sextant.resources", "sextant.kube")), path.relative_to(PACKAGE_DIR)


@pytest.mark.parametrize("path", [p for p in MODULES if p.relative_to(PACKAGE_DIR).parts[0] != "controller"
                                  and module_name(p) != COMPOSITION_ROOT], ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_only_controller_imports_controller(path: Path):
    assert not {m for m in imports_of(path) if m == "sextant.controller" or m.startswith("sextant.controller.")}, \
        path.relative_to(PACKAGE_DIR)


@pytest.mark.parametrize("path", in_package("archive"), ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_archive_imports_nothing_of_sextant_but_resources_lifecycle_and_itself(path: Path):
    assert not outside(imports_of(path), ("sextant.resources", "sextant.lifecycle", "sextant.archive")), \
        path.relative_to(PACKAGE_DIR)


ARCHIVE_USERS = ("archive", "controller", "http", "cli", "dashboard", "history.py")


@pytest.mark.parametrize("path", [p for p in MODULES if p.relative_to(PACKAGE_DIR).parts[0] not in ARCHIVE_USERS
                                  and module_name(p) != COMPOSITION_ROOT], ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_only_the_operator_and_the_readers_import_the_archive(path: Path):
    assert not {m for m in imports_of(path) if m == "sextant.archive" or m.startswith("sextant.archive.")}, \
        path.relative_to(PACKAGE_DIR)


def test_only_controller_imports_kopf():
    for path in MODULES:
        if path.relative_to(PACKAGE_DIR).parts[0] == "controller":
            continue
        tree = ast.parse(path.read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                  and not n.level}
        assert "kopf" not in names, path.relative_to(PACKAGE_DIR)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_nothing_uses_kopfs_private_modules(path: Path):
    """kopf's public API only (kopf/__init__.py's names): its `kopf._…` modules change without notice."""
    tree = ast.parse(path.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    reached = {f"kopf.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "kopf"
               for a in n.names}  # from kopf import _cogs
    reached |= {f"kopf.{n.attr}" for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "kopf"}
    private = {m for m in imported | reached if m == "kopf._" or m.startswith("kopf._")}
    assert not private, (path.relative_to(PACKAGE_DIR), private)


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in MODULES:
        source = top_package(module_name(path))
        if module_name(path) == COMPOSITION_ROOT:
            continue  # it composes everything, and nothing imports it
        for module in imports_of(path):
            target = top_package(module)
            if target not in (source, "sextant"):
                graph[source].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of the graph, once each (as found by a depth-first walk from each node)."""
    found: list[list[str]] = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    found.append(path)
                elif nxt not in path and nxt > start:
                    stack.append((nxt, [*path, nxt]))
    return found


def test_no_package_imports_another_that_imports_it_back():
    assert cycles(package_graph()) == []


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_scan_sees_every_form_of_import():
    source = ("import sextant.kube.client\nfrom sextant import sdk\nfrom ..idempotency import keyed_name\n"
              "from .. import client\nfrom . import states\nfrom ..resources.job import State\n"
              "import os\nfrom datetime import datetime\n"
              "def f():\n    from ..controller import view\n")
    found = project_imports(source, "sextant.lifecycle")
    assert outside(found, ("sextant.resources", "sextant.lifecycle")) == {
        "sextant.kube.client", "sextant", "sextant.sdk", "sextant.idempotency", "sextant.idempotency.keyed_name",
        "sextant.client", "sextant.controller", "sextant.controller.view"}
    assert {"sextant.lifecycle.states", "sextant.resources.job.State"} <= found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_no_module_keeps_an_unused_import_or_an_undefined_name(path: Path):
    """A move leaves no import behind that nothing uses, nor a name that no longer resolves (pyflakes)."""
    out = io.StringIO()
    check(path.read_text(), str(path.relative_to(PACKAGE_DIR)), Reporter(out, out))
    assert out.getvalue() == ""


def module_graph() -> dict[str, set[str]]:
    """Which module imports which (a `from m import x` counts m.x only where x is a module)."""
    names = {module_name(p) for p in MODULES}
    graph: dict[str, set[str]] = defaultdict(set)
    for path in MODULES:
        source = module_name(path)
        for module in imports_of(path):
            while module not in names:  # an imported name: the module that defines it
                module = module.rpartition(".")[0]
            if module not in (source, "sextant"):
                graph[source].add(module)
    return graph


def test_no_module_imports_another_that_imports_it_back():
    """Not even for types or inside a function: each module can be read from the ones it builds on."""
    assert cycles(module_graph()) == []


VIEW_FEEDING = {"upsert_job", "delete_job", "upsert_pod", "delete_pod", "upsert_lease", "delete_lease"}


def test_only_the_informers_callbacks_write_the_views_jobs_pods_and_leases():
    """Our own writes' answers go to the controller's expectations (controller/expectations.py), never into the view:
    a call of a feeding method outside the informers' callbacks is a second writer."""
    callers: set[tuple[str, str]] = set()
    for path in MODULES:
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr in VIEW_FEEDING and "view" in ast.unparse(node.func.value):
                    callers.add((module_name(path), function.name))
    assert callers <= {("sextant.controller.jobs", name) for name in ("on_job", "on_pod", "on_lease")}, callers

