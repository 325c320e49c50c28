"""The kopf wiring (controller/kopfapp.py, controller/feed.py), without a cluster: the settings chosen, the login
built from Sextant's Connection, the namespace scope, and how the two watches of a low-rate kind are merged."""

from __future__ import annotations

import base64
import logging
import re
import subprocess
import sys
from pathlib import Path

import kopf
import pytest
import yaml

from sextant import kubeconfig
from sextant.controller import kopfapp
from sextant.controller.feed import TOMBSTONE_SECONDS, Feed
from sextant.controller.main import Operator, Settings

OPERATOR_DIR = Path(__file__).resolve().parents[2] / "operator" / "sextant"


# ------------------------------------------------------------------------------------------------ settings
def test_kopf_writes_nothing_and_stays_bounded():
    settings = kopfapp.operator_settings()
    assert settings.posting.enabled is False
    assert settings.scanning.disabled is True
    assert settings.peering.standalone is True and settings.peering.mandatory is False
    assert settings.queueing.worker_limit is not None and 0 < settings.queueing.worker_limit <= 64
    assert settings.process.ultimate_exiting_timeout is not None and settings.process.ultimate_exiting_timeout <= 30
    body = kopf.Body({"metadata": {"name": "q", "namespace": "ns", "annotations": {"a": "b"}}, "spec": {}})
    patch = kopf.Patch()
    progress, diffbase = settings.persistence.progress_storage, settings.persistence.diffbase_storage
    progress.store(key="h", record={"started": "now"}, body=body, patch=patch)
    progress.purge(key="h", body=body, patch=patch)
    progress.touch(body=body, patch=patch, value="x")
    diffbase.store(body=body, patch=patch, essence={"spec": {"x": 1}})
    assert not patch and progress.fetch(key="h", body=body) is None and diffbase.fetch(body=body) is None


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


DEEP_DECODE = r"""
import json
from sextant.controller import kopfapp
kopfapp.allow_deep_json()
doc = '{"type": "ADDED", "object": ' + '{"a": ' * 10_000 + '{}' + '}' * 10_001
json.loads(doc)
print("decoded")
"""


