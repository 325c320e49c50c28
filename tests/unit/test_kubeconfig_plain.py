"""kubeconfig.load reads the common kubeconfig itself (fast CLI start) and leaves the rest to the library."""

from __future__ import annotations

import base64
import ssl

import pytest
import yaml

from sextant.kube import kubeconfig


def write(tmp_path, user: dict, cluster: dict | None = None, namespace: str | None = None, name: str = "c"):
    ctx = {"cluster": "k", "user": "u", **({"namespace": namespace} if namespace else {})}
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "k", "cluster": cluster or {"server": "https://127.0.0.1:6443",
                                                           "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": name, "context": ctx}, {"name": "other", "context": {**ctx, "namespace": "other"}}],
    }))
    return path


def test_token_and_namespace_of_the_context(tmp_path):
    path = write(tmp_path, {"token": "abc"}, namespace="shop")
    conn = kubeconfig.load(str(path))
    assert conn.server == "https://127.0.0.1:6443" and conn.namespace == "shop"
    assert conn.headers() == {"Authorization": "Bearer abc"}
    assert isinstance(conn.ssl_context, ssl.SSLContext) and conn.ssl_context.verify_mode == ssl.CERT_NONE
    assert kubeconfig.load(str(path), context="other").namespace == "other"
    assert kubeconfig.load(str(path), token="xyz").headers() == {"Authorization": "Bearer xyz"}


def test_default_namespace_token_file_and_plain_http(tmp_path):
    (tmp_path / "tok").write_text("from-file\n")
    path = write(tmp_path, {"tokenFile": "tok"}, cluster={"server": "http://127.0.0.1:8080/"})
    conn = kubeconfig.load(str(path))
    assert (conn.server, conn.namespace, conn.ssl_context) == ("http://127.0.0.1:8080", "default", False)
    assert conn.headers() == {"Authorization": "Bearer from-file"}


def test_certificate_authority_data_is_used_not_ignored(tmp_path):
    path = write(tmp_path, {"token": "t"}, cluster={"server": "https://x:1",
                                                     "certificate-authority-data": base64.b64encode(b"junk").decode()})
    with pytest.raises(ssl.SSLError):
        kubeconfig.load(str(path))


def test_missing_things_are_config_errors(tmp_path):
    with pytest.raises(kubeconfig.ConfigError, match="no such file"):
        kubeconfig.load(str(tmp_path / "nothing"))
    path = write(tmp_path, {"token": "t"})
    with pytest.raises(kubeconfig.ConfigError, match="nope"):
        kubeconfig.load(str(path), context="nope")


def test_exec_plugins_go_to_the_library(tmp_path, monkeypatch):
    path = write(tmp_path, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}})
    assert kubeconfig._plain_kubeconfig(str(path), None, None) is None
