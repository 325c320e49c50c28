"""Where the Kubernetes API is and how to authenticate: a kubeconfig (with --context) or the pod's service account.

Shared by the operator's async client, the CLI and the SDK, so all three honour KUBECONFIG the same way.
"""

from __future__ import annotations

import os
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

import base64
import hashlib
import tempfile
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ConfigError(Exception):
    """No usable cluster configuration; the message says what is missing."""


@dataclass
class Connection:
    server: str
    ssl_context: ssl.SSLContext | bool
    namespace: str = "default"
    _token: str | None = None
    _token_file: Path | None = None
    _token_read_at: float = field(default=0.0)
    _config: object | None = None
    trust: ssl.SSLContext | bool = False  # verifies the server, presents no client certificate
    # The TLS material behind ssl_context, as files, for a client that builds its own (kopf's login).
    ca_file: str | None = None
    client_cert: tuple[str, str] | None = None  # (certificate, key)
    verify: bool = True

    def with_token(self, token: str) -> Connection:
        """The same API server, authenticated as someone else: the HTTP API acts with its caller's token."""
        return Connection(server=self.server, ssl_context=self.trust, namespace=self.namespace, _token=token,
                          trust=self.trust, ca_file=self.ca_file, verify=self.verify)

    def token(self) -> str | None:
        """The bearer token as of now (a rotated service-account token or an exec plugin's is fetched again)."""
        return self._current_token()

    def headers(self) -> dict[str, str]:
        token = self._current_token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _current_token(self) -> str | None:
        # Bound service-account tokens rotate; re-read the projected file every minute.
        if self._token_file is not None and time.monotonic() - self._token_read_at > 60:
            self._token = self._token_file.read_text().strip()
            self._token_read_at = time.monotonic()
        if self._config is not None and getattr(self._config, "refresh_api_key_hook", None):
            self._config.refresh_api_key_hook(self._config)
            bearer = self._config.api_key.get("BearerToken") or self._config.api_key.get("authorization")
            if bearer:
                self._token = bearer.removeprefix("Bearer ").strip()
        return self._token


def load(kubeconfig: str | None = None, context: str | None = None, token: str | None = None) -> Connection:
    """The connection: an explicit kubeconfig, else KUBECONFIG/~/.kube/config, else in-cluster.

    `token` (kubectl's --token) authenticates with that bearer token instead of the kubeconfig's credentials.
    """
    path = kubeconfig or os.environ.get("KUBECONFIG")
    default = Path.home() / ".kube" / "config"
    if path or default.exists():
        return _from_kubeconfig(path or str(default), context, token)
    if (SERVICE_ACCOUNT_DIR / "token").exists() and os.environ.get("KUBERNETES_SERVICE_HOST"):
        conn = _in_cluster()
        if token:
            conn._token, conn._token_file = token, None
        return conn
    raise ConfigError("no Kubernetes cluster configured: set KUBECONFIG, pass --kubeconfig, or run in a pod")


def _from_kubeconfig(path: str, context: str | None, token: str | None = None) -> Connection:
    fast = _plain_kubeconfig(path.split(os.pathsep)[0], context, token)
    if fast is not None:
        return fast
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    try:
        loader = k8s_config.kube_config._get_kube_config_loader(filename=path.split(os.pathsep)[0],
                                                                   active_context=context)
        loader.load_and_set(cfg)
        namespace = loader.current_context.get("context", {}).get("namespace", "default")
    except (k8s_config.ConfigException, FileNotFoundError, KeyError, ValueError) as exc:
        raise ConfigError(f"cannot use kubeconfig {path}: {exc}") from None
    if token:  # the token replaces the kubeconfig's user: no client certificate, no exec plugin
        cfg.cert_file = cfg.key_file = None
        cfg.api_key = {"authorization": f"Bearer {token}"}
        cfg.refresh_api_key_hook = None
    return _connection(cfg, namespace)


# What _plain_kubeconfig reads itself; anything else in a user or cluster entry (exec and auth-provider plugins,
# basic auth, proxies, impersonation, ...) goes to the kubernetes library's loader.
_PLAIN_USER = {"token", "tokenFile", "client-certificate", "client-key", "client-certificate-data", "client-key-data"}
_PLAIN_CLUSTER = {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify",
                  "extensions"}


