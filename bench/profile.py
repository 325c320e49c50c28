"""The operator's profile under load: py-spy sampling the running process (no restart, no pause: --nonblocking)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

RATE = 100  # samples per second
_LINE = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def py_spy() -> str:
    for candidate in (Path(sys.executable).parent / "py-spy", shutil.which("py-spy")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    raise RuntimeError("py-spy not found: pip install py-spy (make bench installs the bench extra)")


class Spy:
    def __init__(self, pid: int, output: Path) -> None:
        self.target = pid
        self.output = output
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [py_spy(), "record", "--pid", str(self.target), "--rate", str(RATE), "--nonblocking", "--format", "raw",
             "--output", str(self.output)],
            stdout=subprocess.DEVNULL, stderr=open(self.output.with_suffix(".log"), "wb"))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def summary(self, seconds: float, top: int = 40) -> dict[str, Any]:
        return summarize(self.output, seconds, top)


def _short(frame: str) -> str:
    """'reconcile (operator/sextant/controller/jobs.py:212)' → 'reconcile (sextant/controller/jobs.py)'."""
    m = _LINE.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    for marker in ("site-packages/", "/lib/python3", "operator/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{m.group('func')} ({path})"


def summarize(path: Path, seconds: float, top: int = 25) -> dict[str, Any]:
    """Top functions by own samples and by samples including callees, from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    if not path.exists():
        return {"error": f"no profile at {path}"}
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_short(f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        samples += n
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n

    def table(counter: Counter[str]) -> list[dict[str, Any]]:
        return [{"function": f, "samples": n, "percent": round(100 * n / samples, 1)}
                for f, n in counter.most_common(top)]

    return {
        "file": str(path),
        "samples": samples,
        "busy_fraction": round(samples / (seconds * RATE), 3) if seconds else None,  # idle samples are not recorded
        "top_own": table(own),
        "top_inclusive": table(total),
    }
