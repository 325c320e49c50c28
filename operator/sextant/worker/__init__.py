"""`sextant worker`: a long-running process that serves queues and runs handlers as the operator assigns attempts to
it, with no pod per attempt (docs/workers.md is the protocol): which queues and handlers it serves (plan.py), its own
Worker object — registration, renewals, results, the fence (registration.py), its assignments, stops and the drain
(service.py), its results (results.py), its flags' defaults (settings.py), its command (main.py), its metrics
(metrics.py), and the same worker inside a program of your own (app.py: `sextant.worker.Worker`,
`sextant.worker.serve`). An attempt runs in-process through runner/execution.py, with pod mode's exit codes. It may
import resources/, lifecycle/, kube/, runner/, sdk.py and client.py; never controller/."""

from __future__ import annotations

from typing import Any

__all__ = ["Stopped", "Worker", "serve"]


def __getattr__(name: str) -> Any:
    """sextant.worker.Worker, serve and Stopped, imported when first used (the CLI imports this package at start)."""
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
