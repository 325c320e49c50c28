"""Running one attempt's handler, for both the runner in an attempt pod (`sextant run`, run.py) and a worker
(docs/workers.md §5): an SDK function on the event loop (`async def`) or in a thread pool (`def`), or a command as
a subprocess with the payload on stdin and the SEXTANT_* environment of an attempt pod. The same `sextant.sdk`
handler code runs unchanged in either.

The exit codes: 0 on return, 1 on an exception (its message recorded), 86 for NonRetryableError, 128+N after
signal N (143 for a cancelled `async def`), 127 for a command that cannot start or a `--module` that does not
exist (the handler's code is not there); in a pod also 75 when the attempt was lost. A stop (cancel, timeout,
drain, a lost lease) is SIGTERM / ctx.cancelled and task cancellation, then after the queue's cancelGrace SIGKILL
to the command's process group. A `def` function that ignores ctx.cancelled cannot be killed inside a process: it
is given up on (137) and keeps its thread, counted in `lingering`, until it returns.

A handler's output goes to this process's: prefixed with the job's label on a worker, as it is (label None) in a
pod, where `kubectl logs` shows it as the handler wrote it.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import signal
import stat
import sys
import tempfile
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from .. import sdk
from ..resources.report import (OUTPUT_FILE_ENV, OUTPUT_MAX_BYTES, PROGRESS_FILE_ENV, SNOOZE_EXIT_CODE,
                                SNOOZE_FILE_ENV, output_json, parse_progress_line, snooze_seconds)
from .process import GroupReaper, die_with_parent, shell_exit_code

KILLED = 128 + signal.SIGKILL
TERMINATED = 128 + signal.SIGTERM
COMMAND_NOT_FOUND = 127
LEASE_LOST = 75  # EX_TEMPFAIL: the attempt was lost (or could not start), not the handler's fault
GIVE_UP_AFTER_KILL = 1.0  # seconds a killed handler gets to be gone before we stop waiting for it
# As a container's FallbackToLogsOnError: the last 80 lines or 2 KiB of a failed command's output, whichever is
# shorter, become the timeline's message.
TAIL_LINES, TAIL_BYTES = 80, 2048
TAIL_KEPT = 16 * 1024  # bytes of output kept to find those lines in
CHUNK = 64 * 1024
PROGRESS_POLL = 1.0  # seconds between looks at a command's SEXTANT_PROGRESS_FILE
PROGRESS_TAIL = 4096  # bytes of SEXTANT_PROGRESS_FILE read, from its end: its latest line
SNOOZE_HEAD = 100  # bytes of SEXTANT_SNOOZE_FILE read: a delay such as 30s


def read_bounded(path: Path, limit: int, *, tail: bool = False) -> bytes:
    """At most `limit` bytes of a file a command wrote (its last ones with tail), whatever the command made of it: a
    file that grows without end, a link to /dev/zero, a FIFO (opened without waiting for a writer: not a regular
    file, refused). The worker's event loop reads it, so the read must stay small and never block."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path.name} is not a regular file")
        if tail and info.st_size > limit:
            f.seek(info.st_size - limit)
        return f.read(limit)


@dataclass(frozen=True)
class ImportProblem:
    """Why a `--module` did not import, in one line."""

    message: str
    missing: bool  # the module itself is not there (not a module it imports, nor its own failure)


def import_handlers(module: str) -> ImportProblem | None:
    """Import an SDK handlers module (`--module`), from the application's own directory too: None, or why not. A
    module that fails in its own code has its traceback printed (that is where its error is); a missing one gets
    one line, as a missing command does."""
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, ".")
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            return ImportProblem(f"--module {module}: no such module (sys.path: {', '.join(sys.path[:4])}, …)", True)
        traceback.print_exc()
        return ImportProblem(f"--module {module} does not import: {type(exc).__name__}: {exc}", False)
    except Exception as exc:  # noqa: BLE001 - the module's own failure, a handler registered twice included
        traceback.print_exc()
        return ImportProblem(f"--module {module} does not import: {type(exc).__name__}: {exc}", False)
    return None


@dataclass(frozen=True)
class Ended:
    exit_code: int | None  # None: the handler never started (stopped before it could)
    message: str | None = None
    # What the handler said besides its exit code (resources/report.py): a snooze's delay (with SNOOZE_EXIT_CODE),
    # its output as compact JSON within the cap, or why the output is not kept.
    snooze_seconds: float | None = None
    output: str | None = None
    output_note: str | None = None


def returned(value: Any, note: str) -> Ended:
    """A handler that returned `value`: succeeded, its output kept when it is JSON within the cap (else why not, also
    said in its output after `note`, the prefix of what we say about it)."""
    output, why = output_json(value)
    return said(Ended(0, None, output=output, output_note=why), note)


