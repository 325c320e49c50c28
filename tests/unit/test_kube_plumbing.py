"""The Kubernetes plumbing written once: the API path builder (resources/contract), the Lease MicroTime
(resources/common.format_time and parse_time), the clock (kube/clock) and the typed errors of both clients
(NotFound, Conflict, Gone), raised by Kube.request and the watch against a tiny API server on 127.0.0.1."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from aiohttp import web

from sextant.client import Client
from sextant.kube.client import ApiError, Conflict, Gone, Kube, NotFound, NotLeader
from sextant.kube.clock import utcnow
from sextant.kube.kubeconfig import Connection
from sextant.resources import contract
from sextant.resources.common import format_time, parse_time

# --- paths -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("built, expected", [
    (contract.path("v1", "pods"), "/api/v1/pods"),
    (contract.path("v1", "pods", "ns", "p", "log"), "/api/v1/namespaces/ns/pods/p/log"),
    (contract.path("sextant.dev/v1alpha1", "jobs"), "/apis/sextant.dev/v1alpha1/jobs"),
    (contract.path("sextant.dev/v1alpha1", "jobs", None, None, None), "/apis/sextant.dev/v1alpha1/jobs"),
    (contract.jobs_path(), "/apis/sextant.dev/v1alpha1/jobs"),
    (contract.jobs_path("ns"), "/apis/sextant.dev/v1alpha1/namespaces/ns/jobs"),
    (contract.jobs_path("ns", "job-a"), "/apis/sextant.dev/v1alpha1/namespaces/ns/jobs/job-a"),
    (contract.jobs_path("ns", "job-a", "status"), "/apis/sextant.dev/v1alpha1/namespaces/ns/jobs/job-a/status"),
    (contract.queues_path("ns", "q", "status"), "/apis/sextant.dev/v1alpha1/namespaces/ns/queues/q/status"),
    (contract.handlers_path("ns"), "/apis/sextant.dev/v1alpha1/namespaces/ns/handlers"),
    (contract.schedules_path(None), "/apis/sextant.dev/v1alpha1/schedules"),
    (contract.schedules_path("ns", "nightly"), "/apis/sextant.dev/v1alpha1/namespaces/ns/schedules/nightly"),
    (contract.pods_path("ns", "job-a-1"), "/api/v1/namespaces/ns/pods/job-a-1"),
    (contract.leases_path(), "/apis/coordination.k8s.io/v1/leases"),
    (contract.leases_path("ns", "op"), "/apis/coordination.k8s.io/v1/namespaces/ns/leases/op"),
    (contract.events_path("ns"), "/api/v1/namespaces/ns/events"),
    (contract.events_path(), "/api/v1/events"),
    (contract.nodes_path("n1", "status"), "/api/v1/nodes/n1/status"),
    (contract.crds_path("jobs.sextant.dev"),
     "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobs.sextant.dev"),
    (contract.TOKEN_REVIEWS_PATH, "/apis/authentication.k8s.io/v1/tokenreviews"),
    (contract.ACCESS_REVIEWS_PATH, "/apis/authorization.k8s.io/v1/subjectaccessreviews"),
])
def test_the_path_builder(built: str, expected: str):
    assert built == expected


# --- time --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("moment, text", [
    (datetime(2026, 12, 1, 10, 0, 0, tzinfo=timezone.utc), "2026-12-01T10:00:00.000000Z"),
    (datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=timezone.utc), "2026-12-01T10:00:00.123456Z"),
    (datetime(2026, 12, 1, 11, 0, 0, 5, tzinfo=timezone(timedelta(hours=1))), "2026-12-01T10:00:00.000005Z"),
])
def test_a_lease_micro_time_round_trips(moment: datetime, text: str):
    assert format_time(moment) == text == moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert parse_time(text) == moment


def test_the_clock_is_aware_and_in_utc():
    now = utcnow()
    assert now.tzinfo is timezone.utc and abs(now - datetime.now(timezone.utc)) < timedelta(seconds=5)


# --- typed errors ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("status, kind", [(404, NotFound), (409, Conflict), (410, Gone), (403, ApiError),
                                          (0, ApiError)])
def test_an_api_error_is_of_the_class_of_its_status(status: int, kind: type[ApiError]):
    error = ApiError(status, {"reason": "R", "message": "m"}, "GET", "/x")
    assert type(error) is kind and error.status == status and error.message == "m" and error.reason == "R"
    assert str(error) == f"GET /x: {status} R: m"


def test_not_leader_stays_not_leader():
    error = NotLeader("PATCH", "/x")
    assert type(error) is NotLeader and error.status == 503


CODES = {"missing": (404, "NotFound"), "taken": (409, "AlreadyExists"), "expired": (410, "Expired"),
         "forbidden": (403, "Forbidden")}


async def _status(request: web.Request) -> web.Response:
    code, reason = CODES[request.match_info["what"]]
    return web.json_response({"kind": "Status", "code": code, "reason": reason, "message": f"{reason} here"},
                             status=code)


async def _watch_error(_: web.Request) -> web.Response:
    event = b'{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "old"}}\n'
    return web.Response(body=event, content_type="application/json")


@contextlib.asynccontextmanager
async def api_server() -> AsyncIterator[Connection]:
    """The API server's error answers, on 127.0.0.1, in the test's own event loop."""
    app = web.Application()
    app.router.add_route("*", "/status/{what}", _status)
    app.router.add_get("/watch-error", _watch_error)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Connection(server=f"http://127.0.0.1:{port}", ssl_context=False)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("what, kind", [("missing", NotFound), ("taken", Conflict), ("expired", Gone),
                                        ("forbidden", ApiError)])
async def test_kube_request_raises_the_typed_error(what: str, kind: type[ApiError]):
    async with api_server() as conn, Kube(conn, attempts=1) as kube:
        with pytest.raises(ApiError) as caught:
            await kube.request("POST", f"/status/{what}", body={})
    assert type(caught.value) is kind and caught.value.status == CODES[what][0]
    assert caught.value.reason == CODES[what][1] and caught.value.message == f"{CODES[what][1]} here"


@pytest.mark.parametrize("path", ["/status/expired", "/watch-error"])
async def test_the_watch_raises_gone_for_an_answer_or_an_event_of_410(path: str):
    async with api_server() as conn, Kube(conn, attempts=1) as kube:
        with pytest.raises(Gone):
            async for _ in kube.watch(path, "1"):
                pass


@pytest.mark.parametrize("what, kind", [("missing", NotFound), ("taken", Conflict), ("expired", Gone),
                                        ("forbidden", ApiError)])
def test_the_sync_client_raises_the_same_errors(what: str, kind: type[ApiError]):
    code, reason = CODES[what]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(code, json={"kind": "Status", "code": code, "reason": reason, "message": "said"})

    client = Client(Connection(server="https://api.example", ssl_context=False))
    client.http = httpx.Client(base_url="https://api.example", transport=httpx.MockTransport(answer))
    with pytest.raises(ApiError) as caught:
        client.get_job("ns", "job-a")
    assert type(caught.value) is kind and caught.value.message == "said" and caught.value.reason == reason
    assert str(caught.value).startswith("GET /apis/sextant.dev/v1alpha1/namespaces/ns/jobs/job-a: ")
