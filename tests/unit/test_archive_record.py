"""The archive's record of a job (archive/record.py), its settings, cursors and percentiles: pure, no database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sextant.archive.query import BadCursor, Position, decode_cursor, encode_cursor
from sextant.archive.record import record_of
from sextant.archive.settings import (PAYLOAD_MAX_BYTES, RETENTION, ArchiveSettings, SettingsError, default_dsn)
from sextant.archive.stats import percentile_cont, percentiles
from sextant.resources.contract import ANNOTATION_SCHEDULED_AT, LABEL_SCHEDULE
from sextant.resources.job import State, payload_size
from tests.harness.jobs import T0, raw_job


@pytest.mark.parametrize("state", [s.value for s in State])
def test_a_job_of_every_state_has_a_record(state: str):
    raw = raw_job(7, state=state, attempts=2, error="exit 1", labels={"team": "a"})
    record = record_of(raw, PAYLOAD_MAX_BYTES)
    assert (record.uid, record.id, record.name, record.namespace) == ("uid-00000007", "job_00000007", "job-00000007",
                                                                      "ns")
    assert (record.queue, record.handler, record.state, record.labels) == ("q", "h", state, {"team": "a"})
    assert record.attempts == raw["status"]["attempts"] and len(record.attempts) == 2
    assert record.error == "exit 1"  # the last attempt's message
    assert record.conditions == raw["status"]["conditions"]
    assert record.payload == {"n": 7} and record.payload_note is None
    assert record.created_at == T0 + timedelta(seconds=7)
    if state in ("succeeded", "dead", "cancelled"):
        assert record.finished_at == record.recorded_at == T0 + timedelta(seconds=10)
    else:  # archived before it finished (deleted while it waited): its latest time, the last attempt's end
        assert record.finished_at is None and record.recorded_at == T0 + timedelta(seconds=10)
    assert (record.wait_ms, record.run_ms) == (1000, 2000)


def test_the_record_keeps_what_a_reader_shows():
    raw = raw_job(3, key="order-1", duplicate_of="job-00000001",
                  labels={LABEL_SCHEDULE: "nightly"}, annotations={ANNOTATION_SCHEDULED_AT: "2026-12-01T00:00:00Z"})
    raw["spec"] |= {"concurrencyKey": "tenant-9", "priority": 5, "runAt": "2026-12-01T00:00:02Z"}
    raw["status"] |= {"outputNote": None, "message": "done", "droppedAttempts": 4}
    record = record_of(raw, PAYLOAD_MAX_BYTES)
    assert (record.idempotency_key, record.duplicate_of, record.concurrency_key) == ("order-1", "job-00000001",
                                                                                     "tenant-9")
    assert record.priority == 5 and record.run_at == T0 + timedelta(seconds=2)
    assert (record.schedule, record.scheduled_at) == ("nightly", "2026-12-01T00:00:00Z")
    assert (record.output, record.message, record.dropped_attempts) == ({"n": 3}, "done", 4)
    assert (record.attempt, record.sequence) == (1, 1)


def test_a_job_that_never_ran_has_no_wait_or_run_time():
    raw = raw_job(1, state="cancelled", attempts=0)
    record = record_of(raw, PAYLOAD_MAX_BYTES)
    assert record.attempts == [] and record.error is None
    assert (record.wait_ms, record.run_ms) == (None, None)


def test_a_payload_over_the_cap_is_left_out_with_a_note():
    big = {"blob": "x" * 70_000}
    record = record_of(raw_job(1, payload=big), PAYLOAD_MAX_BYTES)
    assert record.payload is None and record.payload_bytes == payload_size(big)
    assert "over the archive's cap of 65536 bytes" in (record.payload_note or "")
    kept_none = record_of(raw_job(1), 0)
    assert kept_none.payload is None and "keeps no payloads" in (kept_none.payload_note or "")


label_keys = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?/[a-z]([a-z0-9_.-]{0,20}[a-z0-9])?", fullmatch=True)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False,
                           allow_infinity=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                           max_leaves=20)


@settings(max_examples=60, deadline=None)
@given(labels=st.dictionaries(label_keys, st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,30})?", fullmatch=True),
                              max_size=6),
       payload=st.dictionaries(st.text(), json_values, max_size=5), message=st.text(), cap=st.integers(0, 400),
       pad=st.integers(0, 600))
def test_odd_but_valid_jobs_are_recorded_whole_or_cut(labels, payload, message, cap, pad):
    payload = {**payload, "pad": "é" * pad}  # unicode counts in bytes, as the API measures it
    record = record_of(raw_job(2, labels=labels, payload=payload, error=message or None), cap)
    assert record.labels == labels and record.error == (message or None)
    assert record.payload_bytes == payload_size(payload)
    if payload_size(payload) <= cap:
        assert record.payload == payload and record.payload_note is None
    else:
        assert record.payload is None and str(record.payload_bytes) in (record.payload_note or "")


def test_settings_from_the_environment():
    assert ArchiveSettings.from_env({}) == ArchiveSettings(default_dsn(), PAYLOAD_MAX_BYTES, RETENTION)
    assert default_dsn().startswith("sqlite:///") and default_dsn().endswith("archive.sqlite")
    got = ArchiveSettings.from_env({"SEXTANT_ARCHIVE_DSN": "postgresql://u@db/sextant",
                                    "SEXTANT_ARCHIVE_PAYLOAD_MAX_BYTES": "0", "SEXTANT_ARCHIVE_RETENTION": "720h"})
    assert got == ArchiveSettings("postgresql://u@db/sextant", 0, timedelta(days=30))
    for bad in ({"SEXTANT_ARCHIVE_DSN": "mysql://x/y"}, {"SEXTANT_ARCHIVE_PAYLOAD_MAX_BYTES": "-1"},
                {"SEXTANT_ARCHIVE_RETENTION": "a month"}):
        with pytest.raises(SettingsError):
            ArchiveSettings.from_env(bad)


def test_a_cursor_is_read_back_and_a_forged_one_refused():
    at = Position(T0 + timedelta(microseconds=5), "uid-1")
    assert decode_cursor(encode_cursor(at)) == at
    for forged in ("", "bm90IGpzb24", encode_cursor(at)[:-3] + "!!"):
        with pytest.raises(BadCursor):
            decode_cursor(forged)


def test_percentiles_are_postgresql_percentile_cont():
    assert percentile_cont([1, 2, 3, 4], 0.5) == 2.5
    assert percentile_cont([10], 0.99) == 10
    assert percentiles(list(range(101))) == percentiles(list(reversed(range(101))))
    got = percentiles(list(range(101)))
    assert got is not None and (got.p50, got.p95, got.p99) == (50, 95, 99)
    assert percentiles([]) is None
