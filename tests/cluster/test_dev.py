"""The README's run command on a machine with no cluster configured: a local control plane with a node that
really runs pods, the CRDs, the operator; the README's first local example job runs and its output shows."""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parents[2]


def test_run_command_without_a_cluster_runs_the_first_example(tmp_path):
    name = f"sextant-devtest-{secrets.token_hex(2)}"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "SEXTANT_TEST_KUBECONFIG")}
    env.update(HOME=str(tmp_path), SEXTANT_CACHE=str(cache_root()), SEXTANT_DEV_CLUSTER=name,
               PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "sextant", "dev", "--http-port", "-1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True).start()
    try:
        found = wait_for(lambda: re.search(r"export KUBECONFIG=(\S+)", "".join(output)), 180,
                         message=lambda: "the run command to print KUBECONFIG:\n" + "".join(output))
        wait_for(lambda: "operator running" in "".join(output), 60, message=lambda: "".join(output))
        kubeconfig = found.group(1)
        kubectl = [str(Path(sys.executable).parent / "kubectl"), f"--kubeconfig={kubeconfig}"]
        subprocess.run([*kubectl, "apply", "-f", str(ROOT / "examples" / "local")], check=True, capture_output=True)

        def state() -> str:
            return subprocess.run([*kubectl, "get", "sjob", "job-hello", "-o", "jsonpath={.status.state}"],
                                  capture_output=True, text=True).stdout

        wait_for(lambda: state() == "succeeded", 120, message=lambda: f"job-hello succeeded (is {state()!r})")
        logs = subprocess.run([*kubectl, "logs", "job-hello-1"], capture_output=True, text=True, check=True)
        assert "hello, world!" in logs.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        LocalCluster(name=name, teardown_on_exit=False).down()  # whatever the run command left behind
    assert not (cache_root() / "clusters" / name / "clusters" / name).exists(), "Ctrl-C tears the cluster down"
