"""The handlers' processes as real processes (docs/workers.md, "Processes"): a command dies with the worker that
started it, even when the worker is SIGKILLed; a worker that is PID 1 reaps the orphans that end up its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.harness import running, wait_for

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
OPERATOR = str(Path(__file__).resolve().parents[2] / "operator")



def python(script: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args],
                            env={**os.environ, "PYTHONPATH": OPERATOR}, **kwargs)


# A parent that runs a command handler as a worker does (CommandWork, on the event loop; uvloop where the worker
# would use it), the command writing its pid and sleeping.
PARENT = """
    import asyncio, sys
    from sextant.runner.execution import CommandWork
    if sys.argv[2] == "uvloop":
        import uvloop
        uvloop.install()
    command = ["sh", "-c", f"echo $$ > {sys.argv[1]}.tmp && mv {sys.argv[1]}.tmp {sys.argv[1]} && exec sleep 300"]
    asyncio.run(CommandWork(command, {"PATH": "/usr/bin:/bin"}, {}, "[job#1]").run())
"""


# A parent that runs, as a worker does (with its GroupReaper), a command whose own child holds on: a shell's
# `sleep` in the background, which PR_SET_PDEATHSIG (the command's own process only) does not reach.
GRANDPARENT = """
    import asyncio, sys
    from sextant.runner.execution import CommandWork
    from sextant.runner.process import GroupReaper
    if sys.argv[3] == "uvloop":
        import uvloop
        uvloop.install()
    reaper = GroupReaper()
    command = ["sh", "-c", f"{sys.argv[2]}; sleep 300 & echo $! > {sys.argv[1]}.tmp && mv {sys.argv[1]}.tmp "
               f"{sys.argv[1]}; wait"]
    asyncio.run(CommandWork(command, {"PATH": "/usr/bin:/bin"}, {}, "[job#1]", reaper).run())
"""


@linux_only
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("killed", ["later", "at-once"])
def test_what_a_command_started_dies_with_its_sigkilled_worker_too(tmp_path: Path, killed: str, loop: str):
    """"at-once": the command stops its worker as it starts (SIGSTOP), before the worker's loop has run again
    after the spawn: the command's group is known to the reaper from before its exec, not from the worker after."""
    pidfile = tmp_path / "pid"
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    parent = python(GRANDPARENT, str(pidfile), "kill -STOP $PPID" if killed == "at-once" else "true", loop,
                    start_new_session=True)  # were the reaper to kill the wrong group, not this one
    try:
        wait_for(pidfile.exists, 20, interval=0.02, message="the command's child to start")
        child = int(pidfile.read_text())
        assert running(child)
        parent.kill()  # SIGKILL: no handler of the parent's runs; its reaper sees its pipe close
        parent.wait(10)
        wait_for(lambda: not running(child), 5, interval=0.02, message="the command's child to die with the worker")
    finally:
        parent.kill()
        parent.wait(10)
        if pidfile.exists() and running(pid := int(pidfile.read_text())):
            os.kill(pid, signal.SIGKILL)


@linux_only
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_command_dies_with_its_sigkilled_worker(tmp_path: Path, loop: str):
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    pidfile = tmp_path / "pid"
    parent = python(PARENT, str(pidfile), loop)
    try:
        wait_for(pidfile.exists, 20, interval=0.02, message="the command to start")
        command = int(pidfile.read_text())
        assert running(command)
        parent.kill()  # SIGKILL: no handler of the parent's runs
        parent.wait(10)
        wait_for(lambda: not running(command), 5, interval=0.02, message="the command to die with its parent")
    finally:
        parent.kill()
        parent.wait(10)
        if pidfile.exists() and running(pid := int(pidfile.read_text())):
            os.kill(pid, signal.SIGKILL)


# An init as the worker is when PID 1 (run_as_init), made the subreaper of its descendants as PID 1 is of every
# process in its container. Its child (the worker) orphans a grandchild that then ends: the init must reap it.
# The child reports whether the zombie went away: 0 reaped, 3 still a zombie.
INIT = """
    import os, subprocess, sys, time
    from pathlib import Path
    from sextant.runner.process import become_subreaper, run_as_init
    assert become_subreaper()

    def worker() -> int:
        pidfile = Path(sys.argv[1])
        subprocess.run(["sh", "-c", f"sleep 0.2 & echo $! > {pidfile}"], check=True)  # sh exits: sleep is orphaned
        orphan = Path(f"/proc/{int(pidfile.read_text())}")
        deadline = time.monotonic() + 10
        while orphan.exists():  # a zombie keeps its /proc entry until reaped
            if time.monotonic() > deadline:
                return 3
            time.sleep(0.02)
        return 0

    sys.exit(run_as_init(worker))
"""


@linux_only
def test_an_init_worker_reaps_the_orphans_that_become_its_own(tmp_path: Path):
    init = python(INIT, str(tmp_path / "pid"))
    assert init.wait(30) == 0


# The init passes SIGTERM (a pod's deletion) on to the worker, whose exit code becomes its own.
FORWARDING = """
    import signal, sys
    from pathlib import Path
    from sextant.runner.process import run_as_init

    def worker() -> int:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
        Path(sys.argv[1]).touch()
        while True:
            signal.pause()

    sys.exit(run_as_init(worker))
"""


@linux_only
def test_an_init_worker_forwards_sigterm_and_exits_with_the_workers_code(tmp_path: Path):
    ready = tmp_path / "ready"
    init = python(FORWARDING, str(ready))
    try:
        wait_for(ready.exists, 20, interval=0.02, message="the worker to start")
        init.send_signal(signal.SIGTERM)
        assert init.wait(10) == 7
    finally:
        init.kill()
        init.wait(10)


@pytest.mark.skipif(os.geteuid() != 0 or not sys.platform.startswith("linux"),
                    reason="needs root to run the worker as another user (CI runs as root)")
@pytest.mark.parametrize("private", [True, False], ids=["kept-private", "default"])
def test_a_worker_keeps_its_environment_from_the_commands_it_runs(tmp_path: Path, private: bool):
    """A command runs as its worker's user; /proc/<worker>/environ (its credentials) is readable to it unless the
    worker made itself non-dumpable, as `sextant worker` does at start. Both run as `nobody` here (root reads
    anything); Python is imported before the switch (this machine's may live where nobody may read)."""
    script = textwrap.dedent(f"""
        import os, subprocess, sys
        from sextant.runner.process import PR_SET_DUMPABLE, PRCTL, keep_private
        os.setgid(65534); os.setuid(65534)
        PRCTL(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a process started by that user is (setuid made this one private)
        if {private!r}:
            assert keep_private()
        seen = subprocess.run(["cat", f"/proc/{{os.getpid()}}/environ"], capture_output=True)
        sys.stdout.write("read" if b"SEXTANT_SECRET=hush" in seen.stdout else "refused: " + seen.stderr.decode())
    """)
    env = {**os.environ, "SEXTANT_SECRET": "hush", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd="/", capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    if private:
        assert done.stdout.startswith("refused: ") and "Permission denied" in done.stdout, done.stdout
    else:
        assert done.stdout == "read", done.stdout  # the test can tell: without it, the command reads the secret
