"""The agent as a child process, for tests and `sextant dev`: start it, wait until it is Ready, stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class AgentProcess:
    """`python -m sextant.dev.localnode` in its own process (so a test may also kill -9 it)."""

    def __init__(self, kubeconfig: str | Path, name: str = "local-node-0", workdir: str | Path | None = None,
                 *extra: str, log_file: str | Path | None = None) -> None:
        from .agent import default_workdir

        self.kubeconfig = Path(kubeconfig)
        self.name = name
        self.workdir = Path(workdir) if workdir else default_workdir(name)
        self.extra = extra
        self.log_file = Path(log_file) if log_file else self.workdir / "agent.log"
        self.ready_file = self.workdir / "ready"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AgentProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sextant.dev.localnode", "--kubeconfig", str(self.kubeconfig), "--name", self.name,
                 "--workdir", str(self.workdir), "--ready-file", str(self.ready_file), *self.extra],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 60) -> None:
        """Until the agent says the Node is registered and its pods are listed; RuntimeError if it exits."""
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            if not self.alive:
                raise RuntimeError(f"the local node agent exited ({self.proc and self.proc.returncode}):\n"
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the local node agent is not ready after {timeout} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM (it kills its pods' processes and reports them), SIGKILL if it does not exit in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: no cleanup; its pods' processes keep running until the next agent of this workdir starts."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
