"""The chart tools of the tests, helm and kube-score: built once by hack/build-tools.sh from the Go module proxy,
cached under ~/.cache/sextant/tools-helm-<v>-kube-score-<v>/bin (like the control plane), found there afterwards.

SEXTANT_TEST_TOOLSDIR takes both binaries from that folder instead of building them.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sextant.dev.localcluster import REPO_ROOT

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-tools.sh"
TOOLS = ("helm", "kube-score")


class ToolsUnavailable(RuntimeError):
    """helm or kube-score cannot be built or found; str() is one line saying why and what to do."""


@dataclass(frozen=True)
class Tools:
    bindir: Path

    @property
    def helm(self) -> str:
        return str(self.bindir / "helm")

    @property
    def kube_score(self) -> str:
        return str(self.bindir / "kube-score")


def build_tools() -> Tools:
    """The tools' directory: SEXTANT_TEST_TOOLSDIR, or the cache (building it on first use, a few minutes once)."""
    given = os.environ.get("SEXTANT_TEST_TOOLSDIR")
    if given:
        bindir = Path(given).expanduser()
        missing = [t for t in TOOLS if not os.access(bindir / t, os.X_OK)]
        if missing:
            raise ToolsUnavailable(f"SEXTANT_TEST_TOOLSDIR={bindir} lacks {', '.join(missing)}")
        return Tools(bindir)
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, cwd=REPO_ROOT)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        reason = next((ln for ln in reversed(lines) if ln.startswith("build-tools:")), None)
        raise ToolsUnavailable(reason or f"build-tools: failed with exit code {proc.returncode}"
                               + (f" ({lines[-1]})" if lines else ""))
    out = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    if not out or not Path(out[-1]).is_dir():
        raise ToolsUnavailable(f"build-tools: printed no bin directory (got {out[-1:]!r})")
    return Tools(Path(out[-1]))
