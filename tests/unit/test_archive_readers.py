"""What the readers make of the archive, without a database (archive/objects.py, archive/merged.py): an archived job
shown as the Job object it was, the merged list's cursor, its filters' rules, and which jobs each part lists."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sextant.archive import merged
from sextant.archive.merged import BadListCursor, Cursor, ListFilters
from sextant.archive.objects import is_archived, object_of
from sextant.archive.record import record_of
from sextant.http import models
from sextant.resources import inputs
from tests.harness.jobs import T0, raw_job

NOW = T0 + timedelta(hours=2)


@pytest.mark.parametrize("state", ["succeeded", "dead", "cancelled", "queued"])
def test_an_archived_job_is_the_job_object_it_was(state: str):
    raw = raw_job(5, state=state, attempts=2, error="exit 1", labels={"team": "a"}, key="order-5")
    raw["spec"]["concurrencyKey"] = "t1"
    record = record_of(raw, 65536)
    shown = object_of(record)
    assert is_archived(shown) and not is_archived(raw)
    again = record_of(shown, 65536)  # nothing the record keeps is lost on the way to a reader (but queuedAt)
    assert replace(again, wait_ms=record.wait_ms) == record
    assert shown["spec"] == {k: v for k, v in raw["spec"].items()}
    assert shown["status"]["attempts"] == raw["status"]["attempts"]
    api = models.job_out(shown)
    assert api.archived is True and api.state == state and api.idempotency_key == "order-5"
    assert models.job_out(raw).archived is False


def test_a_payload_the_archive_did_not_keep_is_empty_and_says_why():
    shown = object_of(record_of(raw_job(1, payload={"blob": "x" * 100}), 10))
    assert shown["spec"]["payload"] == {} and "over the archive's cap of 10 bytes" in shown["status"]["payloadNote"]
    assert "over the archive's cap" in models.job_out(shown).payload_note


@given(phase=st.sampled_from(["live", "archive"]), token=st.none() | st.text(max_size=200),
       uids=st.sets(st.uuids().map(str), max_size=50), seconds=st.integers(0, 10**9))
def test_a_cursor_reads_back_as_it_was_written(phase, token, uids, seconds):
    at = Cursor(phase, datetime(2001, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=seconds), token,
                frozenset(map(merged.mark, uids)))
    text = merged.encode(at)
    assert merged.decode(text) == at
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_the_most_marks_a_cursor_carries_fit_the_continue_parameter():
    at = Cursor("archive", NOW, "x" * 200, frozenset(merged.mark(str(i)) for i in range(merged.SEEN_MAX)))
    assert len(merged.encode(at)) <= models.CONTINUE_MAX


@pytest.mark.parametrize("text", ["", "e30", "bm90LWEtY3Vyc29y", "WzIsImxpdmUiLCIyMDI2IiwibnVsbCJdCg"])
def test_a_cursor_not_handed_out_is_refused(text: str):
    with pytest.raises(BadListCursor):
        merged.decode(text)


@pytest.mark.parametrize(("values", "field", "words"), [
    ({"label": "team"}, "label", "not a label"),
    ({"label": "Team Name=x"}, "label", "not a label"),
    ({"since": "yesterday"}, "since", "RFC 3339"),
    ({"until": "2026-12-01T10:00:00"}, "until", "RFC 3339"),
    ({"since": "1h", "until": "2h"}, "until", "must be after since"),
    ({"state": "done"}, "state", "not a state"),
    ({"queue": "Bad_Queue"}, "queue", "queue name"),
])
def test_bad_filters_name_the_field_and_the_rule(values, field, words):
    with pytest.raises(inputs.InputError) as caught:
        merged.list_filters(values, NOW)
    assert caught.value.field == field and words in caught.value.message


def test_filters_read_as_given():
    got = merged.list_filters({"queue": "q", "state": "dead", "handler": "h", "label": "team=mail", "since": "1h",
                               "until": "2026-12-01T03:00:00+01:00"}, NOW, {"since": "--since"})
    assert got == ListFilters("q", "dead", "h", ("team", "mail"), NOW - timedelta(hours=1),
                              datetime(2026, 12, 1, 2, tzinfo=timezone.utc))
    with pytest.raises(inputs.InputError) as caught:
        merged.list_filters({"since": "soon"}, NOW, {"since": "--since"})
    assert caught.value.field == "--since"


def test_the_live_part_leaves_to_the_archive_only_finishes_it_holds():
    t0 = T0 + timedelta(hours=1)
    unfinished = raw_job(1, state="queued")
    recorded = raw_job(2)  # finished, its record (of this sequence) landed
    pending = raw_job(3)  # finished, not yet recorded
    retried = raw_job(4, state="queued", sequence=2)  # an older record, from before a retry
    late = raw_job(5, finished=t0 + timedelta(seconds=5))  # finished after t0: the archive part will not list it
    records = {"uid-00000002": (T0 + timedelta(seconds=5), 1), "uid-00000004": (T0, 1),
               "uid-00000005": (t0 + timedelta(seconds=5), 1)}
    shown, seen = merged.live_step([unfinished, recorded, pending, retried, late], records, t0)
    assert [j["metadata"]["name"] for j in shown] == ["job-00000001", "job-00000003", "job-00000004",
                                                      "job-00000005"]
    assert seen == {merged.mark(u) for u in ("uid-00000003", "uid-00000004", "uid-00000005")}
    archived = [record_of(raw_job(n), 1024) for n in (3, 6)]
    assert [r.uid for r in merged.archive_step(archived, seen)] == ["uid-00000006"]
    assert merged.mark("uid-00000003") not in seen  # passed: dropped, the cursor shrinks


def test_the_archive_part_lists_only_what_finished_before_the_walk():
    t0 = T0 + timedelta(hours=1)
    assert merged.archive_filters("ns", ListFilters(), t0).until == t0
    assert merged.archive_filters("ns", ListFilters(until=T0), t0).until == T0
    assert merged.archive_filters(None, ListFilters(queue="q", label=("a", "b")), t0).label == ("a", "b")
