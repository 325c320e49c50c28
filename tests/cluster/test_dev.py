"""The README's run command on a machine with no cluster configured: a local control plane with a node that
really runs pods, the CRDs, the operator; the README's first local example job runs and its output shows. A start
with the control plane already built reads as normal: no "first time: builds it", no ERROR while the API server's
storage initializes, the PATH line that finds `kubectl sextant` in another shell, what runs where, and one line when
Ctrl-C stops it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path

from sextant.dev.localcluster import LocalCluster, cache_root
from tests.harness import wait_for

from .support import free_port

ROOT = Path(__file__).resolve().parents[2]


def archived_state(path: Path, name: str) -> str | None:
    """The state of the job's record in the SQLite archive at path (None: not there yet)."""
    from sextant.archive.store import Archive

    async def read() -> str | None:
        archive = await Archive.open(f"sqlite:///{path}")
        try:
            record = await archive.get("default", name)
            return record.state if record else None
        finally:
            await archive.close()

    return asyncio.run(read()) if path.exists() else None


def test_run_command_without_a_cluster_runs_the_first_example(tmp_path):
    name = f"sextant-devtest-{secrets.token_hex(2)}"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "SEXTANT_TEST_KUBECONFIG")}
    env.update(HOME=str(tmp_path), SEXTANT_CACHE=str(cache_root()), SEXTANT_DEV_CLUSTER=name,
               PYTHONUNBUFFERED="1")
    port = free_port()  # the README's 8080 may be taken on a shared machine: the recipe runs against this one
    proc = subprocess.Popen([sys.executable, "-m", "sextant", "dev", "--http-port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True).start()
    try:
        found = wait_for(lambda: re.search(r"export KUBECONFIG=(\S+)", "".join(output)), 180,
                         message=lambda: "the run command to print KUBECONFIG:\n" + "".join(output))
        wait_for(lambda: "operator running" in "".join(output), 60, message=lambda: "".join(output))
        kubeconfig = found.group(1)
        text = "".join(output)
        assert "first time" not in text  # the binaries are cached: nothing to build
        assert "simulated (kwok) nodes" in text and "nothing runs there" in text and "local-node-0" in text
        path_line = re.search(r"^  (export PATH=\S+:\$PATH)", text, re.M)
        assert path_line, text
        # Another shell, with only the two printed lines: kubectl and its plugin are found.
        other_shell = subprocess.run(["bash", "-c", f"export KUBECONFIG={kubeconfig}; {path_line.group(1)}; "
                                      "kubectl sextant jobs list"], capture_output=True, text=True,
                                     env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert other_shell.returncode == 0 and "No jobs found" in other_shell.stderr, other_shell.stderr
        kubectl = [str(Path(sys.executable).parent / "kubectl"), f"--kubeconfig={kubeconfig}"]
        subprocess.run([*kubectl, "apply", "-f", str(ROOT / "examples" / "local")], check=True, capture_output=True)

        def state() -> str:
            return subprocess.run([*kubectl, "get", "sjob", "job-hello", "-o", "jsonpath={.status.state}"],
                                  capture_output=True, text=True).stdout

        wait_for(lambda: state() == "succeeded", 120, message=lambda: f"job-hello succeeded (is {state()!r})")
        logs = subprocess.run([*kubectl, "logs", "job-hello-1"], capture_output=True, text=True, check=True)
        assert "hello, world!" in logs.stdout
        # The embedded archive (docs/archive.md, "The operator"): its record is written as it finishes.
        archive_file = tmp_path / ".cache" / "sextant" / "archive.sqlite"
        wait_for(lambda: archived_state(archive_file, "job-hello") == "succeeded", 30,
                 message=lambda: f"job-hello's record in {archive_file}")
        assert " ERROR " not in "".join(output), "".join(output)  # no 429 "storage is (re)initializing" as a failure
        the_readme_api_recipe_works(kubeconfig, path_line.group(1), tmp_path, port)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        LocalCluster(name=name, teardown_on_exit=False).down()  # whatever the run command left behind
    assert not (cache_root() / "clusters" / name / "clusters" / name).exists(), "Ctrl-C tears the cluster down"
    assert "".join(output).rstrip().endswith("sextant: operator stopped; local control plane torn down"), \
        "".join(output)[-2000:]


def the_readme_api_recipe_works(kubeconfig: str, path_line: str, home: Path, port: int) -> None:
    """README, The HTTP API, "Locally": its block, run as written (but for the port) in a shell with the lines
    `make run` printed."""
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", readme, re.S) if "examples/local/api/" in b)
    assert block.count("127.0.0.1:8080") == 2
    block = block.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    proc = subprocess.run(["bash", "-ec", f"export KUBECONFIG={kubeconfig}; {path_line}; {block}"], cwd=ROOT,
                          capture_output=True, text=True, env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    created, listed = (json.loads(doc) for doc in proc.stdout.replace("}{", "}\n{").splitlines()[-2:])
    assert created["queue"] == "local" and created["handler"] == "greet" and created["id"].startswith("job_")
    assert created["id"] in [j["id"] for j in listed["items"]], listed
