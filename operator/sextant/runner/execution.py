"""Running one attempt on a worker (docs/workers.md §5): an SDK function on the worker's event loop (`async def`)
or in its thread pool (`def`), or a command as a subprocess with the payload on stdin and the SEXTANT_*
environment of an attempt pod. The same `sextant.sdk` handler code runs unchanged here and under `sextant run`.

The exit codes are those of pod mode: 0 on return, 1 on an exception (its message recorded), 86 for
NonRetryableError, 128+N after signal N. A stop (cancel, timeout, drain, a lost lease) is SIGTERM /
ctx.cancelled and task cancellation, then after the queue's cancelGrace SIGKILL to the command's process group.
A `def` function that ignores ctx.cancelled cannot be killed inside a process: it is given up on (137) and keeps
its thread, counted in `lingering`, until it returns.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from .. import sdk

log = logging.getLogger("sextant.worker")

KILLED = 128 + signal.SIGKILL
TERMINATED = 128 + signal.SIGTERM
COMMAND_NOT_FOUND = 127
GIVE_UP_AFTER_KILL = 1.0  # seconds a killed handler gets to be gone before the worker stops waiting for it
# As a container's FallbackToLogsOnError: the last 80 lines or 2 KiB of a failed command's output, whichever is
# shorter, become the timeline's message.
TAIL_LINES, TAIL_BYTES = 80, 2048


@dataclass(frozen=True)
class Ended:
    exit_code: int | None  # None: the handler never started (stopped before it could)
    message: str | None = None


class Work(Protocol):
    async def run(self) -> Ended: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


def _exit_code(returncode: int) -> int:
    """asyncio reports death by signal N as -N; shells and the kubelet say 128+N."""
    return 128 - returncode if returncode < 0 else returncode


class FunctionWork:
    """An SDK function: `async def` as a task on the worker's loop, `def` in its thread pool."""

    def __init__(self, fn: Callable[..., Any], job: sdk.Job, ctx: sdk.Context, executor: Executor,
                 label: str) -> None:
        self.fn, self.job, self.ctx, self.executor, self.label = fn, job, ctx, executor, label
        self.task: asyncio.Future[Any] | None = None

    async def run(self) -> Ended:
        try:
            if inspect.iscoroutinefunction(self.fn):
                self.task = asyncio.ensure_future(self.fn(self.job, self.ctx))
                if self.ctx.cancelled.is_set():  # stopped while it was being started
                    self.task.cancel()
                await self.task
            else:
                # The thread cannot be cancelled: shield it, so that a stop never pretends it ended.
                await asyncio.shield(asyncio.get_running_loop().run_in_executor(self.executor, self.fn, self.job,
                                                                                self.ctx))
        except sdk.NonRetryableError as exc:
            print(f"{self.label} non-retryable: {exc}", file=sys.stderr, flush=True)
            return Ended(sdk.NON_RETRYABLE_EXIT_CODE, f"NonRetryableError: {exc}")
        except asyncio.CancelledError:
            if self.task is None or not self.task.cancelled():
                raise  # this coroutine itself was cancelled, not the handler's task
            return Ended(TERMINATED, "cancelled")
        except SystemExit as exc:  # sys.exit() in a handler: its code, as the runner's process would exit with
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            return Ended(code, None if code == 0 else f"SystemExit: {exc.code}")
        except Exception as exc:  # noqa: BLE001 - the handler's failure is the attempt's failure, with its message
            lines = traceback.format_exception(exc)
            print("".join(f"{self.label} {line}" for line in "".join(lines).splitlines(True)), end="",
                  file=sys.stderr, flush=True)
            return Ended(1, f"{type(exc).__name__}: {exc}")
        return Ended(0)

    def terminate(self) -> None:
        self.ctx.cancelled.set()
        if self.task is not None:
            self.task.cancel()

    def kill(self) -> None:
        self.terminate()


class CommandWork:
    """A command handler: one subprocess per job (its own process group), the payload (JSON) on stdin, its
    output forwarded line by line to the worker's, prefixed with the job."""

    def __init__(self, command: list[str], env: dict[str, str], payload: dict[str, Any], label: str) -> None:
        self.command, self.env, self.payload, self.label = command, env, payload, label
        self.proc: asyncio.subprocess.Process | None = None
        self.terminated = False
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    async def run(self) -> Ended:
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=self.env, start_new_session=True)
        except OSError as exc:  # not found, not executable
            print(f"{self.label} cannot start {self.command[0]!r}: {exc}", file=sys.stderr, flush=True)
            return Ended(COMMAND_NOT_FOUND, f"cannot start {self.command[0]!r}: {exc.strerror or exc}")
        output = asyncio.ensure_future(self._forward())
        if self.terminated:  # stopped while it was being started
            self.terminate()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(self.payload).encode())
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # a handler that does not read its payload
        finally:
            self.proc.stdin.close()
        try:
            code = _exit_code(await self.proc.wait())
        finally:
            self._signal_group(signal.SIGKILL)  # what it left behind goes with it, as with a pod's container
            try:
                await asyncio.wait_for(output, 5)
            except asyncio.TimeoutError:
                output.cancel()
        if code == 0:
            return Ended(0)
        text = "".join(self.tail).strip()[-TAIL_BYTES:]
        return Ended(code, text or f"exit code {code}")

    async def _forward(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        prefix = f"{self.label} ".encode()
        out = sys.stdout.buffer
        while line := await self.proc.stdout.readline():
            self.tail.append(line.decode(errors="replace"))
            out.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
            out.flush()

    def terminate(self) -> None:
        self.terminated = True
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)  # to the handler only, as the runner forwards it in a pod

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class Execution:
    """One attempt's handler: run it, stop it (terminate, cancelGrace, kill), and tell how it ended."""

    def __init__(self, work: Work, cancel_grace: float) -> None:
        self.work = work
        self.cancel_grace = cancel_grace
        self.stop_reason: str | None = None  # why the worker stopped it: Cancelled, Timeout, Drained, Lost
        self.stopped_at: datetime | None = None
        self.started = asyncio.Event()
        self.lingering = False  # given up on while its thread or task runs on
        self.task: asyncio.Future[Ended] | None = None
        self._given_up: asyncio.Future[None] | None = None
        self._timers: list[asyncio.TimerHandle] = []

    async def run(self) -> Ended:
        if self.stop_reason is not None:
            return Ended(None, "stopped before the handler started")
        loop = asyncio.get_running_loop()
        self._given_up = loop.create_future()
        self.task = asyncio.ensure_future(self.work.run())
        self.started.set()
        try:
            await asyncio.wait({self.task, self._given_up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for timer in self._timers:
                timer.cancel()
        if self.task.done():
            return self.task.result()
        self.lingering = True
        return Ended(KILLED, f"the handler did not stop within cancelGrace ({self.cancel_grace:g}s) and was "
                             "given up on")

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()

    def stop(self, reason: str, now: datetime, grace: float | None = None) -> None:
        """SIGTERM / ctx.cancelled now, SIGKILL after the grace (the queue's cancelGrace unless given)."""
        if self.stop_reason is not None or self.done:
            return
        self.stop_reason, self.stopped_at = reason, now
        if self.task is None:
            return  # not started: run() will not start it
        self.work.terminate()
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(self.cancel_grace if grace is None else grace, self._kill))

    def _kill(self) -> None:
        if self.done:
            return
        self.work.kill()
        self._timers.append(asyncio.get_running_loop().call_later(GIVE_UP_AFTER_KILL, self._give_up))

    def _give_up(self) -> None:
        if not self.done and self._given_up is not None and not self._given_up.done():
            self._given_up.set_result(None)