def _plain_kubeconfig(path: str, context: str | None, token: str | None) -> Connection | None:
    """The common kubeconfig (a server, a CA, a token or a client certificate) read without the kubernetes
    library, whose import alone costs a CLI call 0.3 s of CPU. None: let the library read it."""
    try:
        data = yaml.safe_load(Path(path).expanduser().read_text())
    except FileNotFoundError:
        raise ConfigError(f"cannot use kubeconfig {path}: no such file") from None
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(data, dict):
        return None

    def named(kind: str, name: Any) -> dict[str, Any] | None:
        for entry in data.get(kind) or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                return entry.get(kind[:-1]) or {}
        return None

    wanted = context or data.get("current-context")
    ctx = named("contexts", wanted)
    if ctx is None:
        return None  # the library says precisely what is missing
    cluster, user = named("clusters", ctx.get("cluster")), named("users", ctx.get("user")) or {}
    if not cluster or not cluster.get("server") or set(cluster) - _PLAIN_CLUSTER or set(user) - _PLAIN_USER:
        return None
    base = Path(path).expanduser().resolve().parent

    def material(entry: dict[str, Any], key: str) -> str | None:
        """A file named by `key` (relative to the kubeconfig) or the base64 `key-data`, as a file path."""
        if entry.get(f"{key}-data"):  # one private file per content, reused by later calls
            content = base64.b64decode(entry[f"{key}-data"])
            target = Path(tempfile.gettempdir()) / f"sextant-kubeconfig-{hashlib.sha256(content).hexdigest()[:24]}"
            if not target.exists():
                fd = os.open(f"{target}.{os.getpid()}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(content)
                os.replace(f"{target}.{os.getpid()}", target)
            return str(target)
        if entry.get(key):
            return str(base / os.path.expanduser(entry[key]))
        return None

    server = str(cluster["server"]).rstrip("/")
    verify, ca = not cluster.get("insecure-skip-tls-verify"), material(cluster, "certificate-authority")
    cert, key = material(user, "client-certificate"), material(user, "client-key")
    bearer = token or user.get("token")
    if not bearer and user.get("tokenFile"):
        bearer = (base / user["tokenFile"]).read_text().strip()
    presented = None if token or not (cert and key) else (cert, key)
    return Connection(server=server, ssl_context=tls_context(server, verify, ca, presented),
                      namespace=ctx.get("namespace") or "default", _token=bearer, trust=tls_context(server, verify, ca),
                      ca_file=ca, client_cert=presented, verify=verify)


def _in_cluster() -> Connection:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    k8s_config.load_incluster_config(client_configuration=cfg)
    namespace = (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip()
    conn = _connection(cfg, namespace)
    conn._token_file = SERVICE_ACCOUNT_DIR / "token"
    return conn


def _connection(cfg: Any, namespace: str) -> Connection:
    bearer = cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization")
    token = bearer.removeprefix("Bearer ").strip() if bearer else None
    server = cfg.host.rstrip("/")
    client_cert = (cfg.cert_file, cfg.key_file) if cfg.cert_file and cfg.key_file else None
    return Connection(server=server, ssl_context=tls_context(server, cfg.verify_ssl, cfg.ssl_ca_cert, client_cert),
                      namespace=namespace, _token=token,
                      _config=cfg if getattr(cfg, "refresh_api_key_hook", None) else None,
                      trust=tls_context(server, cfg.verify_ssl, cfg.ssl_ca_cert),
                      ca_file=cfg.ssl_ca_cert or None, client_cert=client_cert, verify=bool(cfg.verify_ssl))


def tls_context(server: str, verify: bool, cafile: str | None,
         client_cert: tuple[str | None, str | None] | None = None) -> ssl.SSLContext | bool:
    """The TLS context for the API server (False for plain http), with a client certificate if given."""
    if not server.startswith("https"):
        return False
    ctx = ssl.create_default_context(cafile=cafile) if verify and cafile else ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if client_cert and client_cert[0] and client_cert[1]:
        ctx.load_cert_chain(client_cert[0], client_cert[1])
    return ctx
