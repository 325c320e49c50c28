"""Process plumbing of the handlers' subprocesses (docs/workers.md, "Processes"): a command dies with the process
that started it, and a worker that is PID 1 in its container reaps the orphans an init would.

Linux only where the kernel is asked (prctl); elsewhere these are no-ops and a command outlives a SIGKILLed worker.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
# What an init passes on to the process it runs; the rest (SIGCHLD, SIGKILL, SIGSTOP...) it keeps or cannot catch.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGWINCH)


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    fn = libc.prctl
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


# Loaded once, in the parent: the child between fork and exec only calls it.
PRCTL = _prctl()


def die_with_parent(reaper: GroupReaper | None = None) -> Callable[[], None] | None:
    """A preexec_fn for a child that must get SIGKILL when its parent dies (PR_SET_PDEATHSIG); None where the kernel
    has no such thing and there is no reaper to tell. The signal comes when the *thread* that forked exits: asyncio
    forks on the loop's thread, which lives as long as the process.

    With a reaper, the child tells it its own process group before it execs: told by the parent after the spawn,
    a worker killed in between would leave a command's children running that no one knows of."""
    prctl, announce = PRCTL, (reaper.fd if reaper is not None else None)
    if prctl is None and announce is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if announce is not None:
            try:  # one write of less than PIPE_BUF bytes: atomic, whatever the parent writes meanwhile
                # its pid, the group it leads: uvloop may call this before the setsid of start_new_session
                os.write(announce, f"+{os.getpid()}\n".encode())
            except OSError:
                pass  # the reaper is gone
        if os.getppid() != parent:  # the parent died before the prctl: the signal will never come
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def keep_private() -> bool:
    """Make this process's memory and environment (/proc/<pid>/environ, mem, fd...) unreadable to the commands it
    runs, which run as its user: not dumpable (PR_SET_DUMPABLE 0), so only root may look, and no core file. A command
    is dumpable again from its exec, as any program is. False where the kernel has no such thing."""
    return PRCTL is not None and PRCTL(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def become_subreaper() -> bool:
    """Orphans of our descendants become our children (PR_SET_CHILD_SUBREAPER), as they would an init's."""
    return PRCTL is not None and PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def shell_exit_code(returncode: int) -> int:
    """Python reports death by signal N as -N; shells and the kubelet say 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def exit_code(status: int) -> int:
    """A wait status as a shell says it: the exit code, or 128+N after signal N."""
    return shell_exit_code(os.waitstatus_to_exitcode(status))


def run_as_init(child: Callable[[], int]) -> int:
    """Be an init for child(): fork, run child() in the child (its return value its exit code), and in this process
    forward signals to it and reap every process that ends up ours, until child() has ended; its exit code.

    An init of its own process, rather than reaping in the worker: a worker's waitpid(-1) would take the exit status
    of a command from asyncio's child watcher, or of a `def` handler's subprocess.run from it (which reads ECHILD
    as exit code 0), and nothing tells an orphan from a child of our own."""
    forwarded = set(FORWARDED)
    signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)  # none lost, none misdirected, around the fork
    pid = os.fork()
    if pid == 0:
        try:
            for sig in forwarded:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
            code = child()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - shown, and the exit code says it failed
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)

    def forward(sig: int, _frame: object) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    for sig in forwarded:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
    while True:
        try:
            ended, status = os.waitpid(-1, 0)  # retried after a signal handler runs (PEP 475)
        except ChildProcessError:
            return 1  # cannot happen while the child lives
        if ended == pid:
            code = exit_code(status)
            break
    reap()
    return code


def reap() -> None:
    """Reap whatever has already ended, without waiting for the rest."""
    while True:
        try:
            ended, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if ended == 0:
            return


# The reaper's program: it reads "+PGID" / "-PGID" lines from the worker; at end of input (the worker exited, or was
# SIGKILLed: the kernel closes its end of the pipe) it SIGKILLs every group still listed.
_REAPER = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line[1:].isdigit():
        (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


class GroupReaper:
    """A supervising reaper for a worker's commands: PR_SET_PDEATHSIG reaches only a command's own process, so what
    it started (a shell's children) would outlive a SIGKILLed worker, holding files, locks and ports while the
    attempt is retried elsewhere. One small process per worker, told each command's process group, kills those
    groups when the worker's end of its pipe closes — however the worker ended."""

    def __init__(self) -> None:
        import subprocess

        self._proc = subprocess.Popen([sys.executable, "-c", _REAPER], stdin=subprocess.PIPE,
                                      start_new_session=True)

    def _say(self, line: str) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(f"{line}\n".encode())
            stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the reaper is gone: PR_SET_PDEATHSIG still covers each command itself

    @property
    def fd(self) -> int | None:
        """Where a command announces its group ("+PGID\\n"), from between fork and exec (die_with_parent)."""
        stdin = self._proc.stdin
        return None if stdin is None or stdin.closed else stdin.fileno()

    def discard(self, group: int) -> None:
        self._say(f"-{group}")

    def close(self) -> None:
        """At a clean exit: nothing is left to kill; the reaper exits on end of input."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        try:
            self._proc.wait(5)
        except Exception:  # noqa: BLE001 - it is a best effort at exit
            pass
