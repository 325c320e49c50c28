"""What a worker is told (`sextant worker`'s flags): every default once. Light, so that the CLI reads the flags'
defaults from here without importing the worker."""

from __future__ import annotations

from dataclasses import dataclass

from ..resources.contract import PROTOCOL


@dataclass(frozen=True)
class Settings:
    namespace: str
    name: str
    concurrency: int = PROTOCOL["workerConcurrency"]
    # Seconds; below a pod's default terminationGracePeriodSeconds (30 s).
    drain_grace: float = float(PROTOCOL["workerDrainGraceSeconds"])
    want_queues: frozenset[str] | None = None  # None: every Queue of the namespace
    want_handlers: frozenset[str] | None = None  # None: every worker-mode Handler it can run
    # Which Handlers' commands it may run (docs/workers.md, "Commands run only where allowed"): True for every one
    # (--allow-commands), else these names (--allow-command); none by default.
    allow_commands: bool | frozenset[str] = frozenset()
    # What a command gets besides the base and SEXTANT_* (--command-env), resolved at start.
    command_env: tuple[tuple[str, str], ...] = ()
