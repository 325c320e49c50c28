"""Which queues and handlers a worker serves (docs/workers.md, "Which handlers run on workers").

A handler is served when its Handler object says `spec.worker` and the worker can run it: a command
(`spec.worker.command`) that it is allowed to run (--allow-commands, --allow-command NAME; none by default), or an
SDK function registered under the Handler's name by a --module. At start every mismatch is an error that names it
(PlanError, exit code 2); later, as Handlers and Queues change, the same rules are applied without complaint
(serving()): a Handler that becomes a command this worker may not run is no longer offered (its jobs wait,
Blocked NoWorker, for a worker that may run it), as a Handler nobody registers a function for.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ..resources.handler import HandlerSpec


class PlanError(ValueError):
    """Bad input at start: the message names the queue, handler or module and what is wrong."""


AllowCommands = bool | Collection[str]  # True: every Handler's command; else those Handlers' (none by default)
ALLOW_HINT = "--allow-command {name} (or --allow-commands; allow_commands in sextant.toml's [worker])"


def command_allowed(allow: AllowCommands, handler: str) -> bool:
    return allow is True or (not isinstance(allow, bool) and handler in allow)


@dataclass(frozen=True)
class Served:
    queues: frozenset[str]
    commands: Mapping[str, tuple[str, ...]]  # handler → the command to start per job
    functions: frozenset[str]  # handlers run by a registered SDK function
    refused: frozenset[str] = frozenset()  # command handlers it may not run (not allowed): not offered

    @property
    def handlers(self) -> frozenset[str]:
        return frozenset(self.commands) | self.functions

    def how(self, handler: str) -> tuple[str, ...] | None:
        """The command of a command handler; None for an SDK function (or a handler not served)."""
        return self.commands.get(handler)


def serving(queues: Collection[str], handlers: Mapping[str, HandlerSpec], functions: Collection[str],
            want_queues: Collection[str] | None = None, want_handlers: Collection[str] | None = None,
            allow_commands: AllowCommands = False) -> Served:
    """What to serve now: the chosen queues (else every Queue), and every worker-mode Handler this process can run
    (of the chosen ones, if chosen). A Handler's command wins over a function of the same name: the Handler is
    what says how it runs; a command it may not run is refused (not offered), never run."""
    commands: dict[str, tuple[str, ...]] = {}
    run_by_function: set[str] = set()
    refused: set[str] = set()
    for name, spec in handlers.items():
        if spec.worker is None or (want_handlers is not None and name not in want_handlers):
            continue
        if spec.worker.command:
            if command_allowed(allow_commands, name):
                commands[name] = tuple(spec.worker.command)
            else:
                refused.add(name)
        elif name in functions:
            run_by_function.add(name)
    chosen = frozenset(want_queues) if want_queues is not None else frozenset(queues)
    return Served(queues=chosen, commands=commands, functions=frozenset(run_by_function), refused=frozenset(refused))


def plan(namespace: str, queues: Collection[str], handlers: Mapping[str, HandlerSpec], functions: Collection[str],
         want_queues: Collection[str] | None = None, want_handlers: Collection[str] | None = None,
         allow_commands: AllowCommands = False) -> Served:
    """What to serve at start; PlanError for the first thing that is wrong."""
    where = f"in namespace {namespace}"
    for queue in sorted(set(want_queues or ())):
        if queue not in queues:
            raise PlanError(f"--queue {queue}: there is no Queue {queue!r} {where}")
    if want_queues is None and not queues:
        raise PlanError(f"there is no Queue {where} to serve: create one (kubectl apply -f a Queue), or name "
                        "the namespace with -n")
    for name in sorted(functions):
        spec = handlers.get(name)
        if want_handlers is not None and name not in want_handlers:
            continue
        if spec is None:
            raise PlanError(f"handler {name!r} is registered by --module, but there is no Handler {name!r} {where}: "
                            "apply one with `spec: {worker: {}}`")
        if spec.worker is None:
            raise PlanError(f"handler {name!r} is registered by --module, but Handler {name!r} runs its jobs in "
                            "pods (spec.template): set `spec: {worker: {}}` instead for a worker to serve it")
        if spec.worker.command:
            raise PlanError(f"handler {name!r} is registered by --module, but Handler {name!r} says to run the "
                            f"command {list(spec.worker.command)}: keep one of the two")
    def on_workers(flag: str, name: str) -> HandlerSpec:
        """The Handler a flag names, which must exist and run on workers."""
        spec = handlers.get(name)
        if spec is None:
            raise PlanError(f"{flag} {name}: there is no Handler {name!r} {where}")
        if spec.worker is None:
            raise PlanError(f"{flag} {name}: Handler {name!r} runs its jobs in pods (spec.template), not on "
                            "workers (spec.worker)")
        return spec

    if not isinstance(allow_commands, bool):
        for name in sorted(set(allow_commands)):
            on_workers("--allow-command", name)
    for name in sorted(set(want_handlers or ())):
        spec = on_workers("--handler", name)
        assert spec.worker is not None
        if spec.worker.command and not command_allowed(allow_commands, name):
            raise PlanError(f"--handler {name}: Handler {name!r} runs the command {list(spec.worker.command)}, and "
                            "this worker runs no Handler's command unless told to: give "
                            + ALLOW_HINT.format(name=name))
        if not spec.worker.command and name not in functions:
            raise PlanError(f"--handler {name}: Handler {name!r} is an SDK function (spec.worker without a "
                            "command), and no --module registers it")
    served = serving(queues, handlers, functions, want_queues, want_handlers, allow_commands)
    if not served.handlers:
        if served.refused:
            names = ", ".join(sorted(served.refused))
            raise PlanError(f"nothing to serve: no --module registers a handler, and the Handlers {where} with "
                            f"spec.worker.command ({names}) run commands, which this worker runs only when told "
                            "to: give " + ALLOW_HINT.format(name="NAME"))
        raise PlanError(f"nothing to serve: no --module registers a handler, and no Handler {where} has "
                        "spec.worker.command")
    return served
