"""`sextant run`: the entrypoint of attempt pods.

    sextant run -- python -m receipts.send      a command handler: the payload arrives on stdin as JSON
    sextant run --module myapp.handlers         SDK handlers, dispatched by the job's handler name

It reads the payload (and, in a slim pod, the rest of the job's identity: env.py) from the Job, holds the attempt's
lease (renewed every leaseDuration/3), forwards SIGTERM (cancel, timeout) to the handler, which then has
cancelGrace before the kubelet's SIGKILL, and exits with the handler's exit code. Its stdout and stderr are the
handler's, so `kubectl logs` shows them.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
import os
import signal
import sys
import traceback
from pathlib import Path

from ..kube import kubeconfig
from .. import sdk
from ..kube.client import Kube
from .env import AttemptEnv
from .lease import LeaseKeeper
from .payload import PayloadError, handler_environ, read_attempt

log = logging.getLogger("sextant.runner")

LEASE_LOST_EXIT_CODE = 75  # EX_TEMPFAIL: the attempt was lost (or could not start), not the handler's fault
TERMINATION_LOG = Path("/dev/termination-log")


def _signal_exit_code(returncode: int) -> int:
    """asyncio reports death by signal N as -N; shells and the kubelet say 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _termination_message(text: str) -> None:
    """What the kubelet puts in the container status (and so the job's timeline), where it can."""
    try:
        if TERMINATION_LOG.parent.exists():
            TERMINATION_LOG.write_text(text[-4000:])
    except OSError:
        pass


class CommandWork:
    def __init__(self, command: list[str], env: AttemptEnv) -> None:
        self.command, self.env = command, env
        self.proc: asyncio.subprocess.Process | None = None

    async def run(self) -> int:
        payload = self.env.payload or {}
        self.proc = await asyncio.create_subprocess_exec(*self.command, stdin=asyncio.subprocess.PIPE,
                                                         env=handler_environ(payload))
        try:
            self.proc.stdin.write(json.dumps(payload).encode())
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # a handler that does not read its payload
        finally:
            self.proc.stdin.close()
        return _signal_exit_code(await self.proc.wait())

    def terminate(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.kill()


class ModuleWork:
    def __init__(self, module: str, env: AttemptEnv) -> None:
        self.module, self.env = module, env
        self.context: sdk.Context | None = None
        self.task: asyncio.Task | None = None

    async def run(self) -> int:
        sys.path.insert(0, ".")
        importlib.import_module(self.module)
        handlers = sdk.registered()
        fn = handlers.get(self.env.handler)
        if fn is None:
            message = (f"no handler {self.env.handler!r} in module {self.module} "
                       f"(registered: {', '.join(sorted(handlers)) or 'none'})")
            print(f"sextant: {message}", file=sys.stderr)
            _termination_message(message)
            return 1
        from ..client import Client
        from .chaining import Jobs

        job = sdk.Job(id=self.env.job_id, name=self.env.job_name, namespace=self.env.namespace,
                      queue=self.env.queue, handler=self.env.handler, attempt=self.env.attempt,
                      payload=self.env.payload or {}, scheduled_at=self.env.scheduled_at)
        self.context = sdk.Context(jobs=Jobs(lambda: Client(kubeconfig.load(), user_agent="sextant-sdk"),
                                             self.env.namespace))
        try:
            if inspect.iscoroutinefunction(fn):
                self.task = asyncio.ensure_future(fn(job, self.context))
                await self.task
            else:
                await asyncio.to_thread(fn, job, self.context)
        except sdk.NonRetryableError as exc:
            print(f"sextant: non-retryable: {exc}", file=sys.stderr)
            _termination_message(f"NonRetryableError: {exc}")
            return sdk.NON_RETRYABLE_EXIT_CODE
        except asyncio.CancelledError:
            _termination_message("cancelled")
            return 128 + signal.SIGTERM
        except Exception as exc:  # the handler's failure is the attempt's failure, with its message
            traceback.print_exc()
            _termination_message(f"{type(exc).__name__}: {exc}")
            return 1
        return 0

    def terminate(self) -> None:
        if self.context is not None:
            self.context.cancelled.set()
        if self.task is not None:
            self.task.cancel()

    def kill(self) -> None:
        self.terminate()


def _expand_environ(env: AttemptEnv) -> None:
    """The handler's SEXTANT_* variables, in this process's environment: a command handler inherits it, an SDK
    handler runs here."""
    full = env.expanded(os.environ)
    for name in set(os.environ) - set(full):
        del os.environ[name]
    os.environ.update(full)


async def supervise(env: AttemptEnv, work: CommandWork | ModuleWork) -> int:
    keeper: LeaseKeeper | None = None
    kube: Kube | None = None
    if env.payload is None or (env.heartbeat and env.lease_name):
        kube = Kube(kubeconfig.load(), user_agent="sextant-runner")
    if env.payload is None:
        try:
            env = await read_attempt(kube, env)
        except PayloadError as exc:
            print(f"sextant: {exc}", file=sys.stderr)
            _termination_message(str(exc))
            await kube.close()
            return LEASE_LOST_EXIT_CODE
        work.env = env
    _expand_environ(env)
    if kube is not None and env.heartbeat and env.lease_name:
        keeper = LeaseKeeper(kube, env)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    work_task = asyncio.ensure_future(work.run())
    lease_task = asyncio.ensure_future(keeper.run()) if keeper else None
    waits = [work_task, asyncio.ensure_future(stopping.wait())]
    if keeper:
        waits.append(asyncio.ensure_future(keeper.lost.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if not work_task.done():
            lost = keeper is not None and keeper.lost.is_set()
            work.terminate()  # SIGTERM: cancel, timeout, or our lease is gone
            try:
                code = await asyncio.wait_for(asyncio.shield(work_task), env.cancel_grace.total_seconds())
            except asyncio.TimeoutError:
                work.kill()
                try:
                    code = await asyncio.wait_for(asyncio.shield(work_task), 1.0)
                except asyncio.TimeoutError:  # a sync SDK handler ignoring ctx.cancelled: leave it behind
                    code = 128 + signal.SIGKILL
            return LEASE_LOST_EXIT_CODE if lost else code
        return work_task.result()
    finally:
        for task in waits[1:] + ([lease_task] if lease_task else []):
            task.cancel()
        if kube is not None:
            await kube.close()


USAGE = "usage: sextant run --module MODULE | sextant run -- COMMAND [ARGS...]"


def main(argv: list[str]) -> int:
    """argv: ['--module', 'm'] or the command (after `--`)."""
    if argv[:1] in (["--help"], ["-h"]):  # before the environment is read: help works anywhere
        print(f"{USAGE}\n\n{__doc__.strip()}")
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    module = None
    if argv[:1] == ["--module"] and len(argv) >= 2:
        module, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if bool(module) == bool(argv):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        env = AttemptEnv.from_environ()
    except RuntimeError as exc:
        print(f"sextant: {exc}", file=sys.stderr)
        return 2
    work = ModuleWork(module, env) if module else CommandWork(argv, env)
    code = asyncio.run(supervise(env, work))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # without waiting for a handler thread that would not stop
