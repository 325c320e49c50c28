"""Idempotency keys: the window (and its test setting), who holds a key now, the field selector's escaping, when a
keyed job's claim ends, and which fields make a create with a held key another job (refused)."""

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sextant.lifecycle import idempotency as I
from sextant.client import Client, KeyConflict, Refused
from sextant.kube.kubeconfig import Connection
from sextant.resources import inputs
from sextant.resources.contract import ENV_IDEMPOTENCY_WINDOW

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def test_the_window_is_24_hours_unless_set():
    assert inputs.idempotency_window({}) == I.WINDOW == timedelta(hours=24)
    assert inputs.idempotency_window({ENV_IDEMPOTENCY_WINDOW: "5s"}) == timedelta(seconds=5)
    five = timedelta(seconds=5)
    assert I.still_claimed(T0, T0 + timedelta(seconds=4.9), five) and not I.still_claimed(T0, T0 + five, five)
    assert inputs.idempotency_window({ENV_IDEMPOTENCY_WINDOW: ""}) == timedelta(hours=24)


@pytest.mark.parametrize("text", ["soon", "0s", "-5s", "5"])
def test_a_bad_window_is_refused_naming_the_variable(text):
    with pytest.raises(ValueError, match=ENV_IDEMPOTENCY_WINDOW):
        inputs.idempotency_window({ENV_IDEMPOTENCY_WINDOW: text})


def test_the_client_reads_the_window_once_from_the_environment(monkeypatch):
    monkeypatch.setenv(ENV_IDEMPOTENCY_WINDOW, "90s")
    assert Client(Connection(server="https://api.example", ssl_context=False)).idempotency_window == timedelta(seconds=90)


def test_the_holder_is_the_first_use_while_its_claim_runs():
    first, second = (T0, False, "job-first"), (T0 + timedelta(hours=1), True, "job-second")
    assert I.holder([second, first], T0 + timedelta(hours=2)) == "job-first"
    assert I.holder([first, second], T0 + timedelta(hours=24)) is None  # ran out; the second was a duplicate
    third = (T0 + timedelta(hours=25), True, "job-third")  # the first use after the claim ran out holds it anew
    assert I.holder([first, second, third], T0 + timedelta(hours=26)) == "job-third"
    assert I.holder([], T0) is None


def test_equal_creation_times_prefer_the_job_the_operator_already_let_run():
    let_run, fresh = (T0, False, "job-zzz"), (T0, True, "job-aaa")
    assert I.holder([fresh, let_run], T0) == "job-zzz"
    assert I.holder([(T0, True, "job-b"), (T0, True, "job-a")], T0) == "job-a"  # then by name


@given(st.lists(st.tuples(st.integers(0, 100), st.booleans(), st.sampled_from("abcdefgh")), min_size=1,
                unique_by=lambda t: t[2]), st.integers(0, 200))
def test_the_holder_is_the_job_that_claimant_does_not_call_a_duplicate(rows, at):
    # The operator (claimant) and the create paths (holder) must agree on who holds a key.
    window = I.WINDOW
    jobs = [(T0 + window * (minutes / 40), undecided, f"job-{name}") for minutes, undecided, name in rows]
    now = T0 + window * (at / 40)
    held = I.holder([j for j in jobs if j[0] <= now], now)
    if held is not None:
        created = next(j[0] for j in jobs if j[2] == held)
        assert I.claimant(jobs, created, held) is None
        assert I.still_claimed(created, now)
        for other in jobs:  # a later job inside the claim duplicates the holder
            if other[2] != held and created <= other[0] <= now and I.still_claimed(created, other[0]):
                assert I.claimant(jobs, other[0], other[2]) is not None


def test_undecided_means_no_state_and_no_attempt_yet_or_a_duplicate():
    assert I.undecided(None, started=False) and I.undecided({}, started=False)
    assert I.undecided({"state": "cancelled", "duplicateOf": "job-a"}, started=False)
    assert not I.undecided({"state": "queued", "queuedAt": "2026-12-07T10:00:00Z", "observedGeneration": 1},
                           started=False)
    # the CRD's default (a job nobody has written reads queued) is no decision
    assert I.undecided({"state": "queued", "observedGeneration": 0}, started=False)
    # admitted on first sight: its pod exists, its state is written when the pod starts
    assert not I.undecided({}, started=True)


@pytest.mark.parametrize("key, escaped", [("receipt-42", "receipt-42"), ("a,b=c", "a\\,b\\=c"),
                                          ("back\\slash", "back\\\\slash"), ("x!=y", "x!\\=y")])
