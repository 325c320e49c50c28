"""The Node SDK's own tests (sdk/node/test, node's test runner), one pytest test per test file, so that `make test`
runs them and a failing node test fails here with its output. `make node-sdk` (a dependency of `make test`) installs
the SDK's dependencies from its lock file and builds it."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.harness import repo_root

SDK = repo_root() / "sdk" / "node"
FILES = sorted(p.name for p in (SDK / "test").glob("*.test.js"))


@pytest.mark.parametrize("name", FILES)
def test_node_sdk(name: str) -> None:
    node = shutil.which("node")
    assert node, "node (>= 20) is not installed: the Node SDK's tests need it"
    assert (SDK / "dist" / "index.js").exists(), "the Node SDK is not built: run `make node-sdk`"
    done = subprocess.run([node, "--test", "--test-reporter=spec", f"test/{name}"], cwd=SDK, capture_output=True,
                          text=True, timeout=300)
    output = (done.stdout + done.stderr)[-20000:]
    assert done.returncode == 0, f"node --test test/{name} failed:\n{output}"
