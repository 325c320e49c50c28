"""`sextant run`, the attempt pod's adapter over execution.py (which runs the handler, as a worker does): the
command line, the attempt read from the pod's environment and its Job, the attempt's lease, SIGTERM as a stop,
and the exit code and termination message of the container."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..kube import kubeconfig
from .. import sdk
from ..kube.client import Kube
from ..kube.clock import utcnow
from ..resources.report import SNOOZE_EXIT_CODE, pod_report
from .env import TERMINATION_LOG_ENV, AttemptEnv
from .execution import (COMMAND_NOT_FOUND, LEASE_LOST, TERMINATED, CommandWork, Ended, Execution, FunctionWork,
                        Work, import_handlers)
from .lease import LeaseKeeper
from .payload import PayloadError, handler_environ, read_attempt

TERMINATION_LOG = Path("/dev/termination-log")


def _termination_message(text: str) -> None:
    """What the kubelet puts in the container status (and so the job's timeline), where it can. The local node
    (sextant dev) names a file of its own: a process there cannot write /dev/termination-log."""
    path = Path(os.environ[TERMINATION_LOG_ENV]) if os.environ.get(TERMINATION_LOG_ENV) else TERMINATION_LOG
    try:
        if path.parent.exists():
            path.write_text(text[-4000:])
    except OSError:
        pass


class ModuleWork:
    """The job's handler from an SDK module (`sextant.sdk.handler`), run as a worker runs one."""

    def __init__(self, module: str, env: AttemptEnv) -> None:
        self.module, self.env = module, env
        from ..client import Client
        from .chaining import Jobs

        self.context = sdk.Context(jobs=Jobs(lambda: Client(kubeconfig.load(), user_agent="sextant-sdk"),
                                             env.namespace))
        self.function: FunctionWork | None = None

    @property
    def on_progress(self) -> Callable[[float, str | None], None] | None:
        return self.context.on_progress

    @on_progress.setter
    def on_progress(self, report: Callable[[float, str | None], None] | None) -> None:
        self.context.on_progress = report

    async def run(self) -> Ended:
        if problem := import_handlers(self.module):
            print(f"sextant: {problem.message}", file=sys.stderr, flush=True)
            return Ended(COMMAND_NOT_FOUND if problem.missing else 1, problem.message)
        handlers = sdk.registered()
        fn = handlers.get(self.env.handler)
        if fn is None:
            message = (f"no handler {self.env.handler!r} in module {self.module} "
                       f"(registered: {', '.join(sorted(handlers)) or 'none'})")
            print(f"sextant: {message}", file=sys.stderr)
            return Ended(1, message)
        env = self.env
        job = sdk.Job(id=env.job_id, name=env.job_name, namespace=env.namespace, queue=env.queue,
                      handler=env.handler, attempt=env.attempt, payload=env.payload or {},
                      scheduled_at=env.scheduled_at)
        # Its own thread, not the loop's default executor, which asyncio.run would wait for on the way out.
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="handler")
        self.function = FunctionWork(fn, job, self.context, executor, None)
        try:
            return await self.function.run()
        finally:
            executor.shutdown(wait=False)

    def terminate(self) -> None:
        self.context.cancelled.set()  # seen by a handler not yet started, too
        if self.function is not None:
            self.function.terminate()

    def kill(self) -> None:
        self.terminate()


def command_work(command: list[str]) -> Callable[[AttemptEnv], Work]:
    """A command handler, its output as it writes it (kubectl logs shows it)."""
    def work(env: AttemptEnv) -> Work:
        payload = env.payload or {}
        return CommandWork(command, handler_environ(payload), payload, None)
    return work


def module_work(module: str) -> Callable[[AttemptEnv], Work]:
    return lambda env: ModuleWork(module, env)


def _expand_environ(env: AttemptEnv) -> None:
    """The handler's SEXTANT_* variables, in this process's environment: a command handler inherits it, an SDK
    handler runs here."""
    full = env.expanded(os.environ)
    for name in set(os.environ) - set(full):
        del os.environ[name]
    os.environ.update(full)


async def supervise(env: AttemptEnv, work_for: Callable[[AttemptEnv], Work]) -> int:
    """Run the attempt's handler (work_for the completed attempt) to its exit code: stopped on SIGTERM (cancel,
    timeout) or a lost lease (then LEASE_LOST), its failure's message in the termination log."""
    keeper: LeaseKeeper | None = None
    kube: Kube | None = None
    if env.payload is None or (env.heartbeat and env.lease_name):
        kube = Kube(kubeconfig.load(), user_agent="sextant-runner")
    waits: list[asyncio.Future] = []
    loop = asyncio.get_running_loop()
    try:
        if env.payload is None:
            try:
                env = await read_attempt(kube, env)
            except PayloadError as exc:
                print(f"sextant: {exc}", file=sys.stderr)
                _termination_message(str(exc))
                return LEASE_LOST
        _expand_environ(env)
        work = work_for(env)
        execution = Execution(work, env.cancel_grace.total_seconds())
        loop.add_signal_handler(signal.SIGTERM, lambda: execution.stop("SIGTERM", utcnow()))
        if kube is not None and env.heartbeat and env.lease_name:
            keeper = LeaseKeeper(kube, env)
            if isinstance(work, (ModuleWork, CommandWork)):  # its progress rides on the Lease
                work.on_progress = keeper.report

            async def stop_when_lost() -> None:
                await keeper.lost.wait()
                execution.stop("Lost", utcnow())  # our lease is gone: the operator has failed the attempt

            waits = [asyncio.ensure_future(keeper.run()), asyncio.ensure_future(stop_when_lost())]
        ended = await execution.run()
        code = TERMINATED if ended.exit_code is None else ended.exit_code
        if keeper is not None and keeper.lost.is_set():
            code = LEASE_LOST
        # A snooze's delay and the output travel in the termination message, which the pod's status carries to the
        # operator with the attempt's end: no write of their own (README, "Snooze, output and progress").
        report = pod_report(snooze_seconds=ended.snooze_seconds, output=ended.output, output_note=ended.output_note,
                            message=ended.message if code != 0 else None) if code in (0, SNOOZE_EXIT_CODE) else None
        if report is not None:
            _termination_message(report)
        elif code != 0 and ended.message:
            _termination_message(ended.message)
        return code
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        for task in waits:
            task.cancel()
        if kube is not None:
            await kube.close()


# What `sextant run --help` says after USAGE.
HELP = """`sextant run`: the entrypoint of attempt pods.

    sextant run -- python -m receipts.send      a command handler: the payload arrives on stdin as JSON
    sextant run --module myapp.handlers         SDK handlers, dispatched by the job's handler name

It reads the payload (and, in a slim pod, the rest of the job's identity: env.py) from the Job, holds the attempt's
lease (renewed every leaseDuration/3), forwards SIGTERM (cancel, timeout) to the handler, which then has
cancelGrace before the kubelet's SIGKILL, and exits with the handler's exit code. Its stdout and stderr are the
handler's, so `kubectl logs` shows them.
"""

USAGE = "usage: sextant run --module MODULE | sextant run -- COMMAND [ARGS...]"


def main(argv: list[str]) -> int:
    """argv: ['--module', 'm'] or the command (after `--`)."""
    if argv[:1] in (["--help"], ["-h"]):  # before the environment is read: help works anywhere
        print(f"{USAGE}\n\n{HELP.strip()}")
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
    code = asyncio.run(supervise(env, module_work(module) if module else command_work(argv)))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # without waiting for a handler thread that would not stop
