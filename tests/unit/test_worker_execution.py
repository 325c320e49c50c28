"""One attempt's handler on a worker, as real threads and processes (no cluster): exit codes as in pod mode, the
payload on stdin, and stops — SIGTERM / ctx.cancelled, then SIGKILL after the grace."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from _builders import T0
from tests.harness import until
from sextant import sdk
from sextant.runner.execution import CommandWork, Ended, Execution, FunctionWork

JOB = sdk.Job(id="job_a", name="job-a", namespace="shop", queue="emails", handler="h", attempt=1,
              payload={"orderId": 7}, scheduled_at="2026-03-01T12:00:00Z")


@pytest.fixture(scope="module")
def pool():
    executor = ThreadPoolExecutor(4)
    yield executor
    executor.shutdown(wait=False, cancel_futures=True)


def function(fn, pool) -> FunctionWork:
    return FunctionWork(fn, JOB, sdk.Context(jobs=None), pool, "[job-a#1]")


async def ended(work, grace: float = 5.0, stop_when: Callable[[], bool] | None = None, reason: str = "Cancelled"):
    """Run the work to its end: its result, the execution, and when it was stopped (once stop_when holds: the
    handler is under way), if it was."""
    execution = Execution(work, grace)
    task = asyncio.ensure_future(execution.run())
    stopped = None
    if stop_when is not None:
        await until(stop_when, 10, message="the handler under way")
        stopped = time.monotonic()
        execution.stop(reason, T0)
    return await asyncio.wait_for(task, 30), execution, stopped


async def test_sdk_functions_end_with_the_runners_exit_codes(pool) -> None:
    async def fine(job, ctx):
        assert job.payload == {"orderId": 7}

    def broken(job, ctx):
        raise KeyError("orderId")

    def declined(job, ctx):
        raise sdk.NonRetryableError("card declined")

    assert (await ended(function(fine, pool)))[0] == Ended(0)
    assert (await ended(function(broken, pool)))[0] == Ended(1, "KeyError: 'orderId'")
    assert (await ended(function(declined, pool)))[0] == Ended(86, "NonRetryableError: card declined")


async def test_a_stop_cancels_an_async_function_and_sets_ctx_cancelled(pool) -> None:
    seen = {}
    started = threading.Event()

    async def slow(job, ctx):
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            seen["cancelled"] = ctx.cancelled.is_set()

    result, execution, _ = await ended(function(slow, pool), stop_when=started.is_set)
    assert result.exit_code == 143 and seen == {"cancelled": True} and not execution.lingering


async def test_a_def_function_sees_ctx_cancelled_and_one_that_ignores_it_is_given_up_on(pool) -> None:
    started = threading.Event()

    def polite(job, ctx):
        started.set()
        ctx.cancelled.wait(60)

    result, _, _ = await ended(function(polite, pool), stop_when=started.is_set)
    assert result == Ended(0)  # it returned: the stop's reason decides the outcome (results.py)

    release, started = threading.Event(), threading.Event()

    def stubborn(job, ctx):
        started.set()
        release.wait(60)

    result, execution, stopped = await ended(function(stubborn, pool), grace=0.3, stop_when=started.is_set)
    assert result.exit_code == 137 and execution.lingering  # its thread runs on; its slot is not offered
    assert 0.3 + 1.0 <= time.monotonic() - stopped < 10
    release.set()
    await asyncio.wait_for(execution.task, 5)


def command(script: str, tmp_path: Path, **env: str) -> CommandWork:
    return CommandWork(["sh", "-c", script], {"PATH": "/usr/bin:/bin", **env}, {"orderId": 7, "note": "ü"},
                       "[job-a#1]")


async def test_a_command_gets_the_payload_on_stdin_and_its_environment(tmp_path: Path) -> None:
    out = tmp_path / "payload.json"
    result, _, _ = await ended(command(f'cat > {out}; test "$SEXTANT_QUEUE" = emails', tmp_path, SEXTANT_QUEUE="emails"))
    assert result == Ended(0) and json.loads(out.read_text()) == {"orderId": 7, "note": "ü"}


async def test_a_failed_command_reports_its_exit_code_and_last_output(tmp_path: Path) -> None:
    result, _, _ = await ended(command("cat >/dev/null; seq 1 200; echo 'no such order' >&2; exit 4", tmp_path))
    assert result.exit_code == 4 and result.message.endswith("no such order")
    assert "\n1\n" not in result.message  # only the tail, as FallbackToLogsOnError keeps
    missing = CommandWork(["/nonexistent/handler"], {}, {}, "[job-a#1]")
    assert (await ended(missing))[0].exit_code == 127


async def test_a_stop_sends_sigterm_then_sigkill_to_the_whole_group(tmp_path: Path) -> None:
    mark, child, ready = tmp_path / "got-term", tmp_path / "child.pid", tmp_path / "ready"
    script = (f'trap "touch {mark}" TERM; sleep 120 & echo $! > {child}; touch {ready}; '
              'while true; do sleep 0.05; done')
    result, _, stopped = await ended(command(script, tmp_path), grace=0.5, stop_when=ready.exists)
    assert result.exit_code == 137 and mark.exists()
    assert time.monotonic() - stopped >= 0.5  # SIGKILL only after the grace
    pid = int(child.read_text())

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    await until(gone, timeout=2.5, interval=0.05, message="the handler's children to go with it, as in a pod")


async def test_a_command_that_honours_sigterm_exits_143(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    result, _, _ = await ended(command(f"touch {ready}; exec sleep 60", tmp_path), grace=10, stop_when=ready.exists)
    assert result.exit_code == 128 + signal.SIGTERM


async def test_stopped_before_it_started_it_never_runs(tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    execution = Execution(command(f"touch {mark}", tmp_path), 1.0)
    execution.stop("Drained", T0)
    assert await execution.run() == Ended(None, "stopped before the handler started")
    assert not mark.exists()



def test_a_command_that_exits_without_reading_its_payload_ends_with_its_own_code_under_uvloop(monkeypatch) -> None:
    """`sextant worker` runs on uvloop, whose pipe to a command already gone raises RuntimeError rather than
    BrokenPipeError: the attempt still ends with the command's exit code (it once crashed the attempt, which then
    never ended). The command is let finish before its payload is written, as happens under load."""
    uvloop = pytest.importorskip("uvloop")
    spawn = asyncio.create_subprocess_exec

    async def exited_first(*args, **kwargs):
        proc = await spawn(*args, **kwargs)
        await proc.wait()
        await asyncio.sleep(0.1)
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", exited_first)

    async def run() -> Ended:
        return await Execution(CommandWork(["sh", "-c", "exit 1"], {**os.environ}, {"orderId": 7}, "[job-a#1]"),
                               5.0).run()

    assert uvloop.run(run()).exit_code == 1


async def test_the_files_a_command_writes_are_read_bounded_whatever_it_made_of_them(tmp_path: Path) -> None:
    """A command may link its files to /dev/zero, make them FIFOs, or write without end: the worker's event loop
    reads a bounded part of each and never blocks on them (a FIFO is refused, as a link to a device is)."""
    seen: list[tuple[float, str | None]] = []

    async def run(script: str) -> Ended:
        work = command(script, tmp_path)
        work.on_progress = lambda fraction, message: seen.append((fraction, message))
        return (await asyncio.wait_for(ended(work), 30))[0]

    refused = Ended(85, "SEXTANT_SNOOZE_FILE: snooze is not a regular file")
    assert await run('ln -s /dev/zero "$SEXTANT_SNOOZE_FILE"; exit 85') == refused
    assert await run('mkfifo "$SEXTANT_SNOOZE_FILE"; exit 85') == refused
    assert (await run('mkfifo "$SEXTANT_OUTPUT_FILE"')).output_note == (
        "SEXTANT_OUTPUT_FILE cannot be read (output.json is not a regular file); not kept")
    assert await run('ln -s /dev/zero "$SEXTANT_PROGRESS_FILE"; sleep 1.5') == Ended(0) and seen == []
    long = ('f="$SEXTANT_PROGRESS_FILE"; seq 1 400000 | sed "s/.*/0.1 step/" > "$f.new"; echo "0.5 half" >> "$f.new"; '
            'mv "$f.new" "$f"')  # 4 MB, whole at once: only its last line is progress
    assert await run(f"{long}; sleep 1.5") == Ended(0) and seen == [(0.5, "half")]
