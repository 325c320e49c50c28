"""The operator's view keeps no payload (issue 28): a legal 256 KiB payload of small keys is ~2.5 MiB as Python
objects, so a few hundred queued jobs filled the chart's 1 GiB and the restart's relist died again. A job is read into
the view with what the rules need of its payload (its size; a small stand-in of an invalid one), and the rules say
what they said when they read the whole object."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sextant.controller.view import View
from sextant.lifecycle import transitions as T
from sextant.lifecycle.reading import KEPT_PAYLOAD_BYTES, InvalidJob, lean_job, read_job
from sextant.resources.job import MAX_PAYLOAD_DEPTH, PAYLOAD_MAX_BYTES, payload_size

from _builders import T0, handler, queue

KEY = ("shop", "job-a")


def job(payload: Any, *, generation: int = 1, uid: str = "u-1", rv: str = "10", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
            "metadata": {"name": "job-a", "namespace": "shop", "uid": uid, "resourceVersion": rv,
                         "generation": generation, "creationTimestamp": "2026-03-01T12:00:00Z"},
            "spec": {"queue": "emails", "handler": "send", "payload": payload, **spec}}


def small_keys(size: int) -> dict[str, int]:
    """A payload of small keys, the heaviest kind per byte once parsed, of about `size` bytes as JSON."""
    payload = {f"k{i:06d}": i % 10 for i in range(size // 12)}
    while payload_size(payload) > size:
        payload.popitem()
    return payload


def nested(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth - 1):
        node["a"] = {}
        node = node["a"]
    return root


def first_sight(raw: dict[str, Any], payload_bytes: int | None = None) -> T.Decision:
    snapshot = read_job(raw, payload_bytes)
    return T.reconcile(snapshot, T.Observations(queue=queue(), handler=handler(), attempts=()), T0)


def test_a_job_read_into_the_view_carries_no_payload_only_its_size():
    payload = small_keys(PAYLOAD_MAX_BYTES)
    raw = job(payload)
    view = View()
    view.upsert_job(copy.deepcopy(raw))
    record = view.jobs[KEY]
    kept = record.raw
    assert "payload" not in kept["spec"] and record.payload_bytes == payload_size(payload) <= PAYLOAD_MAX_BYTES
    assert kept["spec"] == {"queue": "emails", "handler": "send"} and kept["metadata"] == raw["metadata"]
    assert raw["spec"]["payload"] is payload, "the object handed in is not changed"
    # What the rules read is the same: the lean copy and the whole object decide alike.
    assert first_sight(kept, record.payload_bytes).status == first_sight(raw).status
    assert view.snapshot(record).payload_bytes == payload_size(payload)


@pytest.mark.parametrize("payload", [{}, {"to": "a@example.com"}, small_keys(KEPT_PAYLOAD_BYTES)],
                         ids=["empty", "small", "just-small-enough"])
def test_an_empty_or_small_payload_stays_and_such_a_job_is_whole_in_the_view(payload):
    """A pod without the runner gets a small payload in its environment: kept, it costs no GET of the job."""
    view = View()
    view.upsert_job(job(payload))
    record = view.jobs[KEY]
    assert record.raw["spec"]["payload"] == payload and record.payload_bytes is None
    assert view.whole_job(KEY) is record.raw
    assert view.snapshot(record).payload_bytes is None
    view.upsert_job(job(small_keys(KEPT_PAYLOAD_BYTES + 40), rv="11", uid="u-2"))
    assert view.whole_job(KEY) is None, "the HTTP API GETs a job whose payload the view left out"
    assert view.jobs[KEY].payload_bytes > KEPT_PAYLOAD_BYTES


def test_a_payload_over_the_cap_is_still_refused_in_the_same_words():
    raw = job(small_keys(PAYLOAD_MAX_BYTES + 5000))
    assert payload_size(raw["spec"]["payload"]) > PAYLOAD_MAX_BYTES
    whole, lean = first_sight(raw), first_sight(*lean_job(raw))
    assert whole.status.state.value == "dead" and whole.status.conditions
    assert lean.status == whole.status and [e.reason for e in lean.events] == [e.reason for e in whole.events]
    dead = next(c for c in lean.status.conditions if c.type == "Dead")
    assert dead.reason == "PayloadTooLarge" and f"{payload_size(raw['spec']['payload'])} bytes" in dead.message


@pytest.mark.parametrize("payload", [
    nested(MAX_PAYLOAD_DEPTH + 1),
    nested(5000),
    [{"a": 1}] * 5000,
    "x" * 300_000,
    17,
    None,
    [nested(MAX_PAYLOAD_DEPTH + 3)],
], ids=["just-too-deep", "far-too-deep", "a-list", "a-string", "a-number", "null", "a-deep-list"])
@pytest.mark.parametrize("other", [{}, {"priority": 2**40}], ids=["alone", "with-another-bad-field"])
def test_an_invalid_payload_is_refused_in_the_same_words_from_a_small_stand_in(payload, other):
    raw = job(payload, **other)
    with pytest.raises(InvalidJob) as whole:
        read_job(raw)
    lean, left_out = lean_job(raw)
    with pytest.raises(InvalidJob) as from_view:
        read_job(lean, left_out)
    assert str(from_view.value) == str(whole.value) and "spec.payload" in str(whole.value)
    assert len(str(lean["spec"].get("payload"))) < 1000, "no big invalid payload kept either"


def test_the_size_is_measured_once_per_generation_not_on_every_watch_event():
    view = View()
    big = small_keys(4000)
    view.upsert_job(job(big, rv="10"))
    size = view.jobs[KEY].payload_bytes
    later = job({"not": "measured again"}, rv="11")  # the same uid and generation: the same payload
    later["status"] = {"state": "queued"}
    view.upsert_job(later)
    assert view.jobs[KEY].payload_bytes == size
    # Another job under the same name (another uid) is measured again.
    other = small_keys(3000)
    view.upsert_job(job(other, uid="u-2", rv="12"))
    assert view.jobs[KEY].payload_bytes == payload_size(other)
    # A small payload kept is kept again on the next event without a look; a too-deep one stays a stand-in.
    small = {"to": "a@example.com"}
    view.upsert_job(job(small, uid="u-3", rv="13"))
    again = job(small, uid="u-3", rv="14")
    view.upsert_job(again)
    assert view.jobs[KEY].raw is again
    view.upsert_job(job(nested(MAX_PAYLOAD_DEPTH + 1), uid="u-4", rv="15"))
    view.upsert_job(job(nested(MAX_PAYLOAD_DEPTH + 1), uid="u-4", rv="16"))
    with pytest.raises(InvalidJob):
        view.snapshot(view.jobs[KEY])
    kept = view.jobs[KEY].raw["spec"]["payload"]
    assert kept is not None and len(str(kept)) < 1000


def test_a_job_is_kept_without_its_managed_fields_and_the_labels_and_annotations_no_rule_reads():
    """managedFields name every key of the payload again (issue 28's 695 MB); a user's labels and annotations may
    weigh megabytes, and no rule reads them: the view keeps only those it reads (a schedule's name and tick), and
    the HTTP API reads such a job from the API server."""
    payload = small_keys(PAYLOAD_MAX_BYTES)
    raw = job(payload)
    raw["metadata"]["managedFields"] = [{"manager": "kubectl-create", "fieldsV1": {"f:spec": {"f:payload": {
        f"f:{k}": {} for k in payload}}}}]
    raw["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "team": "a" * 100_000,
                                      "sextant.dev/scheduled-at": "2026-03-01T12:00:00Z"}
    raw["metadata"]["labels"] = {"sextant.dev/schedule": "nightly", **{f"l{i}": "x" * 60 for i in range(1000)}}
    before = copy.deepcopy(raw["metadata"])
    view = View()
    view.upsert_job(raw)
    kept = view.jobs[KEY].raw["metadata"]
    assert "managedFields" not in kept
    assert kept["annotations"] == {"sextant.dev/scheduled-at": "2026-03-01T12:00:00Z"}
    assert kept["labels"] == {"sextant.dev/schedule": "nightly"}
    assert kept["resourceVersion"] == raw["metadata"]["resourceVersion"]
    assert raw["metadata"] == before, "the object handed in is not changed"
    assert view.whole_job(KEY) is None, "the HTTP API shows the job with its labels: it GETs it"
