"""What every test may use: polling with a deadline (wait_for; until on an event loop), and the handle of the
session's cluster.

Tests never sleep for a fixed time: they poll a predicate until it holds (wait_for) or check that it keeps
holding for a while (holds_for), so they finish as soon as the system does and fail with a message that
says what was awaited.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sextant.dev.localcluster import LocalCluster

T = TypeVar("T")
Message = str | Callable[[], str] | None


def _describe(message: Message, fallback: str) -> str:
    if callable(message):
        try:
            return message()
        except Exception as exc:  # noqa: BLE001 - the message must not hide the timeout
            return f"{fallback} (describing it failed: {exc!r})"
    return message or fallback


def wait_for(predicate: Callable[[], T], timeout: float, interval: float = 0.1, message: Message = None) -> T:
    """Call predicate until it returns a truthy value, and return that value.

    Raises AssertionError after `timeout` seconds, naming `message` (a string, or a callable that describes
    the current state) and the predicate's last result or exception. An exception from the predicate counts
    as "not yet" (e.g. kubectl saying NotFound), until the deadline.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    last_error: BaseException | None = None
    while True:
        try:
            last = predicate()
            last_error = None
            if last:
                return last
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last_error = exc
        if time.monotonic() >= deadline:
            what = _describe(message, getattr(predicate, "__name__", "condition"))
            detail = f"last error: {last_error!r}" if last_error is not None else f"last value: {last!r}"
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; {detail}")
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


async def until(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.005,
                message: Message = None) -> None:
    """wait_for on the event loop: poll predicate until it holds, yielding to the loop between polls;
    AssertionError after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() >= deadline:
            what = _describe(message, getattr(predicate, "__name__", "condition"))
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)


def holds_for(predicate: Callable[[], Any], duration: float, interval: float = 0.1, message: Message = None) -> None:
    """Check that predicate stays truthy for `duration` seconds (polled every `interval`); AssertionError if not."""
    deadline = time.monotonic() + duration
    while True:
        value = predicate()
        if not value:
            what = _describe(message, getattr(predicate, "__name__", "condition"))
            raise AssertionError(f"{what} stopped holding (got {value!r})")
        if time.monotonic() >= deadline:
            return
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def namespace_name(test_name: str, max_length: int = 63) -> str:
    """A fresh DNS-1123 namespace name from a test's name: `test-foo-bar-3f9a1c`."""
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-") or "test"
    suffix = secrets.token_hex(3)
    base = base[: max_length - len(suffix) - 1].rstrip("-")
    return f"{base}-{suffix}"


@dataclass
class Cluster:
    """The handle tests get from the `cluster` fixture."""

    local: LocalCluster

    @property
    def kubeconfig(self) -> Path:
        return self.local.kubeconfig

    @property
    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG (and the matching kubectl first on PATH), for subprocesses."""
        return self.local.env()

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """kubectl (this environment's, matching the server) with --kubeconfig; check=True raises on failure."""
        return self.local.kubectl(*args, input=input, check=check, timeout=timeout)

    def component_logs(self, lines: int = 40) -> dict[str, str]:
        return self.local.component_logs(lines)

    def pids(self) -> dict[str, int]:
        return self.local.pids()

    def create_namespace(self, name: str, *, wait_service_account: bool = True) -> str:
        self.kubectl("create", "namespace", name)
        if wait_service_account:  # pods are refused until the namespace's default service account exists
            self.kubectl("wait", "--for=create", "serviceaccount/default", "-n", name, "--timeout=30s", timeout=40)
        return name

    def delete_namespace(self, name: str) -> None:
        self.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def external_cluster() -> bool:
    return bool(os.environ.get("SEXTANT_TEST_KUBECONFIG"))


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie's reaping is its parent's business, or whatever init the test runs under)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@asynccontextmanager
async def serve_app(app: Any) -> AsyncIterator[str]:
    """An aiohttp.web application served on 127.0.0.1 in the running event loop, for as long as the block lasts: its
    URL. A handler still waiting at the end is given 0.1 s."""
    from aiohttp import web

    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
