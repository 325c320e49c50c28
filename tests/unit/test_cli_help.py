"""`--help` of every command prints help and exits 0 anywhere: no kubeconfig, no cluster, no environment (a job pod's
`sextant run` reads its environment, a user's `sextant operator` its kubeconfig: neither may stand before help)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sextant.__main__ import build_parser

OPERATOR_DIR = Path(__file__).resolve().parents[2] / "operator"


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the CLI, from its parser: (), ('jobs',), ('jobs', 'create'), ..."""
    found = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += commands(sub, (*prefix, name))
    return found


def test_every_command_is_found():
    paths = set(commands(build_parser()))
    assert {(), ("run",), ("operator",), ("dev",), ("jobs", "create"), ("jobs", "wait"), ("queues", "list"),
            ("schedules", "trigger"), ("inspect",), ("logs",)} <= paths


def test_every_help_exits_0_without_kubeconfig_cluster_or_environment(tmp_path):
    # An empty environment but for HOME (an empty folder: no ~/.kube/config) and the path to this checkout's code.
    env = {"HOME": str(tmp_path), "PYTHONPATH": str(OPERATOR_DIR)}
    calls = [[*path, "--help"] for path in commands(build_parser())]
    calls += [["-h"], ["run", "-h"], ["-n", "shop", "run", "--help"], ["--kubeconfig", "/nowhere", "jobs", "--help"]]

    def run(args: list[str]) -> tuple[list[str], subprocess.CompletedProcess[str]]:
        proc = subprocess.run([sys.executable, "-m", "sextant", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        return args, proc

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, calls))
    failed = [f"sextant {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
              for args, proc in results if proc.returncode != 0 or not proc.stdout.startswith("usage: sextant")]
    assert not failed, "\n".join(failed)
    for args, proc in results:
        assert proc.stderr == "", (args, proc.stderr)
    helps = {tuple(args): proc.stdout for args, proc in results}
    assert "run " in helps[("--help",)] and "the entrypoint of attempt pods" in helps[("--help",)]
    assert "--http-max-in-flight" in helps[("operator", "--help")]
    assert "payload arrives on stdin" in helps[("run", "--help")]
