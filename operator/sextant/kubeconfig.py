"""Where the Kubernetes API is and how to authenticate: a kubeconfig (with --context) or the pod's service account.

Shared by the operator's async client, the CLI and the SDK, so all three honour KUBECONFIG the same way.
"""

from __future__ import annotations

import os
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

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


def _in_cluster() -> Connection:
    cfg = k8s_client.Configuration()
    k8s_config.load_incluster_config(client_configuration=cfg)
    namespace = (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip()
    conn = _connection(cfg, namespace)
    conn._token_file = SERVICE_ACCOUNT_DIR / "token"
    return conn


def _connection(cfg: k8s_client.Configuration, namespace: str) -> Connection:
    if cfg.verify_ssl:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
    else:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file and cfg.key_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    bearer = cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization")
    token = bearer.removeprefix("Bearer ").strip() if bearer else None
    server = cfg.host.rstrip("/")
    return Connection(server=server, ssl_context=ctx if server.startswith("https") else False, namespace=namespace,
                      _token=token, _config=cfg if getattr(cfg, "refresh_api_key_hook", None) else None)
