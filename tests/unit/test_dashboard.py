"""The dashboard's pure parts (sextant/dashboard/views.py, pages.py): the jobs filter and its API parameters, the
cross-site request check, and the view models of the queues, the chart, the timeline and the schedules."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sextant.dashboard import pages
from sextant.dashboard.views import (PAGE_SIZE, SCAN_PAGE, FilterError, JobFilter, allowed_hosts, chart_svg,
                                     finished_at, finished_series, list_params, queue_rows, request_refusal,
                                     schedule_rows, timeline)

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


def ts(delta: float) -> str:
    return (NOW + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def job(name: str = "job-abcdefgh", ns: str = "shop", queue: str = "q", state: str | None = None,
        labels: dict | None = None, **status) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}, "creationTimestamp": ts(-100)},
            "spec": {"queue": queue, "handler": "h"}, "status": {"state": state, **status}}


# --- the filter and the API's paging parameters ----------------------------------------------------------------
def test_filter_parses_the_query_and_turns_into_selectors():
    flt = JobFilter.parse({"queue": "emails", "state": "failed", "handler": "send", "schedule": "nightly",
                           "q": " 8f3k ", "other": "x"})
    assert flt == JobFilter("emails", "failed", "send", "nightly", "8f3k")
    assert flt.field_selector() == "spec.queue=emails,spec.handler=send,status.state=failed"
    assert flt.label_selector() == "sextant.dev/schedule=nightly"
    assert flt.query() == {"queue": "emails", "state": "failed", "handler": "send", "schedule": "nightly", "q": "8f3k"}


def test_an_empty_filter_selects_nothing_and_pages_by_the_page_size():
    flt = JobFilter.parse({"queue": "", "state": " ", "q": ""})
    assert flt == JobFilter() and flt.field_selector() is None and flt.label_selector() is None
    assert list_params(flt, None) == {"limit": str(PAGE_SIZE)}
    assert list_params(flt, "tok") == {"limit": str(PAGE_SIZE), "continue": "tok"}


def test_the_id_text_scans_larger_pages_and_keeps_the_selectors():
    flt = JobFilter(queue="q", text="ab")
    assert list_params(flt, "tok") == {"limit": str(SCAN_PAGE), "fieldSelector": "spec.queue=q", "continue": "tok"}
    assert list_params(JobFilter(schedule="s"), None)["labelSelector"] == "sextant.dev/schedule=s"


@pytest.mark.parametrize("query, field", [({"state": "done"}, "state"), ({"queue": "Bad_Name"}, "queue"),
                                          ({"handler": "a" * 300}, "handler"), ({"schedule": "x,y=z"}, "schedule")])
def test_a_bad_filter_names_its_field(query, field):
    with pytest.raises(FilterError, match=field):
        JobFilter.parse(query)


@pytest.mark.parametrize("text, hit", [("abcd", True), ("JOB_ABC", True), ("job-abc", True), ("efgh", True),
                                       ("zz", False), (None, True)])
def test_the_id_text_matches_either_spelling(text, hit):
    assert JobFilter(text=text).matches_text(job()) is hit


# --- cross-site requests ---------------------------------------------------------------------------------------
HOSTS = allowed_hosts("127.0.0.1", 8800)
TOKEN = "s3cret-token"


def test_allowed_hosts_of_loopback_and_of_another_address():
    assert HOSTS == {"127.0.0.1:8800", "localhost:8800", "[::1]:8800"}
    assert allowed_hosts("10.0.0.5", 80) == {"10.0.0.5:80"}
    assert allowed_hosts("fd00::1", 80) == {"fd00::1:80", "[fd00::1]:80"}


@pytest.mark.parametrize("method, headers, refused", [
    ("GET", {"Host": "127.0.0.1:8800"}, None),
    ("GET", {"Host": "localhost:8800"}, None),
    ("GET", {"Host": "evil.example:8800"}, "Host"),  # DNS rebinding
    ("GET", {}, "Host"),
    ("POST", {"Host": "127.0.0.1:8800", "X-Sextant-Token": TOKEN}, None),
    ("POST", {"Host": "127.0.0.1:8800", "X-Sextant-Token": TOKEN, "Origin": "http://127.0.0.1:8800"}, None),
    ("POST", {"Host": "127.0.0.1:8800", "X-Sextant-Token": TOKEN, "Origin": "http://localhost:8800"}, None),
    ("POST", {"Host": "127.0.0.1:8800"}, "X-Sextant-Token"),
    ("POST", {"Host": "127.0.0.1:8800", "X-Sextant-Token": "guess"}, "X-Sextant-Token"),
    ("POST", {"Host": "127.0.0.1:8800", "X-Sextant-Token": TOKEN, "Origin": "http://evil.example"}, "Origin"),
    ("POST", {"Host": "127.0.0.1:8800", "X-Sextant-Token": TOKEN, "Origin": "null"}, "Origin"),
    ("POST", {"Host": "127.0.0.1:8800", "X-Sextant-Token": TOKEN, "Origin": "https://127.0.0.1:8800"}, "Origin"),
    ("DELETE", {"Host": "127.0.0.1:8800"}, "X-Sextant-Token"),
])
def test_request_refusal(method, headers, refused):
    answer = request_refusal(method, headers, TOKEN, HOSTS)
    assert (answer is None) if refused is None else (answer is not None and refused in answer)


@given(st.text(max_size=40))
def test_no_other_token_passes(sent):
    answer = request_refusal("POST", {"Host": "127.0.0.1:8800", "X-Sextant-Token": sent}, TOKEN, HOSTS)
    assert (answer is None) == (sent == TOKEN)


# --- queues and the chart --------------------------------------------------------------------------------------
def test_queue_rows_count_states_the_last_minute_and_the_oldest_queued():
    queues = [{"metadata": {"name": "q", "namespace": "shop"}, "spec": {"concurrency": 3}}]
    jobs = [job("job-1", state="running"), job("job-2", state="queued", queuedAt=ts(-30)),
            job("job-3", state="queued", queuedAt=ts(-90)), job("job-4", state="scheduled"),
            job("job-5", state="failed"), job("job-6", state="dead", finishedAt=ts(-10)),
            job("job-7", state="succeeded", finishedAt=ts(-70)), job("job-8", state="succeeded", finishedAt=ts(-5)),
            job("job-9", queue="ghost", state="queued")]
    rows = queue_rows(queues, jobs, NOW)
    q = next(r for r in rows if r.name == "q")
    assert (q.concurrency, q.running, q.queued, q.scheduled, q.failed, q.dead) == (3, 1, 2, 1, 1, 1)
    assert q.finished_last_minute == 2 and q.oldest_queued_age == timedelta(seconds=90)
    ghost = next(r for r in rows if r.name == "ghost")
    assert not ghost.exists and ghost.concurrency is None


def test_finished_at_prefers_the_status_then_the_last_attempt():
    assert finished_at(job(state="running", finishedAt=ts(0))) is None
    assert finished_at(job(state="succeeded", finishedAt=ts(-1))) == NOW - timedelta(seconds=1)
    assert finished_at(job(state="dead", attempts=[{"finishedAt": ts(-9)}, {"finishedAt": ts(-2)}])) == \
        NOW - timedelta(seconds=2)


def test_finished_series_buckets_oldest_first_and_drops_what_is_outside():
    jobs = [job(state="succeeded", finishedAt=ts(d)) for d in (-1, -9, -11, -299, -301, 5)]
    counts = finished_series(jobs, NOW, buckets=30, width=timedelta(seconds=10))
    assert len(counts) == 30 and sum(counts) == 4
    assert counts[-1] == 2 and counts[-2] == 1 and counts[0] == 1


def test_chart_svg_scales_to_the_maximum():
    svg = chart_svg([0, 2, 4], width=30, height=34)
    assert svg.startswith("<svg") and "max 4" in svg and svg.count("<rect") == 3
    assert 'height="20.0"' in svg and 'height="10.0"' in svg and 'height="0.0"' in svg
    assert "max 0" in chart_svg([0, 0])


# --- the timeline ----------------------------------------------------------------------------------------------
def test_timeline_places_attempts_on_one_axis_and_a_running_one_ends_now():
    attempts = [{"attempt": 1, "startedAt": ts(-100), "finishedAt": ts(-60), "result": "failed"},
                {"attempt": 2, "startedAt": ts(-50), "result": "running"}]
    first, second = timeline(attempts, NOW)
    assert (first.left, first.width, first.result) == (0.0, 40.0, "failed")
    assert (second.left, second.width, second.result) == (50.0, 50.0, "running")


def test_timeline_without_times_and_with_an_instant_attempt():
    assert [b.width for b in timeline([{"attempt": 1, "result": "running"}], NOW)] == [0.0]
    (bar,) = timeline([{"attempt": 1, "startedAt": ts(0), "finishedAt": ts(0), "result": "succeeded"}], NOW)
    assert bar.left == 0.0 and bar.width == 0.5  # visible, however short


# --- schedules -------------------------------------------------------------------------------------------------
def test_schedule_rows_with_their_jobs_and_missed_runs():
    schedules = [{"metadata": {"name": "nightly", "namespace": "shop"},
                  "spec": {"cron": "0 3 * * *"}, "status": {"lastScheduleTime": ts(-60), "nextScheduleTime": ts(60)}},
                 {"metadata": {"name": "often", "namespace": "shop"}, "spec": {"interval": "30s", "suspend": True}}]
    jobs = [job("job-old", labels={"sextant.dev/schedule": "nightly"}, state="succeeded"),
            job("job-new", labels={"sextant.dev/schedule": "nightly"}, state=None), job("job-mine")]
    jobs[1]["metadata"]["creationTimestamp"] = ts(-1)
    events = [{"involvedObject": {"kind": "Schedule", "name": "nightly", "namespace": "shop"},
               "reason": "MissedTicks", "message": "2 ticks missed", "count": 2, "lastTimestamp": ts(-5)},
              {"involvedObject": {"kind": "Schedule", "name": "nightly", "namespace": "shop"}, "reason": "Fired"},
              {"involvedObject": {"kind": "Job", "name": "nightly", "namespace": "shop"}, "reason": "MissedTicks"}]
    nightly, often = schedule_rows(schedules, jobs, events)
    assert (nightly.name, nightly.when, nightly.suspended) == ("nightly", "0 3 * * *", False)
    assert nightly.last == NOW - timedelta(seconds=60) and nightly.next == NOW + timedelta(seconds=60)
    assert nightly.jobs == [("job_new", "<pending>"), ("job_old", "succeeded")]
    assert len(nightly.missed) == 1 and "MissedTicks ×2: 2 ticks missed" in nightly.missed[0]
    assert (often.when, often.suspended, often.jobs, often.missed) == ("every 30s", True, [], [])


# --- pages escape what they show -------------------------------------------------------------------------------
def test_pages_escape_values_and_carry_the_token():
    hostile = job(name="job-<script>", state="running")
    hostile["spec"]["queue"] = '"><img src=x onerror=alert(1)>'
    html = pages.jobs_fragment([hostile], None, JobFilter(), NOW, False, 1, {})
    assert "<script>" not in html and "<img" not in html and "&lt;script&gt;" in html
    whole = pages.page("t", "jobs", "namespace shop", "tok&", "<p>x</p>")
    assert 'content="tok&amp;"' in whole and "/static/dashboard.js" in whole


def test_the_forbidden_message_names_what_was_refused():
    html = pages.forbidden("list jobs in namespace shop", 'jobs.sextant.dev is forbidden: User "bob" cannot list')
    assert "Forbidden" in html and "list jobs in namespace shop" in html and "User &quot;bob&quot;" in html


def test_the_next_page_link_keeps_the_filter_and_the_token():
    html = pages.jobs_fragment([job()], "tok/en", JobFilter(queue="q"), NOW, False, 1, {})
    assert 'href="/jobs?queue=q&amp;continue=tok%2Fen"' in html
