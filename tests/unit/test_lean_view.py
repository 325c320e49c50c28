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
from sextant.lifecycle.reading import KEPT_PAYLOAD_BYTES, PAYLOAD_NOTE, InvalidJob, lean_job, payload_left_out, read_job
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


def first_sight(raw: dict[str, Any]) -> T.Decision:
    snapshot = read_job(raw)
    return T.reconcile(snapshot, T.Observations(queue=queue(), handler=handler(), attempts=()), T0)


def test_a_job_read_into_the_view_carries_no_payload_only_its_size():
    payload = small_keys(PAYLOAD_MAX_BYTES)
    raw = job(payload)
    view = View()
    assert view.upsert_job(copy.deepcopy(raw))
    kept = view.jobs[KEY]
    assert "payload" not in kept["spec"] and kept[PAYLOAD_NOTE] == {"bytes": payload_size(payload)}
    assert payload_left_out(kept) == payload_size(payload) <= PAYLOAD_MAX_BYTES
    assert kept["spec"] == {"queue": "emails", "handler": "send"} and kept["metadata"] == raw["metadata"]
    assert raw["spec"]["payload"] is payload, "the object handed in is not changed"
    # What the rules read is the same: the lean copy and the whole object decide alike.
    assert first_sight(kept).status == first_sight(raw).status
    assert view.snapshot(KEY, kept).payload_bytes == payload_size(payload)


@pytest.mark.parametrize("payload", [{}, {"to": "a@example.com"}, small_keys(KEPT_PAYLOAD_BYTES)],
                         ids=["empty", "small", "just-small-enough"])
def test_an_empty_or_small_payload_stays_and_such_a_job_is_whole_in_the_view(payload):
    """A pod without the runner gets a small payload in its environment: kept, it costs no GET of the job."""
    view = View()
    view.upsert_job(job(payload))
    assert view.jobs[KEY]["spec"]["payload"] == payload and PAYLOAD_NOTE not in view.jobs[KEY]
    assert view.whole_job(KEY) is view.jobs[KEY]
    assert payload_left_out(view.jobs[KEY]) is None and view.snapshot(KEY, view.jobs[KEY]).payload_bytes is None
    view.upsert_job(job(small_keys(KEPT_PAYLOAD_BYTES + 40), rv="11", uid="u-2"))
    assert view.whole_job(KEY) is None, "the HTTP API GETs a job whose payload the view left out"
    assert payload_left_out(view.jobs[KEY]) > KEPT_PAYLOAD_BYTES


def test_a_payload_over_the_cap_is_still_refused_in_the_same_words():
    raw = job(small_keys(PAYLOAD_MAX_BYTES + 5000))
    assert payload_size(raw["spec"]["payload"]) > PAYLOAD_MAX_BYTES
    whole, lean = first_sight(raw), first_sight(lean_job(raw))
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
    lean = lean_job(raw)
    with pytest.raises(InvalidJob) as from_view:
        read_job(lean)
    assert str(from_view.value) == str(whole.value) and "spec.payload" in str(whole.value)
    assert len(str(lean["spec"].get("payload"))) < 1000, "no big invalid payload kept either"


def test_the_size_is_measured_once_per_generation_not_on_every_watch_event():
    view = View()
    big = small_keys(4000)
    view.upsert_job(job(big, rv="10"))
    note = view.jobs[KEY][PAYLOAD_NOTE]
    later = job(big, rv="11")
    later["status"] = {"state": "queued"}
    view.upsert_job(later)
    assert view.jobs[KEY][PAYLOAD_NOTE] is note
    # Another job under the same name (another uid) is measured again.
    other = small_keys(3000)
    view.upsert_job(job(other, uid="u-2", rv="12"))
    assert view.jobs[KEY][PAYLOAD_NOTE] == {"bytes": payload_size(other)}
    # A small payload kept is kept again on the next event without a look; a too-deep one stays a stand-in.
    small = {"to": "a@example.com"}
    view.upsert_job(job(small, uid="u-3", rv="13"))
    again = job(small, uid="u-3", rv="14")
    assert view.upsert_job(again) and view.jobs[KEY] is again
    view.upsert_job(job(nested(MAX_PAYLOAD_DEPTH + 1), uid="u-4", rv="15"))
    view.upsert_job(job(nested(MAX_PAYLOAD_DEPTH + 1), uid="u-4", rv="16"))
    with pytest.raises(InvalidJob):
        read_job(view.jobs[KEY])
    assert view.jobs[KEY]["spec"]["payload"] is not None and len(str(view.jobs[KEY]["spec"]["payload"])) < 1000


def test_our_own_write_answer_is_kept_without_its_managed_fields():
    """A status write's answer comes whole (the informers trim theirs): its managedFields name every key of the
    payload again. Kept, each job the operator wrote `queued` weighed its payload once more (issue 28's 695 MB)."""
    payload = small_keys(PAYLOAD_MAX_BYTES)
    answer = job(payload)
    answer["metadata"]["managedFields"] = [{"manager": "kubectl-create", "fieldsV1": {"f:spec": {"f:payload": {
        f"f:{k}": {} for k in payload}}}}]
    answer["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "team": "a"}
    before = copy.deepcopy(answer["metadata"])
    view = View()
    assert view.upsert_job(answer)
    kept = view.jobs[KEY]["metadata"]
    assert "managedFields" not in kept and kept["annotations"] == {"team": "a"}
    assert kept["resourceVersion"] == answer["metadata"]["resourceVersion"]
    assert answer["metadata"] == before, "the answer handed in is not changed"