def test_a_key_is_escaped_for_a_field_selector(key, escaped):
    assert inputs.selector_value(key) == escaped


def test_a_keyed_jobs_claim_ends_a_window_after_its_creation():
    job = {"metadata": {"creationTimestamp": "2026-12-01T12:00:00Z"}, "spec": {"idempotencyKey": "k"}}
    assert I.claim_ends(job) == T0 + timedelta(hours=24)
    assert I.claim_ends(job, timedelta(seconds=90)) == T0 + timedelta(seconds=90)
    assert I.claim_ends({**job, "spec": {}}) is None
    assert I.claim_ends({"metadata": {"creationTimestamp": "yesterday"}, "spec": {"idempotencyKey": "k"}}) is None


# --- the client's lookup, against a scripted API server (httpx.MockTransport): the fallbacks for older CRDs and roles


def scripted_client(answer):
    client = Client(Connection(server="https://api.example", ssl_context=False))
    client.http = httpx.Client(base_url="https://api.example", transport=httpx.MockTransport(answer))
    return client


def listed(*items):
    return {"kind": "JobList", "metadata": {"resourceVersion": "7"}, "items": list(items)}


def raw_job(name, key, created="2026-12-01T11:00:00Z", **status):
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": {"idempotencyKey": key},
            "status": status}


def test_the_holder_is_asked_for_by_field_selector():
    seen = []

    def answer(request):
        seen.append(request.url.params.get("fieldSelector"))
        return httpx.Response(200, json=listed(raw_job("job-applied", "a,b", state="queued")))

    holder = scripted_client(answer).key_holder("shop", "a,b", T0)
    assert holder["metadata"]["name"] == "job-applied" and seen == ["spec.idempotencyKey=a\\,b"]


def test_without_the_selectable_field_every_job_is_read_and_filtered():
    def answer(request):
        if request.url.params.get("fieldSelector"):
            return httpx.Response(400, json={"message": 'field label not supported: "spec.idempotencyKey"'})
        return httpx.Response(200, json=listed(raw_job("job-other", "k2"), raw_job("job-mine", "k")))

    assert scripted_client(answer).key_holder("shop", "k", T0)["metadata"]["name"] == "job-mine"


def test_without_the_right_to_list_the_keyed_name_decides_alone():
    posted = []

    def answer(request):
        if request.method == "GET":
            return httpx.Response(403, json={"message": "forbidden", "reason": "Forbidden"})
        posted.append(request)
        return httpx.Response(201, json={"metadata": {"name": I.keyed_name("shop", "k")}})

    job, created = scripted_client(answer).create_job("shop", queue="q", handler="h", idempotency_key="k", now=T0)
    assert created and job["metadata"]["name"] == I.keyed_name("shop", "k") and len(posted) == 1


def test_an_expired_claim_is_no_holder():
    def answer(request):
        return httpx.Response(200, json=listed(raw_job("job-old", "k", created="2026-11-30T11:00:00Z")))

    assert scripted_client(answer).key_holder("shop", "k", T0) is None


def test_client_and_operator_name_the_same_holder_when_a_started_job_ties_with_a_later_name():
    # Two jobs with one key created in the same second; job-zzz's pod was created on first sight (the operator let it
    # run; its state is written when the pod starts), job-aaa is new. The operator keeps job-zzz; the client must
    # return job-zzz too (on the main before the layout change it returned job-aaa: only the view counted the pod).
    from sextant.controller.view import View

    created = "2026-12-01T12:00:00Z"
    zzz, aaa = raw_job("job-zzz", "k", created), raw_job("job-aaa", "k", created)

    def answer(request):
        if request.url.path.endswith("/pods"):
            started = request.url.params.get("labelSelector") == "sextant.dev/job=job-zzz"
            return httpx.Response(200, json={"kind": "PodList", "metadata": {}, "items": [{}] if started else []})
        return httpx.Response(200, json=listed(zzz, aaa))

    assert scripted_client(answer).key_holder("shop", "k", T0)["metadata"]["name"] == "job-zzz"
    view = View(now=lambda: T0)
    for name in ("job-zzz", "job-aaa"):
        view.upsert_job({"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
                         "metadata": {"name": name, "namespace": "shop", "uid": name, "resourceVersion": "1",
                                      "creationTimestamp": created},
                         "spec": {"queue": "q", "handler": "h", "idempotencyKey": "k"}})
    view.pods[("shop", "job-zzz")] = {1: SimpleNamespace(owner_uid="job-zzz")}  # the pod created on first sight
    assert not view._undecided(("shop", "job-zzz")) and view._undecided(("shop", "job-aaa"))


