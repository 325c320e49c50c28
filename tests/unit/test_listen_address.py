"""`sextant operator` and `sextant dev` serve plain HTTP unless given a certificate: by default only on loopback."""

from __future__ import annotations

import pytest

from sextant.__main__ import build_parser
from sextant.controller.command import settings
from sextant.kube import kubeconfig

CONN = kubeconfig.Connection(server="http://127.0.0.1:1", ssl_context=False)


@pytest.mark.parametrize("command", ["operator", "dev"])
def test_the_http_server_listens_on_loopback_unless_told_otherwise(command: str):
    default = build_parser().parse_args([command])
    assert default.http_host == "127.0.0.1" and settings(default, CONN).http_host == "127.0.0.1"
    everywhere = build_parser().parse_args([command, "--http-host", "0.0.0.0"])
    assert settings(everywhere, CONN).http_host == "0.0.0.0"
