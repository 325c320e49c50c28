"""`sextant worker` (and `kubectl sextant worker`): serve queues with SDK functions and command handlers.

    sextant worker --module myapp.handlers                 every Queue of the namespace, the functions of myapp
    sextant worker --queue emails --allow-commands         command handlers (Handler spec.worker.command) only
    sextant worker -n shop --module myapp.handlers --queue payments --queue emails --name payments-1
    sextant worker --config sextant.toml                   the file's queues and handlers, its [worker] flags

Bad input is an error at start that names it, exit code 2: a --queue or --handler that does not exist, a module
that does not import, a handler registered twice, a function without a worker-mode Handler, a --handler whose
command it is not allowed to run, a --command-env its environment lacks, nothing to serve. It runs a Handler's
command only when told to (--allow-commands, --allow-command NAME), with the SEXTANT_* variables, a minimal base
and what --command-env passes: never its own environment (docs/workers.md).
SIGTERM or Ctrl-C drains (docs/workers.md); a second one skips what is left of the drain grace. Exit code 0 after a
drain, 1 when another process took its name over (its Worker object names another incarnation). An API outage never
makes it exit: past its renew deadline it stops its handlers and registers again.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..resources import inputs
from ..kube import kubeconfig
from ..resources.common import parse_duration
from ..resources.inputs import port, positive_int
from .settings import Settings

# The rest is imported when a worker starts, so that every other command of the CLI starts fast.

log = logging.getLogger("sextant.worker")


class BadInput(Exception):
    """Exit code 2: the message names what is wrong."""


def _duration(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "worker", parents=[flags], help="serve queues: run worker-mode handlers as jobs are assigned (no pods)",
        description="A long-running worker (docs/workers.md): it announces itself with a Worker object of its own, "
                    "and runs the jobs "
                    "the operator assigns to it — SDK functions of --module on its event loop (async def) or "
                    "thread pool (def), command handlers (Handler spec.worker.command) as a subprocess per job "
                    "with the payload on stdin. It serves the Handlers of the namespace with spec.worker that it "
                    "can run.")
    p.add_argument("--config", metavar="FILE",
                   help="a sextant.toml: serve the queues and handlers it declares, with its [worker] section's "
                        "flags (queues, handlers, modules, concurrency, name, drain_grace, metrics_port, "
                        "allow_commands, command_env); a flag given here wins. It creates nothing: `sextant config "
                        "apply -f FILE` does")
    p.add_argument("--queue", action="append", dest="queues", metavar="QUEUE",
                   help="a queue to serve (repeatable; default: every Queue of the namespace, as they come and go)")
    p.add_argument("--module", action="append", dest="modules", metavar="MODULE",
                   help="a Python module whose @sextant.sdk.handler functions to serve (repeatable; imported with "
                        "the current directory on sys.path)")
    p.add_argument("--handler", action="append", dest="handlers", metavar="HANDLER",
                   help="serve only this handler (repeatable; default: every worker-mode Handler it can run)")
    p.add_argument("--allow-commands", action="store_true", default=None,
                   help="run the command of every command handler it serves (Handler spec.worker.command). "
                        "Default: none — whoever may write a Handler would otherwise run any command here")
    p.add_argument("--allow-command", action="append", dest="allow_command", metavar="HANDLER",
                   help="run this Handler's command (repeatable); the other command handlers are not served")
    p.add_argument("--command-env", action="append", dest="command_env", metavar="NAME[=VALUE]",
                   help="pass NAME from the worker's environment (or set NAME=VALUE) to the commands it runs "
                        "(repeatable). They get only the SEXTANT_* variables, PATH, HOME, USER, LOGNAME, LANG, "
                        "LANGUAGE, LC_*, TZ, TMPDIR and these: never the worker's other variables")
    p.add_argument("--concurrency", type=positive_int, metavar="N",
                   help=f"slots: attempts run at once (default {Settings.concurrency}; also the threads for `def` "
                        "functions)")
    p.add_argument("--name", help="the worker's name, a DNS label (default: the pod's name, else <host>-<pid>)")
    p.add_argument("--drain-grace", type=_duration, metavar="DURATION",
                   help="on SIGTERM, how long running handlers may finish before they are stopped and their "
                        f"attempts recorded failed, reason Drained (default {Settings.drain_grace:g}s)")
    p.add_argument("--metrics-port", type=port, metavar="PORT", help="serve Prometheus metrics on this port")
    p.add_argument("--metrics-host", default="127.0.0.1",
                   help="the metrics' address (default 127.0.0.1: this host only; 0.0.0.0 for a scraper elsewhere, "
                        "as the chart's metricsPort does). Plain HTTP, no authentication")
    p.add_argument("--no-events", action="store_true",
                   help="no effect: a worker posts no Events any more (the operator posts them); kept so that "
                        "scripts that pass it still work")
    p.add_argument("--log-level", default="info", help="debug, info (default), warning or error")
    p.set_defaults(func=main)


def apply_config(args: argparse.Namespace) -> None:
    """--config FILE: its [worker] keys (and its queues and handlers) for the flags not given. BadInput naming the
    file and the key."""
    from ..resources.config import ConfigError, worker_config

    if args.config is None:
        return
    try:
        with open(args.config, encoding="utf-8") as f:
            found = worker_config(f.read())
    except OSError as exc:
        raise BadInput(f"--config {args.config}: {exc.strerror or exc}") from None
    except ConfigError as exc:
        raise BadInput(f"{args.config}: {exc}") from None
    for key, value in found.model_dump().items():
        if key == "allow_commands":  # true: --allow-commands; a list: --allow-command for each
            if value is None or args.allow_commands is not None or args.allow_command is not None:
                continue
            if value is True:
                args.allow_commands = True
            elif value is not False:
                args.allow_command = list(value)
            continue
        if value is None or getattr(args, key, None) is not None:
            continue
        setattr(args, key, _duration(value) if key == "drain_grace" else value)


def allowed_commands(args: argparse.Namespace) -> bool | frozenset[str]:
    """--allow-commands (True) or --allow-command's names; BadInput when both are given."""
    if args.allow_commands and args.allow_command:
        raise BadInput(f"--allow-commands runs every command handler; --allow-command {args.allow_command[0]} "
                       "names some: give one of the two")
    if args.allow_commands:
        return True
    for name in args.allow_command or ():
        inputs.object_name("--allow-command", name, "handler name")
    return frozenset(args.allow_command or ())


