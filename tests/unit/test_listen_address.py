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


@pytest.mark.parametrize("flags, problem", [
    (["--address", "0.0.0.0"], "--address 0.0.0.0 is not a loopback address: serving it over plain HTTP sends the "
                               "dashboard's secret and your data unencrypted; give --tls-cert and --tls-key, or "
                               "--allow-plain-http to do it anyway"),
    (["--address", "10.0.0.5", "--tls-cert", "c.pem"], "--tls-cert and --tls-key go together: give both or neither"),
    ([], None), (["--address", "::1"], None), (["--address", "0.0.0.0", "--allow-plain-http"], None),
    (["--address", "0.0.0.0", "--tls-cert", "c.pem", "--tls-key", "k.pem"], None),
])
def test_the_dashboard_serves_another_address_only_over_tls_unless_told_so(flags, problem, capsys):
    from sextant.cli.main import main

    if problem is None:
        args = build_parser().parse_args(["dashboard", *flags])
        assert args.usage_problem(args) is None
        return
    with pytest.raises(SystemExit) as exit_:
        main(["dashboard", *flags])
    assert exit_.value.code == 2 and capsys.readouterr().err.endswith(f"error: {problem}\n")


def test_unreadable_tls_files_are_one_line_naming_the_flags(tmp_path, capsys):
    from sextant.cli.main import main

    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: c, cluster: {server: "
                      "'http://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: "
                      "{cluster: c, user: u, namespace: shop}}]\n")
    missing = tmp_path / "nope.pem"
    code = main(["--kubeconfig", str(config), "dashboard", "--tls-cert", str(missing), "--tls-key", str(missing)])
    assert code == 1
    assert capsys.readouterr().err == (f"error: cannot read --tls-cert {missing} and --tls-key {missing}: "
                                       "No such file or directory\n")
