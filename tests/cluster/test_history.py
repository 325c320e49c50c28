"""History readable everywhere a job is (issue 42, item 3): jobs are created, some finish (their status written
straight to the status subresource: no operator is needed to make a job finished, and none runs here, so that the
archive is the only writer of history), their records are written to a real archive (a SQLite file, and a database
on the harness's PostgreSQL server), their Job objects deleted; then the HTTP API (served in-process with that
archive: the operator opening its archive is the write side's part), the Python client and the CLI read them
back, live and archived as one list, an archived job marked archived."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from sextant.archive.record import record_of
from sextant.archive.store import Archive
from sextant.client import Client
from sextant.history import History
from sextant.archive import merged
from sextant.http.api import Api
from sextant.kube import kubeconfig
from sextant.kube.client import Kube
from sextant.resources.common import format_time
from tests.harness import wait_for

from .plugin_support import grant, sextant
from .support import free_port, get_json
from .test_dashboard import DashboardProcess

FINISHED_AT = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=30)



@pytest.fixture(params=["sqlite", "postgresql"])
def dsn(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'archive.sqlite'}"
    return request.getfixturevalue("postgres").create_database()


class Served:
    """The /v2 API with an archive, on an event loop of its own thread; `run` runs a coroutine there."""

    def __init__(self, kubeconfig_path: Path, dsn: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.archive: Archive = self.run(Archive.open(dsn, migrate=True))
        self.kube = Kube(kubeconfig.load(str(kubeconfig_path)), user_agent="sextant-api")
        self.runner = self.run(self._serve())

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(60)

    async def _serve(self) -> web.AppRunner:
        app = web.Application()
        Api(self.kube, archive=lambda: self.archive, max_in_flight=16, request_timeout=30).install(app)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        return runner

    def close(self) -> None:
        self.run(self.runner.cleanup())
        self.run(self.kube.close())
        self.run(self.archive.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def served(cluster, namespace, crds, dsn) -> Iterator[Served]:
    api = Served(cluster.kubeconfig, dsn)
    try:
        yield api
    finally:
        api.close()


def finish(cluster: Any, namespace: str, name: str, at: datetime, error: str | None = None) -> dict[str, Any]:
    """Write a finished status, as the operator would have: one attempt, ended at `at`."""
    start = at - timedelta(seconds=2)
    attempt = {"attempt": 1, "sequence": 1, "pod": f"{name}-1", "startedAt": format_time(start, precise=False),
               "finishedAt": format_time(at, precise=False), "result": "failed" if error else "succeeded",
               **({"message": error, "reason": "Error", "exitCode": 1} if error else {"exitCode": 0})}
    status = {"state": "dead" if error else "succeeded", "attempt": 1, "sequence": 1, "attempts": [attempt],
              "finishedAt": format_time(at, precise=False), "queuedAt": format_time(start, precise=False)}
    cluster.kubectl("patch", "-n", namespace, "jobs.sextant.dev", name, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}))
    return get_json(cluster, namespace, "jobs.sextant.dev", name)


def test_live_and_archived_jobs_read_back_through_api_client_and_cli(cluster, namespace, served, dsn, tmp_path):
    token = grant(cluster, namespace, "history-user")
    http = httpx.Client(timeout=30, headers={"Authorization": f"Bearer {token}"})

    def call(method: str, path: str, **kwargs: Any) -> httpx.Response:
        params = {"namespace": namespace, **kwargs.pop("params", {})}
        return http.request(method, served.url + path, params=params, **kwargs)

    def create(handler: str, **extra: Any) -> dict[str, Any]:
        # The API server answers 429 while the fresh CRDs' storage initializes (nothing done): until it is ready.
        def taken() -> httpx.Response | None:
            resp = call("POST", "/v2/jobs", json={"queue": "q", "handler": handler, "payload": {"h": handler},
                                                  **extra})
            return None if "answered 429" in resp.text else resp

        resp = wait_for(taken, 60, message="the API server to take jobs")
        assert resp.status_code == 201, resp.text
        return resp.json()

    old = create("a", idempotency_key="order-1")  # finished, archived, deleted
    gone = create("b")  # dead, archived, deleted
    done = create("c")  # finished, still live, not archived yet
    waiting = create("d")  # queued, live
    cluster.kubectl("label", "-n", namespace, "jobs.sextant.dev", old["name"], "team=mail")
    raws = [finish(cluster, namespace, old["name"], FINISHED_AT),
            finish(cluster, namespace, gone["name"], FINISHED_AT + timedelta(minutes=1), error="boom"),
            finish(cluster, namespace, done["name"], FINISHED_AT + timedelta(minutes=2))]
    served.run(served.archive.write([record_of(raw, 65536) for raw in raws[:2]]))
    cluster.kubectl("delete", "-n", namespace, "jobs.sextant.dev", old["name"], gone["name"])
    wait_for(lambda: len(cluster.kubectl("get", "-n", namespace, "jobs.sextant.dev", "-o", "name").stdout.split())
             == 2, 30, message="the archived jobs' objects to be deleted")

    # GET /v2/jobs/{id}: a job no longer live is read from the archive, and says so.
    got = call("GET", f"/v2/jobs/{old['id']}")
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["archived"] is True and body["state"] == "succeeded" and body["payload"] == {"h": "a"}
    assert body["idempotency_key"] == "order-1" and body["attempts"][0]["result"] == "succeeded"
    assert call("GET", f"/v2/jobs/{done['id']}").json()["archived"] is False
    assert call("GET", "/v2/jobs/job_zzzzzzzz").status_code == 404

    # GET /v2/jobs: live first (by id), then archived, newest first; filters apply to both.
    def listed(**params: Any) -> list[tuple[str, bool]]:
        items, cursor = [], None
        while True:
            resp = call("GET", "/v2/jobs", params={**params, **({"continue": cursor} if cursor else {})})
            assert resp.status_code == 200, resp.text
            items += [(j["id"], j["archived"]) for j in resp.json()["items"]]
            cursor = resp.json()["continue"]
            if cursor is None:
                return items

    live = sorted([done["id"], waiting["id"]])
    assert listed() == [(i, False) for i in live] + [(gone["id"], True), (old["id"], True)]
    assert listed(limit="1") == listed()  # one at a time, across the live part and the archive
    assert listed(state="dead") == [(gone["id"], True)]
    assert listed(label="team=mail") == [(old["id"], True)]
    since = format_time(FINISHED_AT + timedelta(seconds=30), precise=False)
    assert listed(since=since) == [(i, False) for i in live] + [(gone["id"], True)]  # unfinished: after any
    assert listed(until=since) == [(old["id"], True)]
    for params, field in (({"continue": "bm90LWEtY3Vyc29y"}, "continue"), ({"since": "yesterday"}, "since"),
                          ({"since": "1h", "until": "2h"}, "until"), ({"label": "team"}, "label")):
        resp = call("GET", "/v2/jobs", params=params)
        assert resp.status_code == 422 and resp.json()["error"]["field"] == field, resp.text

    # An idempotency key returns its first job after that job left etcd; another spec with it is refused.
    again = call("POST", "/v2/jobs", json={"queue": "q", "handler": "a", "payload": {"h": "a"},
                                           "idempotency_key": "order-1"})
    assert again.status_code == 200 and again.json()["id"] == old["id"] and again.json()["archived"] is True
    assert again.headers["Idempotent-Replayed"] == "true"
    other = call("POST", "/v2/jobs", json={"queue": "q", "handler": "x", "idempotency_key": "order-1"})
    assert other.status_code == 409 and other.json()["error"]["field"] == "handler"

    # The Python client: the live job, else the archived one; the same merged pages.
    client = Client(kubeconfig.load(str(cluster.kubeconfig)))
    history = History(client, dsn)
    try:
        assert history.get_job(namespace, old["id"])["archived"] is True
        assert "archived" not in history.get_job(namespace, done["id"])
        items, cursor = history.list_page(namespace, merged.ListFilters(state="dead"), None, 10,
                                          datetime.now(timezone.utc))
        assert [(i["metadata"]["name"], i.get("archived")) for i in items] == [(gone["name"], True)]
        assert cursor is None
    finally:
        history.close()
        client.close()

    # The CLI: with --archive or SEXTANT_ARCHIVE_DSN, archived jobs are listed and inspected, marked archived.
    listing = sextant(cluster, "jobs", "list", "-n", namespace, "--archive", dsn)
    assert listing.returncode == 0, listing.stderr
    lines = {line.split()[0]: line for line in listing.stdout.splitlines()[1:]}
    assert "(archived)" in lines[old["id"]] and "dead (archived)" in lines[gone["id"]]
    assert "(archived)" not in lines[done["id"]]
    page = sextant(cluster, "jobs", "list", "-n", namespace, "--archive", dsn, "--limit", "3", "-o", "json")
    assert page.returncode == 0 and len(json.loads(page.stdout)["items"]) == 3
    more = page.stderr.split("--continue ")[1].split()[0]
    rest = sextant(cluster, "jobs", "list", "-n", namespace, "--archive", dsn, "--continue", more, "-o", "json")
    assert [j["metadata"]["name"] for j in json.loads(rest.stdout)["items"]] == [old["name"]]
    env = {**cluster.env, "SEXTANT_ARCHIVE_DSN": dsn}
    shown = sextant(cluster, "inspect", old["id"], "-n", namespace, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "succeeded (archived)" in shown.stdout and "read from the archive" in shown.stdout
    made = sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "q", "--handler", "a", "--payload",
                   '{"h": "a"}', "--idempotency-key", "order-1", env=env)
    assert made.returncode == 0 and made.stdout.strip() == old["id"], made.stderr
    bad = sextant(cluster, "jobs", "list", "-n", namespace, "--archive", dsn, "--since", "soon")
    assert bad.returncode == 2 and "--since" in bad.stderr

    # The dashboard: an Archived section in the jobs view, and an archived job's page, marked, without actions.
    board = DashboardProcess(cluster.kubeconfig, namespace, tmp_path, "--archive", dsn)
    try:
        with httpx.Client(timeout=30, follow_redirects=True) as browser:
            browser.get(board.printed)  # the secret becomes a cookie
            view = browser.get(board.url + "jobs").text
            archived_part = view.split("<h2>Archived</h2>")[1]
            assert old["id"] in archived_part and gone["id"] in archived_part and done["id"] not in archived_part
            assert "succeeded (archived)" in archived_part
            dead = browser.get(board.url + "jobs", params={"state": "dead"}).text.split("<h2>Archived</h2>")[1]
            assert gone["id"] in dead and old["id"] not in dead
            one = browser.get(board.url + f"jobs/{namespace}/{old['id']}").text
            assert 'id="job-archived"' in one and "/retry" not in one and "order-1" in one
    finally:
        board.stop()
    plain_board = DashboardProcess(cluster.kubeconfig, namespace, tmp_path)
    try:
        with httpx.Client(timeout=30, follow_redirects=True) as browser:
            browser.get(plain_board.printed)
            assert "archive is not configured" in browser.get(plain_board.url + "jobs").text
    finally:
        plain_board.stop()

    # Without an archive: live jobs only, and a job that left etcd is not found, saying why.
    plain = sextant(cluster, "inspect", old["id"], "-n", namespace)
    assert plain.returncode == 1 and "archive is not configured" in plain.stderr
    live_only = sextant(cluster, "jobs", "list", "-n", namespace, "-o", "json")
    assert sorted(j["metadata"]["name"] for j in json.loads(live_only.stdout)["items"]) == \
        sorted([done["name"], waiting["name"]])
