"""The operator's HTTP port as HTTPS (--http-tls-cert/--http-tls-key), and a certificate rotated in place."""

from __future__ import annotations

import shutil
import ssl

import httpx
import pytest

from tests.harness import wait_for

from .support import Operator


def served_certificate(port: int) -> str:
    return ssl.get_server_certificate(("127.0.0.1", port))


def test_https_serves_health_and_picks_up_a_renewed_certificate(cluster, namespace, tmp_path):
    if cluster.local.external:
        pytest.skip("uses the local control plane's certificates (kwokctl's pki) as test certificates")
    pki = cluster.local.workdir / "pki"
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki / "admin.crt", cert)  # its names include 127.0.0.1 and localhost
    shutil.copy(pki / "admin.key", key)
    op = Operator(cluster.kubeconfig, namespace, tmp_path / "log", "--http-tls-cert", str(cert),
                  "--http-tls-key", str(key))
    op.log_path.parent.mkdir(parents=True, exist_ok=True)
    op.start()
    try:
        url = f"https://127.0.0.1:{op.http_port}"
        trust = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        health = wait_for(lambda: httpx.get(f"{url}/healthz", verify=trust, timeout=2), 30,
                          message=lambda: f"the operator's HTTPS port; log:\n{op.log_tail()}")
        assert health.status_code == 200 and health.text == "ok"
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{op.http_port}/healthz", timeout=2)  # plain HTTP is not served

        # cert-manager renews the Secret; the mounted files change in place
        shutil.copy(pki / "ca.crt", cert)
        shutil.copy(pki / "ca.key", key)
        renewed = ssl.PEM_cert_to_DER_cert((pki / "ca.crt").read_text())
        wait_for(lambda: ssl.PEM_cert_to_DER_cert(served_certificate(op.http_port)) == renewed, 10,
                 message="the renewed certificate to be served")
    finally:
        op.stop()
