"""`sextant …` / `kubectl sextant …`: the user commands, and the command line's rules. The composition root
(sextant/__main__.py) adds the operator's and dev's commands.

kubectl's global flags (--kubeconfig, --context, -n/--namespace, -A/--all-namespaces, --token) are accepted
before or after the subcommand. `jobs`, `queues` and `schedules` with no COMMAND list, as `kubectl get` does
(`sextant jobs --state failed` is `sextant jobs list --state failed`). Every failure is reported in one line on
stderr with a non-zero exit status (1: an error, or a job that ended without success; 2: bad usage; `jobs wait`:
124 on timeout); never a stack trace (SEXTANT_DEBUG=1 shows one for an unexpected failure).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable

import httpx

from ..resources import inputs
from ..kube import kubeconfig
from ..client import HistoryUnavailable, Refused, refused
from ..history import HistoryError
from ..kube.client import ApiError
from . import inspect as inspect_cmd
from ..worker import main as worker_cmd
from . import config, jobs, queues, schedules, workers
from . import dashboard
from .context import CliError, Context

# A command that is not a user command (the operator's, dev's): it adds its subparser, with its own flags.
Register = Callable[[argparse._SubParsersAction], None]


def _global_flags(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """kubectl's global flags. Below the top level their default is SUPPRESS, so a flag given before the
    subcommand is not overwritten by the subcommand's default."""
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", default=default(None), help="path to the kubeconfig file")
    parser.add_argument("--context", default=default(None), help="the kubeconfig context to use")
    parser.add_argument("--token", default=default(None), help="bearer token for the API server (instead of "
                                                               "the kubeconfig's credentials)")
    parser.add_argument("-n", "--namespace", default=default(None),
                        help="the namespace (default: the kubeconfig context's namespace)")
    parser.add_argument("-A", "--all-namespaces", action="store_true", default=default(False),
                        help="list across all namespaces")


def build_parser(*servers: Register) -> argparse.ArgumentParser:
    """`sextant`: the user commands, then servers (the composition root's `operator` and `dev`), `worker`, `run`."""
    parser = argparse.ArgumentParser(prog="sextant", description="Sextant: a job queue that runs on Kubernetes. "
                                     "Also `kubectl sextant ...`.")
    _global_flags(parser, top=True)
    flags = argparse.ArgumentParser(add_help=False)
    _global_flags(flags, top=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    jobs.register(sub, flags)
    inspect_cmd.register(sub, flags)
    queues.register(sub, flags)
    schedules.register(sub, flags)
    config.register(sub, flags)
    workers.register(sub, flags)
    dashboard.register(sub, flags)
    for register in servers:
        register(sub)
    worker_cmd.register(sub, flags)
    # `sextant run` is dispatched before this parser (main: its arguments are the handler's, untouched); it is
    # listed here for `sextant --help`.
    sub.add_parser("run", add_help=False, help="the entrypoint of attempt pods: run a handler with the job's "
                                               "payload (see `sextant run --help`)")
    return parser


_VALUE_FLAGS = {"--kubeconfig", "--context", "--token", "-n", "--namespace"}


def _runner_argv(argv: list[str]) -> list[str] | None:
    """The arguments of `sextant run`, when that is the command (after any of kubectl's global flags, which the
    runner does not use); None for every other command."""
    i = _command_index(argv)
    return argv[i + 1:] if argv[i:i + 1] == ["run"] else None


def _command_index(argv: list[str]) -> int:
    """Where the command is: after the flags in front of it (only kubectl's global flags can be there)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        i += _global_width(argv[i]) or 1
    return i


# Commands whose COMMAND is `list` when none is given, as `kubectl get` lists: `sextant jobs`, `sextant queues -A`.
LIST_BY_DEFAULT = frozenset({"jobs", "queues", "schedules"})
_SWITCHES = {"-A", "--all-namespaces"}


def _global_width(arg: str) -> int:
    """How many arguments one of kubectl's global flags starting with arg takes up (0: arg is none of them)."""
    if arg in _VALUE_FLAGS:
        return 2
    attached = any(arg.startswith(f"{flag}=") for flag in _VALUE_FLAGS if flag.startswith("--"))
    return 1 if arg in _SWITCHES or attached or (arg.startswith("-n") and not arg.startswith("--")) else 0


def with_default_command(argv: list[str]) -> list[str]:
    """argv with `list` after `jobs`, `queues` or `schedules` when no COMMAND follows (past kubectl's global
    flags): nothing, or another flag (the list's: `sextant jobs --state failed`); not -h/--help, the group's help."""
    i = _command_index(argv)
    if argv[i:i + 1] and argv[i] in LIST_BY_DEFAULT:
        j = i + 1
        while j < len(argv) and (width := _global_width(argv[j])):
            j += width
        if j >= len(argv) or (argv[j].startswith("-") and argv[j] not in ("-h", "--help")):
            return [*argv[:i + 1], "list", *argv[i + 1:]]
    return argv


def main(argv: list[str] | None = None, parser: Callable[[], argparse.ArgumentParser] = build_parser) -> int:
    """Run the command of argv; parser builds the command line (the composition root's adds the operator's)."""
    argv = sys.argv[1:] if argv is None else argv
    runner = _runner_argv(argv)
    if runner is not None:  # the pod entrypoint: everything after `--` is the handler's command, untouched
        from ..runner.run import main as run_main

        return run_main(runner)
    argv = with_default_command(argv)
    command_line = parser()
    args = command_line.parse_args(argv)  # bad usage: argparse prints it and exits 2
    # A command's check of its flags together (the operator's HTTPS files), before anything starts: bad usage too.
    problem = args.usage_problem(args) if getattr(args, "usage_problem", None) else None
    if problem:
        command_line.error(problem)
    if getattr(args, "cli", False):
        return _run_command(args)
    try:
        return args.func(args)
    except kubeconfig.ConfigError as exc:
        print(f"sextant: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _run_command(args: argparse.Namespace) -> int:
    """A user-facing command: everything that can go wrong becomes one line on stderr and an exit status."""
    ctx = Context(args)
    try:
        return args.func(ctx)
    except CliError as exc:
        _error(str(exc))
        return exc.code
    except inputs.InputError as exc:
        _error(str(exc))
        return 2
    except Refused as exc:
        _error(str(exc))
        return 1
    except (HistoryError, HistoryUnavailable) as exc:  # the archive: its DSN, its schema, or the database down
        _error(str(exc))
        return 1
    except ApiError as exc:
        _error(str(refused(exc)))
        return 1
    except kubeconfig.ConfigError as exc:
        _error(str(exc))
        return 1
    except httpx.TimeoutException:
        _error(f"the API server at {ctx.conn.server} did not answer in time")
        return 1
    except httpx.HTTPError as exc:
        server = ctx.conn.server if "conn" in ctx.__dict__ else "the API server"
        _error(f"cannot reach the API server at {server}: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `sextant jobs list | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - so that the interpreter's final flush is quiet
        except OSError:
            pass
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a stack trace
        if os.environ.get("SEXTANT_DEBUG"):
            traceback.print_exc()
        _error(f"unexpected failure: {type(exc).__name__}: {exc} (SEXTANT_DEBUG=1 shows the details)")
        return 1
    finally:
        ctx.close()


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)

