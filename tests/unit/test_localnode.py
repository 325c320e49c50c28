"""The parts of the local node agent that need no cluster: $(VAR) expansion, exit codes, log tails, the
container's end."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from sextant.dev.localnode import logs
from sextant.dev.localnode.pods import exit_code_of, expand, kill_container
from tests.harness import wait_for


@pytest.mark.parametrize(("text", "expected"), [
    ("$(A)-x", "1-x"),
    ("$(A)$(B)", "12"),
    ("$(MISSING)", "$(MISSING)"),
    ("$$(A)", "$(A)"),
    ("$$", "$"),
    ("$$$$", "$$"),
    ("$HOME $1", "$HOME $1"),
    ("$(A", "$(A"),
    ("end$", "end$"),
    ("", ""),
])
def test_expand_like_kubernetes(text, expected):
    assert expand(text, {"A": "1", "B": "2"}) == expected


def test_exit_code_of_a_signalled_process_is_128_plus_the_signal():
    assert exit_code_of(3) == 3
    assert exit_code_of(-15) == 143
    assert exit_code_of(-9) == 137


def test_log_tail_and_read(tmp_path: Path):
    path = logs.log_path(tmp_path, "ns", "pod", "main")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"a\nb\nc\n")
    assert logs.read(tmp_path, "ns", "pod", "main") == "a\nb\nc\n"
    assert logs.read(tmp_path, "ns", "pod") == "a\nb\nc\n"
    assert logs.read(tmp_path, "ns", "other", "main") == ""
    data = path.read_bytes()
    assert [data[logs._tail_offset(path, n):] for n in (0, 1, 2, 3, 9)] == [b"", b"c\n", b"b\nc\n", data, data]
    path.write_bytes(b"a\nb")  # no final newline: the partial line is the last line
    assert path.read_bytes()[logs._tail_offset(path, 1):] == b"b"


def test_killing_a_container_takes_the_process_groups_its_processes_started(tmp_path: Path):
    """`sextant run` starts its handler in a group of its own: the node's SIGKILL reaches it all the same."""
    child = tmp_path / "child.pid"
    main = subprocess.Popen(["sh", "-c", f'setsid sleep 120 & echo $! > {child}; wait'], start_new_session=True)
    try:
        wait_for(lambda: child.exists() and child.read_text().strip(), 10, message="the child's pid")
        pid = int(child.read_text())
        wait_for(lambda: os.getpgid(pid) != main.pid, 10, message="the child in its own session")
        kill_container(main.pid)
        assert main.wait(10) == -signal.SIGKILL
        wait_for(lambda: not _alive(pid), 5, message="the child killed too")
    finally:
        main.kill()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie until its parent (init here) reaps it