def command_env(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """--command-env's variables, their values resolved now; BadInput naming the entry that is wrong."""
    from .environment import resolve

    entries = [inputs.command_env("--command-env", text) for text in args.command_env or ()]
    try:
        return tuple(resolve(entries, environ).items())
    except KeyError as exc:
        name = exc.args[0]
        raise BadInput(f"--command-env {name}: the worker's environment has no {name} (give {name}=VALUE to set "
                       "it)") from None


def import_modules(modules: list[str]) -> dict[str, Callable[..., Any]]:
    """Import the --module modules; their registered functions. BadInput naming the module that fails."""
    from .. import sdk
    from ..runner.execution import import_handlers

    for module in modules:
        if problem := import_handlers(module):
            raise BadInput(problem.message)
    return sdk.registered()


async def serve(conn: kubeconfig.Connection, args: argparse.Namespace, settings: Settings,
                functions: dict[str, Callable[..., Any]]) -> int:
    from ..kube.client import ApiError
    from .app import Stopped, Worker
    from .plan import PlanError

    namespace, name = settings.namespace, settings.name
    worker = Worker.of(conn, settings, functions)
    try:
        try:
            await worker.start()
        except PlanError as exc:
            _error(str(exc))
            return 2
        except ApiError as exc:
            _error(f"cannot read the Queues and Handlers of namespace {namespace} at {conn.server}: {exc}")
            return 1
        if args.metrics_port:
            try:
                worker.metrics.serve(args.metrics_port, args.metrics_host)
            except OSError as exc:
                _error(f"--metrics-port {args.metrics_port}: cannot listen on {args.metrics_host}: {exc.strerror}")
                return 1
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        try:
            await worker.run()
        except (Stopped, ApiError) as exc:  # taken over by another process under this name; cannot register
            _error(f"worker {name}: {exc}")
            return 1
        return 0
    finally:
        await worker.close()


def main(args: argparse.Namespace) -> int:
    if os.getpid() == 1:  # PID 1 of its container (no init in the image): be its init too (docs/workers.md)
        from ..runner.process import run_as_init

        return run_as_init(lambda: _main(args))
    return _main(args)


def _main(args: argparse.Namespace) -> int:
    from ..runner.process import keep_private
    from .registration import default_name, name_problem

    keep_private()  # its commands run as its user: they must not read its environment (credentials) through /proc
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        apply_config(args)
        if getattr(args, "all_namespaces", False):
            raise BadInput("-A/--all-namespaces cannot be used with `worker`: a worker serves one namespace "
                           "(use -n NAMESPACE)")
        if args.name is not None and (problem := name_problem(args.name)):
            raise BadInput(problem)
        namespace_given = getattr(args, "namespace", None)
        if namespace_given is not None:
            inputs.namespace("--namespace", namespace_given)
        allow, passed = allowed_commands(args), command_env(args, os.environ)  # bad input: before anything starts
        functions = import_modules(args.modules or [])
    except (BadInput, inputs.InputError) as exc:
        _error(str(exc))
        return 2
    conn = kubeconfig.load(getattr(args, "kubeconfig", None), getattr(args, "context", None),
                           getattr(args, "token", None))
    namespace = namespace_given or conn.namespace or "default"
    name = args.name or default_name()
    settings = Settings(namespace=namespace, name=name, concurrency=args.concurrency or Settings.concurrency,
                        drain_grace=Settings.drain_grace if args.drain_grace is None else args.drain_grace,
                        want_queues=frozenset(args.queues) if args.queues else None,
                        want_handlers=frozenset(args.handlers) if args.handlers else None,
                        allow_commands=allow, command_env=passed)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    code = asyncio.run(serve(conn, args, settings, functions))
    sys.stdout.flush()
    sys.stderr.flush()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        os._exit(code)  # a `def` handler given up on still runs in its thread: do not wait for it
    return code


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
