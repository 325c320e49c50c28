"""The dashboard's pure parts (sextant/dashboard/views.py, pages.py): the jobs filter and its API parameters, the
cross-site request check, and the view models of the queues, the chart, the timeline and the schedules."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sextant.dashboard import pages
from sextant.dashboard.views import (BULK_MAX, PAGE_SIZE, Door, FilterError, JobFilter, allowed_hosts,
                                     bulk_targets, can, chart_svg, door, finished_at, finished_series, is_loopback,
                                     jobs_page, last_error, millis, queue_rows, schedule_rows, timeline,
                                     waiting_reason)

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


def ts(delta: float) -> str:
    return (NOW + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def job(name: str = "job-abcdefgh", ns: str = "shop", queue: str = "q", state: str | None = None,
        labels: dict | None = None, **status) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}, "creationTimestamp": ts(-100)},
            "spec": {"queue": queue, "handler": "h"}, "status": {"state": state, **status}}


# --- the filter and the API's paging parameters ----------------------------------------------------------------
def test_filter_parses_the_query_and_selects_jobs():
    flt = JobFilter.parse({"queue": "emails", "state": "failed", "handler": "send", "schedule": "nightly",
                           "q": " 8f3k ", "other": "x"})
    assert flt == JobFilter("emails", "failed", "send", "nightly", "8f3k")
    assert flt.query() == {"queue": "emails", "state": "failed", "handler": "send", "schedule": "nightly", "q": "8f3k"}
    assert flt.words() == "queue emails, state failed, handler send, schedule nightly, id containing 8f3k"
    hit = job("job-8f3kabcd", queue="emails", state="failed", labels={"sextant.dev/schedule": "nightly"})
    hit["spec"]["handler"] = "send"
    assert flt.matches(hit) and flt.matches(hit, "shop") and not flt.matches(hit, "other")
    assert not JobFilter(state="dead").matches(hit) and not JobFilter(schedule="x").matches(hit)
    assert JobFilter.parse({"queue": "", "state": " ", "q": ""}) == JobFilter()


def aged(name: str, seconds: float, **kw) -> dict:
    j = job(name, **kw)
    j["metadata"]["creationTimestamp"] = ts(seconds)
    return j


def test_the_jobs_view_is_newest_first_and_pages_by_a_cursor():
    jobs = [aged(f"job-{i:08d}", -i) for i in range(PAGE_SIZE * 2 + 5)]  # job-00000000 is the newest
    first, cursor, total = jobs_page(reversed(jobs), JobFilter(), None, None)
    assert total == len(jobs) and [j["metadata"]["name"] for j in first] == [f"job-{i:08d}" for i in range(PAGE_SIZE)]
    second, cursor, _ = jobs_page(jobs, JobFilter(), None, cursor)
    assert second[0]["metadata"]["name"] == f"job-{PAGE_SIZE:08d}" and cursor
    last, cursor, _ = jobs_page(jobs, JobFilter(), None, cursor)
    assert len(last) == 5 and cursor is None
    # Same creation second: the name decides, so that no job is skipped or shown twice across pages.
    tied = [aged(f"job-{c * 8}", 0) for c in "abcdefgh"]
    seen = []
    cursor = None
    while True:
        rows, cursor, _ = jobs_page(tied, JobFilter(), None, cursor, size=3)
        seen += [r["metadata"]["name"] for r in rows]
        if cursor is None:
            break
    assert seen == sorted((j["metadata"]["name"] for j in tied), reverse=True)


@pytest.mark.parametrize("cursor", ["garbage", "/job-abcdefgh", "2026-01-01T00:00:00Z/Not A Name", "x" * 400])
def test_a_bad_cursor_is_refused_naming_continue(cursor):
    with pytest.raises(FilterError, match="continue"):
        jobs_page([job()], JobFilter(), None, cursor)


def test_bulk_actions_take_only_what_the_state_allows_oldest_first_and_at_most_bulk_max():
    jobs = [aged("job-dead0001", -3, state="dead"), aged("job-fail0001", -2, state="failed"),
            aged("job-runs0001", -1, state="running"), aged("job-done0001", 0, state="succeeded"),
            aged("job-dead0002", -4, state="dead", queue="other")]
    retry = [j["metadata"]["name"] for j in bulk_targets(jobs, JobFilter(queue="q"), "shop", "retry")]
    assert retry == ["job-dead0001", "job-fail0001"]
    cancel = [j["metadata"]["name"] for j in bulk_targets(jobs, JobFilter(), None, "cancel")]
    assert cancel == ["job-fail0001", "job-runs0001"]
    jobs[2]["spec"]["cancel"] = True  # asked already: not again
    assert [j["metadata"]["name"] for j in bulk_targets(jobs, JobFilter(), None, "cancel")] == ["job-fail0001"]
    many = [aged(f"job-{i:08d}", -i, state="dead") for i in range(BULK_MAX + 10)]
    assert len(bulk_targets(many, JobFilter(), None, "retry")) == BULK_MAX


@pytest.mark.parametrize("state, cancel, retry", [
    ("scheduled", True, False), ("queued", True, False), ("running", True, False), ("failed", True, True),
    ("dead", False, True), ("succeeded", False, False), ("cancelled", False, False), (None, False, False)])
def test_actions_follow_the_states_that_allow_them(state, cancel, retry):
    assert (can("cancel", job(state=state)), can("retry", job(state=state))) == (cancel, retry)


def test_the_error_column_and_the_waiting_reason():
    failed = job(state="dead", attempts=[{"result": "failed", "reason": "Error", "message": "exit code 3"}])
    assert last_error(failed) == "Error: exit code 3"
    coded = job(state="dead", attempts=[{"result": "failed", "reason": "Error", "message": "Error", "exitCode": 3}])
    assert last_error(coded) == "Error (exit code 3)"
    blocked = job(state="queued", conditions=[{"type": "Blocked", "status": "True", "reason": "QueueNotFound",
                                               "message": "queue 'gretings' does not exist in this namespace"}])
    assert waiting_reason(blocked) == "QueueNotFound: queue 'gretings' does not exist in this namespace"
    assert last_error(blocked) == waiting_reason(blocked)
    assert waiting_reason(job(state="queued")) is None and last_error(job(state="succeeded")) == ""


@pytest.mark.parametrize("seconds, text", [(0.042, "0.042s"), (3.5, "3.500s"), (125.25, "2m 5.250s"),
                                           (3723, "1h 2m 3.000s"), (-1, "—")])
def test_durations_to_the_millisecond(seconds, text):
    assert millis(timedelta(seconds=seconds)) == text


@pytest.mark.parametrize("address, loopback", [("127.0.0.1", True), ("127.3.0.1", True), ("::1", True),
                                               ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                               ("10.0.0.5", False), ("::", False), ("example.com", False)])
def test_loopback_addresses(address, loopback):
    assert is_loopback(address) is loopback


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
    assert allowed_hosts("0.0.0.0", 80) is None and allowed_hosts("::", 80) is None  # any name: the secret guards


def test_a_wildcard_address_takes_any_host_but_only_its_own_origin():
    wild = {"Host": "box.example:80"}
    assert door("GET", "/", {}, wild, TOKEN, TOKEN, None) == Door()
    assert door("POST", "/", {}, {**wild, "Origin": "http://box.example:80"}, TOKEN, TOKEN, None) == Door()
    assert "Origin" in door("POST", "/", {}, {**wild, "Origin": "http://evil.example"}, TOKEN, TOKEN, None).refusal
    assert "secret" in door("GET", "/", {}, wild, None, TOKEN, None).refusal


H = {"Host": "127.0.0.1:8800"}


@pytest.mark.parametrize("method, query, headers, cookie, refused", [
    ("GET", {}, H, TOKEN, None),
    ("GET", {}, {"Host": "localhost:8800"}, TOKEN, None),
    ("GET", {}, {"Host": "evil.example:8800"}, TOKEN, "Host"),  # DNS rebinding
    ("GET", {}, {}, TOKEN, "Host"),
    ("GET", {}, H, None, "secret"),  # a GET needs the secret too
    ("GET", {}, H, "guess", "secret"),
    ("GET", {"secret": "guess"}, H, None, "wrong secret"),
    ("POST", {}, H, TOKEN, None),
    ("POST", {}, {**H, "Origin": "http://127.0.0.1:8800"}, TOKEN, None),
    ("POST", {}, {**H, "Origin": "http://localhost:8800"}, TOKEN, None),
    ("POST", {}, H, None, "secret"),
    ("POST", {"secret": TOKEN}, H, None, "secret"),  # the URL's secret lets a GET in, never an action
    ("POST", {}, {**H, "Origin": "http://evil.example"}, TOKEN, "Origin"),
    ("POST", {}, {**H, "Origin": "null"}, TOKEN, "Origin"),
    ("POST", {}, {**H, "Origin": "https://127.0.0.1:8800"}, TOKEN, "Origin"),
    ("DELETE", {}, H, None, "secret"),
])
def test_the_door(method, query, headers, cookie, refused):
    answer = door(method, "/jobs", query, headers, cookie, TOKEN, HOSTS)
    assert answer.redirect is None
    assert (answer.refusal is None) if refused is None else (answer.refusal is not None and refused in answer.refusal)


def test_the_printed_urls_secret_becomes_the_cookie_and_leaves_the_url():
    entry = door("GET", "/jobs", {"secret": TOKEN, "queue": "q"}, H, None, TOKEN, HOSTS)
    assert entry == Door(redirect="/jobs?queue=q")
    assert door("GET", "/", {"secret": TOKEN}, H, "old", TOKEN, HOSTS) == Door(redirect="/")
    assert door("POST", "/", {}, {**H, "Origin": "https://127.0.0.1:8800"}, TOKEN, TOKEN, HOSTS, "https") == Door()


@given(st.text(max_size=40))
def test_no_other_secret_passes(sent):
    answer = door("GET", "/", {}, H, sent, TOKEN, HOSTS)
    assert (answer.refusal is None) == (sent == TOKEN)


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


def test_a_rate_limited_queue_says_so_with_its_limits():
    queues = [{"metadata": {"name": "q", "namespace": "shop"},
               "spec": {"concurrency": 3, "perKeyConcurrency": 1, "rateLimit": {"starts": 100, "per": "1m"}},
               "status": {"rateLimited": True, "recentStarts": 100}},
              {"metadata": {"name": "plain", "namespace": "shop"}, "spec": {}, "status": {"rateLimited": True}}]
    rows = {r.name: r for r in queue_rows(queues, [], NOW)}
    assert (rows["q"].rate_limited, rows["q"].rate_limit, rows["q"].per_key_concurrency) == (True, "100/1m", 1)
    assert not rows["plain"].rate_limited  # no rate limit in its spec: a stale status word is not believed
    html = pages.queues_fragment(list(rows.values()), [0], NOW, wide=False)
    assert "rate limited" in html and "3 · 1 per key · 100/1m starts" in html


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
    assert nightly.invalid is None


def test_an_invalid_schedule_is_flagged_and_offers_no_run_now():
    schedules = [{"metadata": {"name": "broken", "namespace": "shop"}, "spec": {"cron": "61 * * * *"},
                  "status": {"conditions": [{"type": "Invalid", "status": "True", "reason": "InvalidCron",
                                             "message": "cron '61 * * * *': minute 61 is out of range"}]}},
                 {"metadata": {"name": "fine", "namespace": "shop"}, "spec": {"interval": "1m"}}]
    broken, fine = schedule_rows(schedules, [], [])
    assert broken.invalid == "InvalidCron: cron '61 * * * *': minute 61 is out of range" and fine.invalid is None
    html = pages.schedules_fragment([broken, fine], NOW, False)
    assert html.count("run now") == 1 and "invalid: InvalidCron" in html


# --- pages escape what they show -------------------------------------------------------------------------------
def test_pages_escape_values_and_hold_no_secret():
    hostile = job(name="job-<script>", state="running")
    hostile["spec"]["queue"] = '"><img src=x onerror=alert(1)>'
    html = pages.jobs_fragment([hostile], None, JobFilter(), NOW, False, 1, {})
    assert "<script>" not in html and "<img" not in html and "&lt;script&gt;" in html
    whole = pages.page("t", "jobs", "namespace shop", "<p>x</p>")
    assert "/static/dashboard.js" in whole and "token" not in whole


def test_the_job_page_offers_only_the_actions_its_state_allows():
    running = pages.job_page_body("shop", job(state="running"), [], NOW, set(), [])
    dead = pages.job_page_body("shop", job(state="dead"), [], NOW, set(), None)
    assert "/cancel" in running and "/retry" not in running
    assert "/retry" in dead and "/cancel" not in dead and "may not list events" in dead


def test_the_forbidden_message_names_what_was_refused():
    html = pages.forbidden("list jobs in namespace shop", 'jobs.sextant.dev is forbidden: User "bob" cannot list')
    assert "Forbidden" in html and "list jobs in namespace shop" in html and "User &quot;bob&quot;" in html


def test_the_next_page_link_keeps_the_filter_and_the_cursor():
    html = pages.jobs_fragment([job()], "tok/en", JobFilter(queue="q"), NOW, False, 1, {})
    assert 'href="/jobs?queue=q&amp;continue=tok%2Fen"' in html