def said(ended: Ended, note: str) -> Ended:
    """Why an output is not kept goes to the handler's output too, where its author looks."""
    if ended.output_note:
        print(f"{note}{ended.output_note}", file=sys.stderr, flush=True)
    return ended


def snoozed(seconds: float) -> Ended:
    return Ended(SNOOZE_EXIT_CODE, f"snoozed for {seconds:g}s", snooze_seconds=seconds)


class Work(Protocol):
    async def run(self) -> Ended: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


def _notes(label: str | None) -> tuple[str, str]:
    """The prefix of the handler's own output lines (none in a pod), and of what we say about it."""
    return (f"{label} " if label else ""), (f"{label} " if label else "sextant: ")


class FunctionWork:
    """An SDK function: `async def` as a task on the loop, `def` in the executor (None: the loop's default)."""

    def __init__(self, fn: Callable[..., Any], job: sdk.Job, ctx: sdk.Context, executor: Executor | None,
                 label: str | None) -> None:
        self.fn, self.job, self.ctx, self.executor = fn, job, ctx, executor
        self.prefix, self.note = _notes(label)
        self.task: asyncio.Future[Any] | None = None

    async def run(self) -> Ended:
        try:
            if inspect.iscoroutinefunction(self.fn):
                self.task = asyncio.ensure_future(self.fn(self.job, self.ctx))
                if self.ctx.cancelled.is_set():  # stopped while it was being started
                    self.task.cancel()
                value = await self.task
            else:
                # The thread cannot be cancelled: shield it, so that a stop never pretends it ended.
                value = await asyncio.shield(asyncio.get_running_loop().run_in_executor(self.executor, self.fn,
                                                                                        self.job, self.ctx))
        except sdk.Snooze as exc:
            return snoozed(exc.seconds)
        except sdk.NonRetryableError as exc:
            print(f"{self.note}non-retryable: {exc}", file=sys.stderr, flush=True)
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
            print("".join(f"{self.prefix}{line}" for line in "".join(lines).splitlines(True)), end="",
                  file=sys.stderr, flush=True)
            return Ended(1, f"{type(exc).__name__}: {exc}")
        return returned(value, self.note)

    def terminate(self) -> None:
        self.ctx.cancelled.set()
        if self.task is not None:
            self.task.cancel()

    def kill(self) -> None:
        self.terminate()