HELD = {"queue": "emails", "handler": "send-receipt", "payload": {"orderId": 42, "lines": [1, 2.5]},
        "idempotencyKey": "receipt-42", "runAt": "2026-12-01T12:00:00Z", "priority": 3}


@pytest.mark.parametrize("change, named", [
    ({}, []),
    ({"queue": "sms"}, ["queue"]),
    ({"handler": "send-sms"}, ["handler"]),
    ({"payload": {"orderId": 43, "lines": [1, 2.5]}}, ["payload"]),
    ({"payload": {"orderId": 42}}, ["payload"]),  # a key missing
    ({"payload": {"orderId": 42, "lines": [1, 2.5], "extra": None}}, ["payload"]),  # a key more
    ({"payload": {"orderId": True, "lines": [1, 2.5]}}, ["payload"]),  # JSON: true is not 1 ...
    ({"payload": {"orderId": 42.0, "lines": [1.0, 2.5]}}, []),  # ... while 42 is 42.0 (the API server may write it)
    ({"payload": {"orderId": "42", "lines": [1, 2.5]}}, ["payload"]),
    ({"payload": {"orderId": 42, "lines": [2.5, 1]}}, ["payload"]),  # a list's order counts
    ({"queue": "sms", "payload": {}}, ["queue", "payload"]),
    ({"queue": "sms", "handler": "send-sms", "payload": {}}, ["queue", "handler", "payload"]),
    # What says when or in what order, not what: not compared.
    ({"runAt": "2026-12-02T00:00:00Z", "priority": 0}, []),
    ({"runAt": None}, []),
])
def test_a_create_differs_from_its_keys_holder_in_queue_handler_or_payload(change, named):
    assert I.differences(HELD, {**HELD, **change}) == named


def test_a_missing_payload_is_the_empty_one():
    assert I.differences({"queue": "q", "handler": "h"}, {"queue": "q", "handler": "h", "payload": {}}) == []
    assert I.differences({"queue": "q", "handler": "h"}, {"queue": "q", "handler": "h", "payload": {"a": 1}}) \
        == ["payload"]


def test_the_conflict_names_each_field_with_the_holders_value_then_the_creates():
    wanted = {**HELD, "queue": "sms", "payload": {"orderId": 43, "note": "x" * 100}}
    message = I.conflict_message("receipt-42", "job_8f3k2m9q", HELD, wanted, I.differences(HELD, wanted))
    assert message.startswith("idempotency key 'receipt-42' is held by job job_8f3k2m9q with another "
                              "spec.queue (emails, not sms) and spec.payload ({\"orderId\":42,\"lines\":[1,2.5]}, "
                              "not {\"orderId\":43,\"note\":\"" + "x" * 17 + "…)"), message  # 40 characters of each at most
    assert "\n" not in message
    api = I.conflict_message("k", "job_x", HELD, {**HELD, "handler": "h2"}, ["handler"], prefix="")
    assert "with another handler (send-receipt, not h2)" in api


def test_the_client_refuses_a_create_whose_key_is_held_by_another_job_and_creates_nothing():
    posted = []
    holder = {"metadata": {"name": "job-applied", "creationTimestamp": "2026-12-01T11:00:00Z"},
              "spec": {"queue": "emails", "handler": "h", "payload": {"n": 1}, "idempotencyKey": "k"},
              "status": {"state": "queued"}}

    def answer(request):
        if request.method == "POST":
            posted.append(request)
        return httpx.Response(200, json=listed(holder))

    client = scripted_client(answer)
    with pytest.raises(KeyConflict) as caught:
        client.create_job("shop", queue="sms", handler="h", payload={"n": 1}, idempotency_key="k", now=T0)
    assert isinstance(caught.value, Refused)
    assert (caught.value.key, caught.value.job, caught.value.fields) == ("k", "job_applied", ["queue"])
    assert "held by job job_applied with another spec.queue (emails, not sms)" in str(caught.value)
    # The same job: answered, as before (another priority and runAt too).
    job, created = client.create_job("shop", queue="emails", handler="h", payload={"n": 1}, priority=5,
                                     run_at=T0 + timedelta(hours=1), idempotency_key="k", now=T0)
    assert (job["metadata"]["name"], created) == ("job-applied", False) and posted == []
