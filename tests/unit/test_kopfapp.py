"""The kopf wiring (controller/kopfapp.py, controller/feed.py), without a cluster: the settings chosen, the login
built from Sextant's Connection, the namespace scope, and how the two watches of a low-rate kind are merged."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import kopf
import pytest
import yaml

from sextant.kube import kubeconfig
from sextant.controller import kopfapp
from sextant.controller.feed import TOMBSTONE_SECONDS, Feed
from sextant.controller.operator import Operator
from sextant.controller.settings import Settings
from sextant.resources import GROUP, VERSION

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


def test_the_default_settings_watch_the_low_rate_kinds_with_kopf():
    assert Settings().kopf_watches is True


# ------------------------------------------------------------------------------------------------ kopf's watch failures
def test_the_seam_sextant_contains_kopfs_watch_failures_at_is_where_it_was():
    """If this fails after a kopf upgrade, kopf's watchers no longer get their streams the way kopfapp.WatchGuard
    wraps (docs/operator.md, "Containing kopf's watch failures"): find the new seam before turning them on."""
    from kopf._cogs.clients import watching
    from kopf._core.reactor import queueing

    assert kopfapp.seam_in_place()
    assert "infinite_watch" in queueing.watcher.__code__.co_names  # the watcher streams through infinite_watch
    assert "continuous_watch" in watching.infinite_watch.__code__.co_names  # which restarts continuous_watch
    assert "reconnect_backoff" in watching.infinite_watch.__code__.co_names  # after a pause, for ever


def fake_stream(outcomes: list):
    """A continuous_watch of kopf's in miniature: each call lists (LISTED), brings one event, then ends as the next
    outcome says (an exception, or None: the server closed the watch)."""
    calls = []

    async def continuous_watch(*, settings, resource, namespace, operator_pause_waiter):
        from kopf._cogs.clients import watching

        calls.append(namespace)
        outcome = outcomes[len(calls) - 1]
        yield watching.Bookmark.LISTED
        yield {"type": "MODIFIED", "object": {"metadata": {"name": f"s{len(calls)}", "resourceVersion": "1"}}}
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome is not None:
            yield outcome  # an event to check, then the stream ends

    return continuous_watch, calls


def run_infinite_watch(monkeypatch, outcomes: list, feeds: dict[str, Feed]) -> tuple[list, list, list[float]]:
    """kopf's own infinite_watch over a fake continuous_watch, contained by Sextant's guard as in the operator."""
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import references

    fake, calls = fake_stream(outcomes)
    monkeypatch.setattr(watching, "continuous_watch", fake)
    assert kopfapp.contain_watch_failures() and watching.continuous_watch is not fake
    waits: list[float] = []

    async def sleep(delay: float) -> None:
        waits.append(delay)

    async def main() -> list:
        kopfapp._GUARD.set(kopfapp.WatchGuard(feeds, sleep=sleep))
        settings = kopfapp.operator_settings()
        settings.watching.reconnect_backoff = 0
        resource = references.Resource(group=GROUP, version=VERSION, plural="schedules", namespaced=True)
        return [item async for item in watching.infinite_watch(settings=settings, resource=resource,
                                                                namespace="ns", _iterations=len(outcomes))]

    return asyncio.run(main()), calls, waits


def failures(kind: str) -> float:
    from sextant.kube import metrics

    return sum(sample.value for metric in metrics.KOPF_WATCH_FAILURES.collect() for sample in metric.samples
               if sample.name.endswith("_total") and sample.labels["kind"] == kind)


def test_kopfs_watch_failures_end_one_stream_and_kopf_lists_again(monkeypatch):
    """(a) a malformed watch line, (b) a watch answered 410, (c) an object too deep to decode, and an event kopf's
    watcher could not key: each ends one stream, kopf lists again, every event of every list comes through."""
    from kopf._cogs.clients import errors, watching

    gone = errors.APIClientError({"code": 410, "message": "too old resource version"}, status=410, headers={})
    outcomes = [json.JSONDecodeError("Expecting value", "{", 1), gone, RecursionError("maximum recursion depth"),
                {"type": "ADDED", "object": {}}, None]
    feed = Feed("schedules", lambda kind, obj: None)
    before = failures("schedules")
    items, calls, waits = run_infinite_watch(monkeypatch, outcomes, {"schedules": feed})
    assert calls == ["ns"] * 5  # listed again after each failure, and after the server's own end
    names = [i["object"]["metadata"]["name"] for i in items if isinstance(i, dict)]
    assert names == ["s1", "s2", "s3", "s4", "s5"]
    assert sum(1 for i in items if i is watching.Bookmark.LISTED) == 5
    assert failures("schedules") - before == 4
    assert len(waits) == 4 and all(0 < w <= 3.0 for w in waits)  # the informers' backoff, never a hot loop
    assert feed.healthy  # the last list is in


class FakeAPIServer:
    """Just enough of an API server for kopf: discovery, lists, and watches of Schedules that go wrong in turn."""

    def __init__(self, schedule_watches: list) -> None:
        self.schedule_watches = schedule_watches  # per watch: bytes to stream, or an HTTP status to answer
        self.lists: dict[str, int] = {}
        self.watches: dict[str, int] = {}

    def app(self):
        from aiohttp import web

        api = "/apis/sextant.dev/v1alpha1"

        def resource(name: str, kind: str, namespaced: bool = True) -> dict:
            return {"name": name, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                    "verbs": ["get", "list", "watch"]}

        async def discovery(request):
            return web.json_response({
                "/api": {"versions": ["v1"]},
                "/api/v1": {"resources": [resource("namespaces", "Namespace", False), resource("events", "Event")]},
                "/apis": {"groups": [{"name": "sextant.dev", "versions": [{"version": "v1alpha1"}],
                                      "preferredVersion": {"version": "v1alpha1"}}]},
                api: {"resources": [resource("queues", "Queue"), resource("handlers", "Handler"),
                                    resource("schedules", "Schedule")]},
            }[request.path])

        async def objects(request):
            plural = request.match_info["plural"]
            if request.query.get("watch") != "true":
                self.lists[plural] = self.lists.get(plural, 0) + 1
                return web.json_response({"apiVersion": "sextant.dev/v1alpha1", "kind": "List", "items": [],
                                          "metadata": {"resourceVersion": "10"}})
            n = self.watches[plural] = self.watches.get(plural, 0) + 1
            script = self.schedule_watches[n - 1] if plural == "schedules" and n <= len(self.schedule_watches) else b""
            if isinstance(script, int):
                return web.json_response({"kind": "Status", "code": script, "message": "too old resource version"},
                                         status=script)
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            await response.write(script)
            await asyncio.sleep(3600)  # held open, as a quiet watch is
            return response

        app = web.Application()
        for path in ("/api", "/api/v1", "/apis", api):
            app.router.add_get(path, discovery)
        app.router.add_get(api + "/namespaces/ns/{plural}", objects)
        return app


def test_kopfs_real_watch_survives_each_fault_and_the_next_change_arrives():
    """kopf.operator, as Sextant runs it, against an API server whose Schedule watches bring in turn (a) a malformed
    line, (b) a 410 status, (c) an object too deep to decode and an event without metadata: kopf ended its process on
    each; now each ends one stream, kopf lists again, and the event of the fifth watch reaches the handler."""
    from aiohttp import web

    deep = b'{"type": "ADDED", "object": {"metadata": {"name": "deep"}, "spec": ' + b'{"a": ' * 20_000 + b"{}" \
        + b"}" * 20_001 + b"}\n"
    after = json.dumps({"type": "ADDED", "object": {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule",
                                                    "metadata": {"name": "after", "namespace": "ns", "uid": "u1",
                                                                 "resourceVersion": "11"}}}).encode() + b"\n"
    server = FakeAPIServer([b'{"type":"MODIFIED","object":{"metadata":\n', 410, deep,
                            b'{"type": "MODIFIED", "object": {}}\n', after])
    seen: list[str] = []
    feed = Feed("schedules", lambda kind, obj: None)
    before = failures("schedules")

    async def main() -> None:
        runner = web.AppRunner(server.app(), handler_cancellation=True)  # no handler outlives its watch
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        stop = asyncio.Event()
        registry = kopf.OperatorRegistry()

        @kopf.on.login(registry=registry)
        async def login(**_):
            return kopf.ConnectionInfo(server=url)

        @kopf.on.event("sextant.dev", "v1alpha1", "schedules", registry=registry)
        async def on_event(event, **_):
            seen.append(event["object"]["metadata"]["name"])
            stop.set()

        assert kopfapp.contain_watch_failures()

        async def no_wait(_: float) -> None:
            await asyncio.sleep(0)

        kopfapp._GUARD.set(kopfapp.WatchGuard({"schedules": feed}, sleep=no_wait))
        try:
            await asyncio.wait_for(kopf.operator(registry=registry, settings=kopfapp.operator_settings(),
                                                 standalone=True, namespaces=["ns"], stop_flag=stop), 60)
        finally:
            await runner.cleanup()

    asyncio.run(main())
    assert seen == ["after"]
    assert server.watches["schedules"] == 5 and server.lists["schedules"] == 5  # listed again after each fault
    assert failures("schedules") - before == 4
    assert feed.healthy


def test_a_kopf_watch_is_not_live_from_its_start_or_a_failure_until_it_has_listed():
    feed = Feed("queues", lambda kind, obj: None)
    assert feed.healthy  # kopf watches nothing of it (--no-kopf-watches, or a kind kopf's discovery did not find)
    feed.kopf_started("a")
    feed.kopf_started("b")
    assert not feed.healthy and feed.unhealthy() == {"a": "its first list is not in", "b": "its first list is not in"}
    feed.kopf_listed("a")
    feed.kopf_listed("b")
    assert feed.healthy
    feed.kopf_failed("b", "JSONDecodeError: Expecting value")
    feed.kopf_started("b")  # kopf lists again: still the failure until the list is in
    assert not feed.healthy and feed.unhealthy() == {"b": "JSONDecodeError: Expecting value"}
    feed.kopf_listed("b")
    assert feed.healthy


def test_the_guard_marks_kopfs_watch_not_live_while_it_lists():
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import references

    feed = Feed("schedules", lambda kind, obj: None)
    health: list[bool] = []

    async def listing(**_):
        yield {"type": None, "object": {"metadata": {"name": "s1"}}}
        yield watching.Bookmark.LISTED

    async def main() -> None:
        guard = kopfapp.WatchGuard({"schedules": feed})
        resource = references.Resource(group=GROUP, version=VERSION, plural="schedules", namespaced=True)
        async for _ in guard.stream(listing, resource=resource, namespace="ns"):
            health.append(feed.healthy)

    asyncio.run(main())
    assert health == [False, True]


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
    from sextant.__main__ import build_parser
    from sextant.controller.command import settings as _settings

    conn = kubeconfig.Connection(server="http://127.0.0.1:1", ssl_context=False)
    args = build_parser().parse_args(["operator", "--watch-namespace", "a", "--watch-namespace", "b"])
    settings = _settings(args, conn)
    assert (settings.kopf_watches, settings.kopf_liveness) == (True, None)  # kopf's watches are on by default
    assert kopfapp.namespace_scope(settings.namespaces) == {"namespaces": ["a", "b"], "clusterwide": False}
    args = build_parser().parse_args(["operator", "--no-kopf-watches", "--kopf-liveness",
                                      "http://0.0.0.0:8081/healthz"])
    settings = _settings(args, conn)
    assert (settings.kopf_watches, settings.kopf_liveness) == (False, "http://0.0.0.0:8081/healthz")
    assert kopfapp.namespace_scope(settings.namespaces)["clusterwide"] is True
    assert _settings(build_parser().parse_args(["operator", "--kopf-watches"]), conn).kopf_watches is True
    assert settings.record_queued_after == timedelta(seconds=5)
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
    assert "kopf operator" in text and "Queue, Handler and Schedule" in text and "--no-kopf-watches" in text