class CommandWork:
    """A command handler: one subprocess per attempt in its own process group, the payload (JSON) on stdin. With a
    label (a worker), its stdout and stderr go to our stdout line by line, prefixed with it; without (a pod), to
    our stdout and stderr as they are. Whatever the command leaves behind in its group is killed when it ends,
    as with a pod's container. On Linux it gets SIGKILL when this process dies, even by SIGKILL (docs/workers.md,
    "Processes")."""

    def __init__(self, command: list[str], env: dict[str, str], payload: dict[str, Any], label: str | None,
                 reaper: GroupReaper | None = None) -> None:
        self.command, self.env, self.payload = command, env, payload
        self.reaper = reaper  # told the command's process group, so that it dies with a SIGKILLed worker
        self.prefix, self.note = _notes(label)
        self.proc: asyncio.subprocess.Process | None = None
        self.terminated = False
        self.tail = bytearray()  # the last TAIL_KEPT bytes of its output
        self.files = Path()
        self.on_progress: Callable[[float, str | None], None] | None = None  # told what SEXTANT_PROGRESS_FILE says

    async def run(self) -> Ended:
        # The attempt's own directory for the files it may write (its output, a snooze's delay, its progress).
        with tempfile.TemporaryDirectory(prefix="sextant-attempt-") as files:
            self.files = Path(files)
            return await self._run({**self.env, OUTPUT_FILE_ENV: str(self.files / "output.json"),
                                    SNOOZE_FILE_ENV: str(self.files / "snooze"),
                                    PROGRESS_FILE_ENV: str(self.files / "progress")})

    async def _run(self, env: dict[str, str]) -> Ended:
        pipe = asyncio.subprocess.PIPE
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command, stdin=pipe, stdout=pipe, stderr=asyncio.subprocess.STDOUT if self.prefix else pipe,
                env=env, start_new_session=True, preexec_fn=die_with_parent(self.reaper))
        except OSError as exc:  # not found, not executable
            print(f"{self.note}cannot start {self.command[0]!r}: {exc}", file=sys.stderr, flush=True)
            return Ended(COMMAND_NOT_FOUND, f"cannot start {self.command[0]!r}: {exc.strerror or exc}")
        watching = asyncio.ensure_future(self._watch_progress()) if self.on_progress is not None else None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        streams = [(self.proc.stdout, sys.stdout.buffer)]
        if self.proc.stderr is not None:
            streams.append((self.proc.stderr, sys.stderr.buffer))
        output = asyncio.gather(*(self._forward(stream, out) for stream, out in streams))
        if self.terminated:  # stopped while it was being started
            self.terminate()
        try:
            self.proc.stdin.write(json.dumps(self.payload).encode())
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            pass  # a handler that does not read its payload (uvloop: RuntimeError, its pipe already closed)
        finally:
            self.proc.stdin.close()
        try:
            code = shell_exit_code(await self.proc.wait())
        finally:
            if watching is not None:
                watching.cancel()
            self._signal_group(signal.SIGKILL)  # what it left behind goes with it, as with a pod's container
            if self.reaper is not None:
                self.reaper.discard(self.proc.pid)
            try:
                await asyncio.wait_for(output, 5)
            except asyncio.TimeoutError:
                pass  # wait_for cancelled it
        if code == 0:
            return self._output()
        if code == SNOOZE_EXIT_CODE:
            return self._snooze()
        lines = bytes(self.tail).decode(errors="replace").splitlines(True)[-TAIL_LINES:]
        text = "".join(lines).strip()[-TAIL_BYTES:]
        return Ended(code, text or f"exit code {code}")

    def _output(self) -> Ended:
        """Exit 0: succeeded, with the JSON the command wrote to SEXTANT_OUTPUT_FILE, if any, as its output."""
        try:
            data = read_bounded(self.files / "output.json", OUTPUT_MAX_BYTES + 1)
        except FileNotFoundError:
            return Ended(0)
        except OSError as exc:
            return said(Ended(0, output_note=f"{OUTPUT_FILE_ENV} cannot be read ({exc}); not kept"), self.note)
        if len(data) > OUTPUT_MAX_BYTES:
            return said(Ended(0, output_note=f"{OUTPUT_FILE_ENV} holds over {OUTPUT_MAX_BYTES} bytes, the output's "
                                             "cap; not kept"), self.note)
        try:
            value = json.loads(data)
        except ValueError as exc:
            return said(Ended(0, output_note=f"{OUTPUT_FILE_ENV} does not hold JSON ({exc}); not kept"), self.note)
        return returned(value, self.note)

    def _snooze(self) -> Ended:
        """Exit SNOOZE_EXIT_CODE: snoozed for the delay in SEXTANT_SNOOZE_FILE; without a valid one the attempt fails
        (the lifecycle says so), with why."""
        try:
            text = read_bounded(self.files / "snooze", SNOOZE_HEAD).decode(errors="replace")
            return snoozed(snooze_seconds(text))
        except FileNotFoundError:
            why = f"{SNOOZE_FILE_ENV} was not written (write a delay such as 30s there before exit {SNOOZE_EXIT_CODE})"
        except (OSError, ValueError) as exc:
            why = f"{SNOOZE_FILE_ENV}: {exc}"
        print(f"{self.note}{why}", file=sys.stderr, flush=True)
        return Ended(SNOOZE_EXIT_CODE, why)

    async def _watch_progress(self) -> None:
        """Read SEXTANT_PROGRESS_FILE whenever it changes (polled each PROGRESS_POLL seconds): its latest line is the
        attempt's progress. A line that cannot be read is said once, in the handler's output."""
        path, seen = self.files / "progress", None
        while True:
            await asyncio.sleep(PROGRESS_POLL)
            try:
                stat = path.stat()
                if (stat.st_mtime_ns, stat.st_size) == seen:
                    continue
                seen = (stat.st_mtime_ns, stat.st_size)
                lines = read_bounded(path, PROGRESS_TAIL, tail=True).decode(errors="replace").strip().splitlines()
                if lines and self.on_progress is not None:
                    self.on_progress(*parse_progress_line(lines[-1]))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                print(f"{self.note}{exc}", file=sys.stderr, flush=True)

    async def _forward(self, stream: asyncio.StreamReader, out: Any) -> None:
        """Copy stream to out in chunks (a line of any length passes), each line prefixed when there is one."""
        prefix, partial = self.prefix.encode(), b""
        while chunk := await stream.read(CHUNK):
            self.tail += chunk
            del self.tail[:-TAIL_KEPT]
            if not prefix:
                out.write(chunk)
            else:
                *lines, partial = (partial + chunk).split(b"\n")
                out.writelines(prefix + line + b"\n" for line in lines)
                if len(partial) >= CHUNK:  # no end of line in sight: out with it
                    out.write(prefix + partial + b"\n")
                    partial = b""
            out.flush()
        if partial:
            out.write(prefix + partial + b"\n")
            out.flush()

    def terminate(self) -> None:
        self.terminated = True
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)  # to the handler only, as a kubelet to a container's PID 1

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