def test_kopfs_json_decoding_reads_the_deepest_object_the_api_server_stores():
    """One Schedule nested 10,000 levels deep must not end kopf's watch (and with it the process)."""
    done = subprocess.run([sys.executable, "-c", DEEP_DECODE], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "decoded", done.stderr[-2000:]


def test_only_the_controller_imports_kopf():
    pattern = re.compile(r"^\s*(import kopf|from kopf)\b", re.M)
    importers = {p.relative_to(OPERATOR_DIR).parts[0] for p in OPERATOR_DIR.rglob("*.py")
                 if pattern.search(p.read_text())}
    assert importers == {"controller"}


@pytest.mark.parametrize("watches, watched", [(False, set()), (True, {"queues", "handlers", "schedules"})])
def test_the_registry_is_explicit_and_holds_only_sextants_handlers(watches, watched):
    conn = kubeconfig.Connection(server="http://127.0.0.1:1", ssl_context=False, _token="t")
    operator = Operator(conn, Settings(http_port=None, kopf_watches=watches))
    registry = kopfapp.registry_for(operator, conn)
    assert registry is not kopf.get_default_registry()
    assert {h.selector.plural for h in registry._watching.get_all_handlers()} == watched
    assert not registry._changing.get_all_handlers() and not registry._spawning.get_all_handlers()
    assert not registry._webhooks.get_all_handlers() and not registry._indexing.get_all_handlers()
    activities = {h.activity.name for h in registry._activities.get_all_handlers()}
    assert activities == {"AUTHENTICATION", "STARTUP", "CLEANUP", "PROBE"}


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


# ------------------------------------------------------------------------------------------------ feed
def obj(name: str, rv: str | None, ns: str = "ns") -> dict:
    meta = {"namespace": ns, "name": name, **({"resourceVersion": rv} if rv is not None else {})}
    return {"metadata": meta, "spec": {}}


def recording() -> tuple[Feed, list[tuple[str, str, str | None]]]:
    seen: list[tuple[str, str, str | None]] = []
    feed = Feed("queues", lambda kind, o: seen.append((kind, o["metadata"]["name"],
                                                       o["metadata"].get("resourceVersion"))))
    return feed, seen


# Each row: the changes as the two watches bring them, and what reaches the controller.
CASES = {
    "each version once, whichever watch is first": (
        [("i", "upsert", "5"), ("k", "upsert", "5"), ("k", "upsert", "7"), ("i", "upsert", "7")],
        [("upsert", "5"), ("upsert", "7")]),
    "an older version after a newer one is dropped": (
        [("k", "upsert", "7"), ("i", "upsert", "5")], [("upsert", "7")]),
    "a delete once": ([("i", "upsert", "5"), ("k", "delete", "9"), ("i", "delete", "9")],
                      [("upsert", "5"), ("delete", "9")]),
    "a late upsert of the deleted object does not bring it back": (
        [("k", "upsert", "5"), ("k", "delete", "9"), ("i", "upsert", "5")], [("upsert", "5"), ("delete", "9")]),
    "a late delete of an earlier incarnation does not remove the new one": (
        [("k", "upsert", "5"), ("k", "delete", "9"), ("k", "upsert", "12"), ("i", "delete", "9")],
        [("upsert", "5"), ("delete", "9"), ("upsert", "12")]),
    "the informer's relist delete (no version) lets the object in again": (
        [("i", "upsert", "5"), ("i", "delete", None), ("k", "upsert", "12")],
        [("upsert", "5"), ("delete", None), ("upsert", "12")]),
    "a version that is not an integer never blocks": (
        [("i", "upsert", "abc"), ("k", "upsert", "abc")], [("upsert", "abc"), ("upsert", "abc")]),
}


@pytest.mark.parametrize("changes, applied", CASES.values(), ids=CASES.keys())
def test_two_watches_apply_each_change_once(changes, applied):
    feed, seen = recording()
    for source, kind, rv in changes:
        if source == "i":
            feed(kind, obj("q", rv))
        else:
            feed.from_kopf("DELETED" if kind == "delete" else "MODIFIED", obj("q", rv))
    assert [(kind, rv) for kind, _, rv in seen] == applied


def test_a_failed_change_is_tried_again_from_the_other_watch_and_kopf_never_raises(caplog):
    calls: list[str] = []

    def on_change(kind: str, o: dict) -> None:
        calls.append(o["metadata"]["resourceVersion"])
        if len(calls) == 1:
            raise ValueError("spec.concurrency: must be at least 1")

    feed = Feed("queues", on_change)
    feed.from_kopf(None, obj("q", "5"))  # kopf's initial list; its failure is left to the informer
    feed("upsert", obj("q", "5"))  # the informer's copy is applied (and would be reported, retried if it failed)
    assert calls == ["5", "5"]
    with pytest.raises(ValueError):
        Feed("queues", lambda kind, o: (_ for _ in ()).throw(ValueError("bad")))("upsert", obj("q", "1"))
    Feed("queues", lambda kind, o: None).from_kopf("ADDED", {"no": "metadata"})  # a nameless object: no raise


def test_kopfs_body_is_copied_and_trimmed():
    kept: list[dict] = []
    feed = Feed("schedules", lambda kind, o: kept.append(o))
    raw = obj("s", "3")
    raw["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    feed.from_kopf("ADDED", raw)
    assert "managedFields" not in kept[0]["metadata"] and "managedFields" in raw["metadata"]
    kept[0]["spec"]["x"] = 1
    assert raw["spec"] == {}


def test_deletes_are_forgotten_after_a_while():
    now = [0.0]
    feed = Feed("handlers", lambda kind, o: None, clock=lambda: now[0])
    for i in range(100):
        feed("upsert", obj(f"h{i}", "5"))
        feed("delete", obj(f"h{i}", "6"))
    assert len(feed) == 100
    feed("upsert", obj("live", "7"))
    now[0] = TOMBSTONE_SECONDS + 1
    feed("upsert", obj("x", "8"))
    feed("delete", obj("x", "9"))
    assert len(feed) == 2  # "live" and the fresh tombstone of "x"


# ------------------------------------------------------------------------------------------------ the CLI
def test_operator_flags_reach_kopf():
    from sextant.cli.main import _settings, build_parser

    conn = kubeconfig.Connection(server="http://127.0.0.1:1", ssl_context=False)
    args = build_parser().parse_args(["operator", "--watch-namespace", "a", "--watch-namespace", "b"])
    settings = _settings(args, conn)
    assert (settings.kopf_watches, settings.kopf_liveness) == (False, None)
    assert kopfapp.namespace_scope(settings.namespaces) == {"namespaces": ["a", "b"], "clusterwide": False}
    args = build_parser().parse_args(["operator", "--kopf-watches", "--kopf-liveness", "http://0.0.0.0:8081/healthz"])
    settings = _settings(args, conn)
    assert (settings.kopf_watches, settings.kopf_liveness) == (True, "http://0.0.0.0:8081/healthz")
    assert kopfapp.namespace_scope(settings.namespaces)["clusterwide"] is True


def test_operator_help_says_it_is_a_kopf_operator(capsys):
    from sextant.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "kopf operator" in text and "Queue, Handler and Schedule" in text and "--kopf-watches" in text
