"""`sextant run` (the pod's adapter, run.supervise) and a worker (execution.Execution) run the same handler to the
same exit code and message: real SDK functions and real subprocesses, no cluster (the attempt's payload is in its
environment and it has no heartbeat, so the runner needs no API server)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from _builders import T0
from tests.harness import until
from sextant import sdk
from sextant.runner import run
from sextant.runner.env import AttemptEnv
from sextant.runner.execution import CommandWork, Execution, FunctionWork

MODULE = "parity_handlers"
HANDLERS = '''
import asyncio
import pathlib
import sys
import threading

from sextant import sdk

RELEASE = threading.Event()
THREADS = []


@sdk.handler("parity-return")
def returns(job, ctx):
    assert job.payload["orderId"] == 7


@sdk.handler("parity-raise")
def raises(job, ctx):
    raise ValueError("no such order")


@sdk.handler("parity-non-retryable")
def declines(job, ctx):
    raise sdk.NonRetryableError("card declined")


@sdk.handler("parity-exit")
def exits(job, ctx):
    sys.exit(3)


@sdk.handler("parity-async-slow")
async def slow(job, ctx):
    pathlib.Path(job.payload["ready"]).touch()
    await asyncio.sleep(60)


@sdk.handler("parity-stubborn")
def stubborn(job, ctx):
    THREADS.append(threading.current_thread())
    pathlib.Path(job.payload["ready"]).touch()
    RELEASE.wait(60)  # ignores ctx.cancelled
'''
LABEL = "[job-a#1]"


@dataclass(frozen=True)
class Case:
    name: str
    handler: str | None = None  # an SDK handler of MODULE
    script: str | None = None  # else a command: sh -c script
    stop: bool = False  # stopped (SIGTERM to the runner; Execution.stop on a worker) once it is under way


CASES = [
    (Case("return", handler="parity-return"), 0, None),
    (Case("raise ValueError", handler="parity-raise"), 1, "ValueError: no such order"),
    (Case("raise NonRetryableError", handler="parity-non-retryable"), 86, "NonRetryableError: card declined"),
    (Case("sys.exit(3)", handler="parity-exit"), 3, "SystemExit: 3"),
    (Case("async handler cancelled by a stop", handler="parity-async-slow", stop=True), 143, "cancelled"),
    (Case("command exit 0", script="cat >/dev/null; exit 0"), 0, None),
    (Case("command exit 5", script="cat >/dev/null; echo 'no such order' >&2; exit 5"), 5, "no such order"),
    (Case("command killed by SIGTERM", script='touch "$READY"; exec sleep 60', stop=True), 143, "exit code 143"),
]


@pytest.fixture(scope="module")
def handlers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("handlers")
    (folder / f"{MODULE}.py").write_text(HANDLERS)
    sys.path.insert(0, str(folder))
    try:
        __import__(MODULE)
        yield sys.modules[MODULE]
    finally:
        sys.path.remove(str(folder))


@pytest.fixture
def termination_log(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "termination-log"
    monkeypatch.setattr(run, "TERMINATION_LOG", path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # ModuleWork puts "." in front
    return path


def attempt_env(handler: str, payload: dict, grace: float = 5.0) -> AttemptEnv:
    return AttemptEnv(job_id="job_a", job_name="job-a", job_uid="u", namespace="shop", queue="emails", handler=handler,
                      attempt=1, sequence=1, scheduled_at="2026-03-01T12:00:00Z", payload=payload, lease_name=None,
                      lease_duration=timedelta(seconds=30), cancel_grace=timedelta(seconds=grace), pod_name="job-a-1",
                      heartbeat=False)


async def runner_path(case: Case, payload: dict, ready: Path, termination_log: Path) -> tuple[int, str | None]:
    """As in a pod: supervise, stopped by a SIGTERM to this process; the message from the termination log."""
    work = run.module_work(MODULE) if case.handler else run.command_work(["sh", "-c", case.script])
    task = asyncio.ensure_future(run.supervise(attempt_env(case.handler or "cmd", payload), work))
    if case.stop:
        await until(ready.exists, 10, message="the handler under way")
        os.kill(os.getpid(), signal.SIGTERM)  # supervise's handler takes it, as the kubelet's in a pod
    code = await asyncio.wait_for(task, 30)
    return code, termination_log.read_text() if termination_log.exists() else None


async def worker_path(case: Case, payload: dict, ready: Path, pool) -> tuple[int, str | None]:
    if case.handler:
        job = sdk.Job(id="job_a", name="job-a", namespace="shop", queue="emails", handler=case.handler, attempt=1,
                      payload=payload, scheduled_at="2026-03-01T12:00:00Z")
        work = FunctionWork(sdk.registered()[case.handler], job, sdk.Context(jobs=None), pool, LABEL)
    else:
        work = CommandWork(["sh", "-c", case.script], {"PATH": os.environ["PATH"], "READY": str(ready)}, payload,
                           LABEL)
    execution = Execution(work, 5.0)
    task = asyncio.ensure_future(execution.run())
    if case.stop:
        await until(ready.exists, 10, message="the handler under way")
        execution.stop("Cancelled", T0)
    ended = await asyncio.wait_for(task, 30)
    return ended.exit_code, ended.message


@pytest.mark.parametrize("case,code,message", CASES, ids=[case.name for case, _, _ in CASES])
async def test_the_runner_and_a_worker_end_a_handler_alike(case, code, message, handlers, termination_log, tmp_path,
                                                          monkeypatch) -> None:
    ready = tmp_path / "ready"
    payload = {"orderId": 7, "ready": str(ready)}
    monkeypatch.setenv("READY", str(ready))  # a command in a pod inherits the runner's environment
    assert await runner_path(case, payload, ready, termination_log) == (code, message), "sextant run"
    ready.unlink(missing_ok=True)
    with ThreadPoolExecutor(1) as pool:
        assert await worker_path(case, payload, ready, pool) == (code, message), "worker"


async def test_in_a_pod_a_commands_output_is_as_it_wrote_it_and_on_a_worker_prefixed(termination_log, capfd) -> None:
    script = "cat >/dev/null; echo out; echo err >&2; printf partial"
    assert await run.supervise(attempt_env("cmd", {}), run.command_work(["sh", "-c", script])) == 0
    out, err = capfd.readouterr()
    assert (out, err) == ("out\npartial", "err\n")
    ended = await Execution(CommandWork(["sh", "-c", script], {"PATH": os.environ["PATH"]}, {}, LABEL), 5.0).run()
    out, err = capfd.readouterr()
    assert ended.exit_code == 0 and err == ""
    assert sorted(out.splitlines()) == sorted([f"{LABEL} out", f"{LABEL} err", f"{LABEL} partial"])


async def test_a_long_line_passes_whole(termination_log, capfd) -> None:
    script = "cat >/dev/null; head -c 200000 /dev/zero | tr '\\0' x; echo; exit 2"
    assert await run.supervise(attempt_env("cmd", {}), run.command_work(["sh", "-c", script])) == 2
    out, _ = capfd.readouterr()
    assert out == "x" * 200000 + "\n"
    assert termination_log.read_text() == "x" * 2048  # the tail, as the worker records it


async def test_the_runner_gives_up_on_a_def_handler_that_ignores_a_stop(handlers, termination_log, tmp_path) -> None:
    ready = tmp_path / "ready"
    env = attempt_env("parity-stubborn", {"ready": str(ready)}, grace=0.3)
    task = asyncio.ensure_future(run.supervise(env, run.module_work(MODULE)))
    await until(ready.exists, 10, message="the handler under way")
    stopped = time.monotonic()
    os.kill(os.getpid(), signal.SIGTERM)
    try:
        assert await asyncio.wait_for(task, 10) == 137
        assert 0.3 + 1.0 <= time.monotonic() - stopped < 10  # SIGKILL after the grace, given up on a second later
        assert "given up on" in termination_log.read_text()
    finally:
        handlers.RELEASE.set()
    await until(lambda: not handlers.THREADS[0].is_alive(), 5, message="the handler's thread to return once released")


async def test_a_missing_handler_exits_1_naming_those_registered(handlers, termination_log) -> None:
    assert await run.supervise(attempt_env("nope", {}), run.module_work(MODULE)) == 1
    assert termination_log.read_text().startswith(f"no handler 'nope' in module {MODULE} (registered: ")


OPERATOR_DIR = Path(__file__).resolve().parents[2] / "operator"
# `sextant run` as a pod runs it, but with its termination log in a temporary folder rather than /dev.
RUNNER = ("import sys; from pathlib import Path; from sextant.runner import run; "
          "run.TERMINATION_LOG = Path(sys.argv[1]); from sextant.__main__ import main; sys.exit(main(sys.argv[2:]))")
BROKEN = {"broken_handlers": "raise RuntimeError('no database URL set')\n",
          "needs_a_library": "import sextant_no_such_library\n"}


@pytest.mark.parametrize("argv,code,stderr,message", [
    (["--", "sextant-no-such-command", "--flag"], 127,
     "sextant: cannot start 'sextant-no-such-command': [Errno 2] No such file or directory",
     "cannot start 'sextant-no-such-command': No such file or directory"),
    (["--", "./handler.sh"], 127, "sextant: cannot start './handler.sh': [Errno 13] Permission denied",
     "cannot start './handler.sh': Permission denied"),
    (["--module", "sextant_no_such.handlers"], 127, "sextant: --module sextant_no_such.handlers: no such module (",
     "--module sextant_no_such.handlers: no such module ("),
], ids=["no such command", "not executable", "no such module"])
def test_a_handler_that_is_not_there_exits_127_in_one_line(argv, code, stderr, message, tmp_path) -> None:
    """A pod whose command or module is missing from its image: one line naming it, no traceback, exit 127 (as a
    worker's command that cannot start), the same line in the timeline."""
    (tmp_path / "handler.sh").write_text("#!/bin/sh\nexit 0\n")  # not executable
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(tmp_path / "termination-log"), "run", *argv],
                          env=_pod_environment(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.startswith(stderr) and proc.stderr.count("\n") == 1, proc.stderr
    assert (tmp_path / "termination-log").read_text().startswith(message)


@pytest.mark.parametrize("module,message", [
    ("broken_handlers", "--module broken_handlers does not import: RuntimeError: no database URL set"),
    ("needs_a_library", "--module needs_a_library does not import: ModuleNotFoundError: No module named "
                        "'sextant_no_such_library'"),
])
def test_a_module_that_fails_to_import_exits_1_with_its_traceback(module, message, tmp_path) -> None:
    """The module is there but its own code fails (a missing library included): the handler's failure, exit 1, its
    traceback in the log (where its error is) and one line in the timeline."""
    (tmp_path / f"{module}.py").write_text(BROKEN[module])
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(tmp_path / "termination-log"), "run", "--module", module],
                          env=_pod_environment(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" in proc.stderr and proc.stderr.rstrip().endswith(f"sextant: {message}")
    assert (tmp_path / "termination-log").read_text() == message


def _pod_environment(tmp_path: Path) -> dict[str, str]:
    """A `heartbeat: false` pod's: the payload in the environment, no lease, so no API server is needed."""
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(OPERATOR_DIR),
            "SEXTANT_JOB_NAME": "job-a", "SEXTANT_NAMESPACE": "shop", "SEXTANT_HANDLER": "send",
            "SEXTANT_PAYLOAD": "{}", "SEXTANT_HEARTBEAT": "false"}
