"""The layering (README, Layout), read from the source: lifecycle/ (the pure rules) imports nothing of the project but
resources/ (the public API's models) and itself, so that its rules stay testable without I/O, a clock or a cluster."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "operator" / "sextant"
ALLOWED = ("sextant.resources", "sextant.lifecycle")


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


def outside(modules: set[str]) -> set[str]:
    return {m for m in modules if not any(m == a or m.startswith(a + ".") for a in ALLOWED)}


@pytest.mark.parametrize("path", sorted(PACKAGE_DIR.joinpath("lifecycle").rglob("*.py")), ids=lambda p: p.name)
def test_lifecycle_imports_nothing_of_sextant_but_resources_and_itself(path: Path):
    package = ".".join(["sextant", *path.relative_to(PACKAGE_DIR).parent.parts])
    assert not outside(project_imports(path.read_text(), package)), path.relative_to(PACKAGE_DIR)


def test_the_scan_sees_every_form_of_import():
    source = ("import sextant.kube\nfrom sextant import metrics\nfrom ..idempotency import keyed_name\n"
              "from .. import retention\nfrom . import states\nfrom ..resources.job import State\n"
              "import os\nfrom datetime import datetime\n"
              "def f():\n    from ..controller import view\n")
    found = project_imports(source, "sextant.lifecycle")
    assert outside(found) == {"sextant.kube", "sextant", "sextant.metrics", "sextant.idempotency",
                              "sextant.idempotency.keyed_name", "sextant.retention", "sextant.controller",
                              "sextant.controller.view"}
    assert {"sextant.lifecycle.states", "sextant.resources.job.State"} <= found - outside(found)
