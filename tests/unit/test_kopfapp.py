"""The kopf wiring (controller/kopfapp.py), without a cluster: the settings chosen, the login built from Sextant's
Connection, the namespace scope, and that kopf, run as the operator runs it, lists and watches no object."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import subprocess
from datetime import timedelta
from pathlib import Path

import kopf
import pytest
import yaml

from sextant.controller import kopfapp
from sextant.controller.settings import Settings
from sextant.kube import kubeconfig
from sextant.resources import GROUP, VERSION
from tests.harness import until

OPERATOR_DIR = Path(__file__).resolve().parents[2] / "operator" / "sextant"


# ------------------------------------------------------------------------------------------------ settings
def test_kopf_writes_nothing_and_stays_bounded():
    settings = kopfapp.operator_settings()
    assert settings.posting.enabled is False
    assert settings.scanning.disabled is True
    assert settings.peering.standalone is True and settings.peering.mandatory is False
    assert settings.process.ultimate_exiting_timeout is not None and settings.process.ultimate_exiting_timeout <= 30


@pytest.mark.parametrize("level, kopf_level", [(logging.WARNING, logging.WARNING), (logging.INFO, logging.WARNING),
                                               (logging.DEBUG, logging.DEBUG)])
def test_kopf_logs_at_warning_unless_debugging(level, kopf_level):
    kopfapp.operator_settings(level)
    assert logging.getLogger("kopf").level == kopf_level


@pytest.mark.parametrize("flags, scope", [
    ([], {"namespaces": [], "clusterwide": True}),
    (["shop"], {"namespaces": ["shop"], "clusterwide": False}),
    (["a", "b", "a"], {"namespaces": ["a", "b"], "clusterwide": False}),
])
def test_watch_namespace_flags_are_kopfs_namespaces(flags, scope):
    assert kopfapp.namespace_scope(flags) == scope


LOW_RATE = ("queues", "handlers", "schedules")


class FakeAPIServer:
    """Just enough of an API server for kopf's discovery and the operator's informers (every collection empty, every
    watch quiet); it records who asked for what (kopf's client says who it is in its User-Agent)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, bool]] = []  # (User-Agent, path, a watch)

    def by(self, agent: str) -> list[tuple[str, bool]]:
        return [(path, watch) for who, path, watch in self.requests if who.startswith(agent)]

    def app(self):
        from aiohttp import web

        api = f"/apis/{GROUP}/{VERSION}"

        def resource(name: str, kind: str, namespaced: bool = True) -> dict:
            return {"name": name, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                    "verbs": ["get", "list", "watch"]}

        discovery = {
            "/api": {"versions": ["v1"]},
            "/api/v1": {"resources": [resource("namespaces", "Namespace", False), resource("events", "Event")]},
            "/apis": {"groups": [{"name": GROUP, "versions": [{"version": VERSION}],
                                  "preferredVersion": {"version": VERSION}}]},
            api: {"resources": [resource("queues", "Queue"), resource("handlers", "Handler"),
                                resource("schedules", "Schedule")]},
        }

        async def answer(request):
            watch = request.query.get("watch") in ("true", "1")
            self.requests.append((request.headers.get("User-Agent", ""), request.path, watch))
            if request.path in discovery:
                return web.json_response(discovery[request.path])
            if not watch:
                return web.json_response({"kind": "List", "items": [], "metadata": {"resourceVersion": "10"}})
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            await asyncio.sleep(3600)  # held open, as a quiet watch is
            return response

        app = web.Application()
        app.router.add_get("/{path:.*}", answer)
        return app


def run_operator(monkeypatch, also_watch: str | None = None) -> FakeAPIServer:
    """kopfapp.serve, as `sextant operator --watch-namespace ns` runs it, against the fake API server, until kopf's
    discovery is done and the operator's informers watch every low-rate kind. also_watch: an on.event handler of
    that kind added to kopf's registry (the shape before issue 41), to show the test would see kopf's watch."""
    from aiohttp import web

    server = FakeAPIServer()
    if also_watch is not None:
        original = kopfapp.registry_for

        def registry_for(operator, conn):
            registry = original(operator, conn)
            kopf.on.event(GROUP, VERSION, also_watch, registry=registry)(lambda **_: None)
            return registry

        monkeypatch.setattr(kopfapp, "registry_for", registry_for)

    def settled() -> bool:
        kopfs = {path for path, _ in server.by("kopf/")}
        watched = {path.rsplit("/", 1)[1] for path, watch in server.by("sextant-operator") if watch}
        # With a kopf handler added, kopf's list of its kind too (else the informers may be done first).
        extra = {f"/apis/{GROUP}/{VERSION}/namespaces/ns/{also_watch}"} if also_watch else set()
        return {"/api/v1", "/apis"} | extra <= kopfs and set(LOW_RATE) <= watched

    async def main() -> None:
        runner = web.AppRunner(server.app(), handler_cancellation=True)  # no handler outlives its watch
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        conn = kubeconfig.Connection(server=url, ssl_context=False, _token="t")
        stop = asyncio.Event()
        serving = asyncio.create_task(kopfapp.serve(conn, Settings(namespaces=["ns"], http_port=None),
                                                    stop_flag=stop))
        try:
            await until(settled, 30, message=lambda: f"kopf's discovery and the informers' watches: {server.requests}")
        finally:
            stop.set()
            await asyncio.wait_for(serving, 30)
            await runner.cleanup()

    asyncio.run(main())
    return server


def test_kopf_runs_the_process_and_lists_watches_and_writes_no_object(monkeypatch):
    """One watch per kind: the operator's informers list and watch Queue, Handler and Schedule (and the rest);
    kopf, which runs the process, asks the API server for its discovery documents only."""
    server = run_operator(monkeypatch)
    assert set(server.by("kopf/")) <= {("/api", False), ("/api/v1", False), ("/apis", False)}, server.by("kopf/")
    ours = [path for path, watch in server.by("sextant-operator") if watch]
    for plural in LOW_RATE:
        assert ours.count(f"/apis/{GROUP}/{VERSION}/namespaces/ns/{plural}") == 1


def test_a_kopf_handler_would_be_seen_watching(monkeypatch):
    """The check above is not blind: kopf with one on.event handler lists and watches its kind by then."""
    server = run_operator(monkeypatch, also_watch="schedules")
    assert (f"/apis/{GROUP}/{VERSION}/namespaces/ns/schedules", False) in server.by("kopf/")


def test_kopf_never_gives_up_on_an_api_server_that_is_away():
    backoffs = kopfapp.operator_settings().networking.error_backoffs
    first, second = list(zip(range(50), backoffs)), list(zip(range(50), backoffs))
    assert len(first) == len(second) == 50  # infinite, and re-iterable (kopf calls iter() per request)
    assert all(0 < delay <= 3.0 for _, delay in first)


def test_only_the_controller_imports_kopf():
    pattern = re.compile(r"^\s*(import kopf|from kopf)\b", re.M)
    importers = {p.relative_to(OPERATOR_DIR).parts[0] for p in OPERATOR_DIR.rglob("*.py")
                 if pattern.search(p.read_text())}
    assert importers == {"controller"}


# ------------------------------------------------------------------------------------------------ login
@pytest.fixture(scope="module")
def pem(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate and its key: a CA and a client certificate at once."""
    where = tmp_path_factory.mktemp("pem")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-subj", "/CN=sextant-test", "-days", "1"], check=True, capture_output=True)
    return cert, key


def kubeconfig_file(tmp_path: Path, cluster: dict, user: dict, namespace: str = "shop") -> str:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": namespace}}]}))
    return str(path)


def test_login_with_a_token_and_a_ca_file(tmp_path, pem):
    cert, _ = pem
    conn = kubeconfig.load(kubeconfig_file(tmp_path, {"server": "https://127.0.0.1:6443",
                                                      "certificate-authority": str(cert)}, {"token": "abc"}))
    info = kopfapp.login_info(conn)
    assert (info.server, info.token, info.scheme, info.default_namespace) == \
        ("https://127.0.0.1:6443", "abc", "Bearer", "shop")
    assert Path(info.ca_path) == cert and info.insecure is None
    assert info.certificate_path is None and info.private_key_path is None


def test_login_with_a_client_certificate_given_as_data(tmp_path, pem):
    cert, key = pem
    data = {"client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
            "client-key-data": base64.b64encode(key.read_bytes()).decode()}
    conn = kubeconfig.load(kubeconfig_file(tmp_path, {"server": "https://10.0.0.1:6443",
                                                      "certificate-authority-data": data["client-certificate-data"]},
                                           data))
    info = kopfapp.login_info(conn)
    assert info.token is None and info.scheme is None
    assert Path(info.certificate_path).read_bytes() == cert.read_bytes()
    assert Path(info.private_key_path).read_bytes() == key.read_bytes()
    assert Path(info.ca_path).read_bytes() == cert.read_bytes()


def test_login_insecure_and_the_token_flag_replacing_the_certificate(tmp_path, pem):
    cert, key = pem
    path = kubeconfig_file(tmp_path, {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True},
                           {"client-certificate": str(cert), "client-key": str(key)})
    info = kopfapp.login_info(kubeconfig.load(path))
    assert info.insecure is True and info.ca_path is None and info.certificate_path == str(cert)
    info = kopfapp.login_info(kubeconfig.load(path, token="xyz"))  # kubectl's --token: no client certificate
    assert info.token == "xyz" and info.certificate_path is None and info.private_key_path is None


def test_login_over_plain_http():
    conn = kubeconfig.Connection(server="http://127.0.0.1:8080", ssl_context=False, _token=None)
    info = kopfapp.login_info(conn)
    assert (info.server, info.token, info.ca_path, info.insecure) == ("http://127.0.0.1:8080", None, None, None)


def test_login_reads_a_rotated_service_account_token(tmp_path, pem):
    """In a pod the token file is re-read (kopf logs in again on a 401 and gets the current one)."""
    cert, _ = pem
    token = tmp_path / "token"
    token.write_text("first\n")
    conn = kubeconfig.Connection(server="https://10.0.0.1:443", ssl_context=True, _token_file=token,
                                 ca_file=str(cert))
    assert kopfapp.login_info(conn).token == "first"
    token.write_text("second\n")
    conn._token_read_at = 0.0  # a minute later
    assert kopfapp.login_info(conn).token == "second"


# ------------------------------------------------------------------------------------------------ the CLI
def test_operator_flags_reach_kopf():
    from sextant.__main__ import build_parser
    from sextant.controller.command import settings as _settings

    conn = kubeconfig.Connection(server="http://127.0.0.1:1", ssl_context=False)
    args = build_parser().parse_args(["operator", "--watch-namespace", "a", "--watch-namespace", "b"])
    settings = _settings(args, conn)
    assert settings.kopf_liveness is None
    assert kopfapp.namespace_scope(settings.namespaces) == {"namespaces": ["a", "b"], "clusterwide": False}
    args = build_parser().parse_args(["operator", "--kopf-liveness", "http://0.0.0.0:8081/healthz"])
    settings = _settings(args, conn)
    assert settings.kopf_liveness == "http://0.0.0.0:8081/healthz"
    assert kopfapp.namespace_scope(settings.namespaces)["clusterwide"] is True
    assert settings.record_queued_after is None  # a waiting new job is not written queued (it reads queued)
    args = build_parser().parse_args(["operator", "--record-queued-after", "1h"])
    assert _settings(args, conn).record_queued_after == timedelta(hours=1)


@pytest.mark.parametrize("value", ["0s", "soon"])
def test_a_record_queued_after_that_is_not_a_positive_duration_is_refused(value, capsys):
    from sextant.__main__ import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--record-queued-after", value])
    assert "--record-queued-after" in capsys.readouterr().err


def test_operator_help_says_it_is_a_kopf_operator(capsys):
    from sextant.__main__ import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "kopf operator" in text and "Queue, Handler and Schedule" in text and "watches nothing" in text
