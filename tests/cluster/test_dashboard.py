"""`sextant dashboard` in a real browser (Debian's headless Chromium, driven by Playwright) against the real
control plane: the page loads, a job created from the CLI appears without a reload and moves to succeeded, cancel
from the page ends a running job cancelled, and a user whose RBAC has no `jobs` sees "Forbidden".

Two helpers that are not tests run only when asked (they are measurements and pictures, not checks):
SEXTANT_DASHBOARD_SCREENSHOTS=DIR takes the screenshots of docs/dashboard.md (hack/dashboard-screenshots.sh), and
SEXTANT_DASHBOARD_10K=1 measures the jobs view with 10k jobs in a namespace (docs/dashboard.md, "10k jobs")."""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sextant.kube import kubeconfig
from sextant.kube.client import Kube
from tests.harness import wait_for

from prometheus_client.parser import text_string_to_metric_families

from .plugin_support import ID_RE, job_json, ok, sextant, token_kubeconfig
from .support import WorkerProcess, apply, get_json, handler, job, queue

pytestmark = pytest.mark.cluster

CHROMIUM = "/usr/bin/chromium"
FOREVER = {"sextant.dev/test-outcome": "run-forever"}
EXIT = "sextant.dev/test-exit-code"
URL_RE = re.compile(r"at ((https?://[^/\s]+/)\?secret=([\w-]+)) ")


class DashboardProcess:
    """`sextant dashboard --port 0` as its own process; `printed` is the URL it printed (with its secret), `url`
    the same without it, `enter(page)` opens the printed one (the browser keeps the secret as a cookie)."""

    def __init__(self, kubeconfig_path: Path, namespace: str, log_dir: Path, *extra: str) -> None:
        self.log_path = log_dir / "dashboard.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sextant", "--kubeconfig", str(kubeconfig_path), "dashboard",
             "-n", namespace, "--port", "0", *extra], stdout=subprocess.PIPE, stderr=open(self.log_path, "wb"),
            text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the URL line, once it listens
        match = URL_RE.search(line)
        assert match, f"no URL in {line!r}: {self.log_path.read_text()}"
        self.printed, self.url, self.secret = match.groups()

    def enter(self, page: Any, path: str = "") -> None:
        page.goto(self.printed)
        assert page.url == self.url, page.url  # the secret left the address bar
        if path:
            page.goto(self.url + path)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def dashboard(cluster, namespace, crds, tmp_path) -> Iterator[Any]:
    started: list[DashboardProcess] = []

    def start(config: Path | None = None, *extra: str) -> DashboardProcess:
        proc = DashboardProcess(config or cluster.kubeconfig, namespace, tmp_path, *extra)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    context.close()


def create(cluster, namespace: str, handler_name: str, queue_name: str = "q") -> str:
    ident = ok(sextant(cluster, "jobs", "create", "-n", namespace, "--queue", queue_name,
                       "--handler", handler_name)).strip()
    assert ID_RE.match(ident), ident
    return ident


def job_state(cluster, namespace: str, ident: str) -> str | None:
    job = yaml.safe_load(cluster.kubectl("get", "-n", namespace, "jobs.sextant.dev", ident.replace("_", "-"),
                                         "-o", "json").stdout)
    return (job.get("status") or {}).get("state")


# ---------------------------------------------------------------------------------------------------------- tests
def test_a_job_created_from_the_cli_appears_without_a_reload_and_succeeds(cluster, namespace, operator, dashboard,
                                                                          page):
    from playwright.sync_api import expect

    apply(cluster, namespace, queue("q", concurrency=2),
          handler("h", annotations={"sextant.dev/test-duration": "2s"}))
    dash = dashboard()
    dash.enter(page, "jobs")
    expect(page.locator("h1")).to_have_text("Jobs")
    expect(page.locator("header .scope")).to_have_text(f"namespace {namespace}")
    loads = []
    page.on("load", lambda _: loads.append(1))
    ident = create(cluster, namespace, "h")
    row = page.locator(f'tr[data-job="{ident}"]')
    expect(row).to_be_visible(timeout=15_000)
    expect(row.locator(".state")).to_have_text("succeeded", timeout=60_000)
    assert loads == [], "the page was reloaded"
    newer = create(cluster, namespace, "h")  # newest first, whatever the names' order
    expect(page.locator("#jobs tbody tr").first).to_have_attribute("data-job", newer, timeout=15_000)
    expect(page.locator("#jobs tbody tr").nth(1)).to_have_attribute("data-job", ident)
    head = page.locator("#jobs thead th").all_inner_texts()
    assert head == ["id", "state", "attempt", "sequence", "queue", "handler", "schedule", "created", "error"], head
    expect(row.locator("td").nth(3)).to_have_text("1")  # the attempt's sequence
    # The queues view counts it, the job's page draws its attempt.
    page.goto(dash.url)
    expect(page.locator("#queues")).to_contain_text("q")
    page.goto(f"{dash.url}jobs/{namespace}/{ident}")
    expect(page.locator("#job-state")).to_have_text("succeeded")
    expect(page.locator(".timeline .bar.succeeded")).to_have_count(1)
    expect(page.locator("#attempts")).to_contain_text(f"{ident.replace('_', '-')}-1")
    took = page.locator("#attempts tbody tr td").nth(6).inner_text()
    assert re.fullmatch(r"\d+\.\d{3}s", took), took  # to the millisecond
    # A finished job offers neither action: succeeded can be neither cancelled nor retried.
    expect(page.locator(".actions button")).to_have_count(0)


def test_cancel_from_the_page_ends_a_running_job_cancelled(cluster, namespace, operator, dashboard, page):
    from playwright.sync_api import expect

    apply(cluster, namespace, queue("q", concurrency=1, cancelGrace="1s"), handler("slow", annotations=FOREVER))
    ident = create(cluster, namespace, "slow")
    wait_for(lambda: job_state(cluster, namespace, ident) == "running", 30, message=f"job {ident} to run")
    dash = dashboard()
    dash.enter(page, f"jobs/{namespace}/{ident}")
    expect(page.locator("#job-state")).to_have_text("running")
    expect(page.get_by_role("button", name="retry")).to_have_count(0)  # running: only a cancel is offered
    asked = confirming(page)
    page.get_by_role("button", name="cancel").click()
    expect(page.locator("#flash")).to_contain_text(f"job {ident}: cancel requested")
    assert asked == [f"Cancel job {ident}?"]
    expect(page.locator("#job-state")).to_have_text("cancelled", timeout=60_000)
    assert job_state(cluster, namespace, ident) == "cancelled"
    # Cancelled: neither cancel nor retry is offered any more (resources/job.py's CANCELLABLE and RETRYABLE).
    expect(page.locator(".actions button")).to_have_count(0)


def test_a_user_whose_rbac_forbids_jobs_sees_forbidden_and_foreign_posts_are_refused(cluster, namespace, crds,
                                                                                    dashboard, page, tmp_path):
    from playwright.sync_api import expect

    sa = "no-jobs"
    cluster.kubectl("create", "serviceaccount", "-n", namespace, sa)
    cluster.kubectl("create", "role", "-n", namespace, sa, "--verb=get,list,watch",
                    "--resource=queues.sextant.dev,schedules.sextant.dev")
    cluster.kubectl("create", "rolebinding", "-n", namespace, sa, f"--role={sa}",
                    f"--serviceaccount={namespace}:{sa}")
    token = cluster.kubectl("create", "token", "-n", namespace, sa, "--duration=1h").stdout.strip()
    dash = dashboard(token_kubeconfig(cluster, token, namespace, tmp_path / "no-jobs.kubeconfig"))
    dash.enter(page, "jobs")
    refusal = page.locator(".forbidden")
    expect(refusal).to_contain_text("Forbidden")
    expect(refusal).to_contain_text(f"list jobs in namespace {namespace}")
    expect(refusal).to_contain_text(f'system:serviceaccount:{namespace}:{sa}" cannot list resource "jobs"')
    page.goto(dash.url)  # the queues view needs the jobs too: it says so rather than showing zeros
    expect(page.locator(".forbidden")).to_contain_text("list or watch jobs")
    expect(page.locator("#queues")).to_have_count(0)
    page.goto(dash.url + "schedules")  # what the user may read is shown
    expect(page.locator("#schedules-empty")).to_be_visible()
    assert dash.secret not in page.content()  # no page holds the secret: a GET without the cookie reads nothing


def test_every_request_needs_the_secret_which_the_printed_url_turns_into_a_strict_cookie(cluster, namespace, crds,
                                                                                        dashboard):
    dash = dashboard()
    # Without the secret, a GET reads nothing: not a page, not a fragment, not a log, not the script.
    for path in ("", "jobs", f"jobs/{namespace}/job_abcdefgh", "fragment/jobs", f"logs/{namespace}/p",
                 "static/dashboard.js"):
        answer = httpx.get(dash.url + path)
        assert answer.status_code == 401 and "open the URL that `sextant dashboard` printed" in answer.text, path
    assert httpx.get(dash.url + "jobs?secret=guess").status_code == 401
    # The printed URL: the cookie is set (HttpOnly, SameSite=Strict) and the browser sent on without the secret.
    entry = httpx.get(dash.url + f"jobs?queue=q&secret={dash.secret}")
    assert entry.status_code == 303 and entry.headers["Location"] == "/jobs?queue=q"
    cookie = entry.headers["Set-Cookie"]
    assert re.match(r"sextant-dashboard-\d+=" + re.escape(dash.secret) + ";", cookie), cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie, cookie
    jar = {cookie.split("=", 1)[0]: dash.secret}
    page = httpx.get(dash.url + "jobs", cookies=jar)
    assert page.status_code == 200 and dash.secret not in page.text
    # An action without the cookie, or from another origin or Host, is refused before it acts.
    cancel = f"{dash.url}api/jobs/{namespace}/job_abcdefgh/cancel"
    refused = [httpx.post(cancel), httpx.post(cancel, headers={"X-Sextant-Token": dash.secret}),
               httpx.post(cancel + f"?secret={dash.secret}"),
               httpx.post(cancel, cookies=jar, headers={"Origin": "http://evil.example"}),
               httpx.post(cancel, cookies=jar, headers={"Host": "evil.example:80"})]
    assert [r.status_code for r in refused] == [401, 401, 401, 403, 403]
    assert "secret" in refused[0].json()["message"] and "Origin" in refused[3].json()["message"]
    allowed = httpx.post(cancel, cookies=jar)  # ours: the API server decides
    assert allowed.status_code == 409 and "not found" in allowed.json()["message"], allowed.text


def test_a_pod_log_is_read_with_limit_bytes(cluster, namespace, crds, dashboard, local_node):
    """3000 lines of 400 bytes (1.2 MB): the API server sends at most 512 KiB of them, so the dashboard shows the
    first 512 KiB of the tail it asked for, and says how to read the rest."""
    script = "i=0; while [ $i -lt 3000 ]; do printf 'line %05d %0390d\\n' $i 0; i=$((i+1)); done"
    apply(cluster, namespace, local_node.pod("chatty", script))
    wait_for(lambda: "Succeeded" in cluster.kubectl("get", "pod", "-n", namespace, "chatty", "-o",
                                                     "jsonpath={.status.phase}").stdout, 60,
             message="the chatty pod to finish")
    dash = dashboard()
    entry = httpx.get(f"{dash.printed}")
    jar = dict(entry.cookies)
    log = httpx.get(f"{dash.url}logs/{namespace}/chatty", cookies=jar)
    assert log.status_code == 200, log.text
    note, _, text = log.text.partition("\n")
    assert note == "[at most the last 5000 lines and 512 KiB of them are shown; `sextant logs` shows the whole log]"
    assert len(text.encode()) <= 512 * 1024 and text.startswith("line 00000 ")  # cut by the API server: its start


def test_a_non_loopback_address_without_tls_is_refused_at_start(cluster):
    proc = sextant(cluster, "dashboard", "--address", "0.0.0.0", "--port", "0", timeout=20)
    assert proc.returncode == 2 and proc.stdout == ""  # a usage error: nothing started
    assert "--address 0.0.0.0 is not a loopback address" in proc.stderr and "--allow-plain-http" in proc.stderr
    assert "--tls-cert" in proc.stderr


def test_over_tls_on_every_interface_the_cookie_is_secure(cluster, namespace, crds, dashboard, tmp_path):
    if cluster.local.external:
        pytest.skip("uses the local control plane's certificates (kwokctl's pki) as test certificates")
    pki = cluster.local.workdir / "pki"  # admin.crt's names include 127.0.0.1 and localhost
    dash = dashboard(None, "--address", "0.0.0.0", "--tls-cert", str(pki / "admin.crt"), "--tls-key",
                     str(pki / "admin.key"))
    assert dash.url.startswith("https://0.0.0.0:")
    local = dash.url.replace("0.0.0.0", "127.0.0.1")
    trust = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    entry = httpx.get(f"{local}?secret={dash.secret}", verify=trust)
    assert entry.status_code == 303 and "Secure" in entry.headers["Set-Cookie"], entry.headers
    assert httpx.get(local + "jobs", verify=trust, cookies=dict(entry.cookies)).status_code == 200
    assert httpx.get(local + "jobs", verify=trust).status_code == 401
    with pytest.raises(httpx.HTTPError):
        httpx.get(local.replace("https", "http"), timeout=2)  # no plain HTTP beside it


def confirming(page: Any) -> list[str]:
    """Accept every confirmation dialog the page opens; what each asked, in order."""
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    return asked


def job_lists(cluster) -> float:
    """LIST requests the API server has served for Jobs of sextant.dev (its own request counter), less those for
    WorkerPools: the namespace controller, deleting earlier tests' namespaces, lists every resource of each (both
    kinds alike, once per pass), and the dashboard never lists WorkerPools for its jobs view."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    lists = {"jobs": 0.0, "workerpools": 0.0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "apiserver_request_total" and s.labels.get("verb") == "LIST" \
                    and s.labels.get("group") == "sextant.dev" and s.labels.get("resource") in lists:
                lists[s.labels["resource"]] += s.value
    return lists["jobs"] - lists["workerpools"]


def test_the_jobs_view_makes_no_list_call_per_request_whatever_the_filter(cluster, namespace, crds, dashboard,
                                                                         page):
    from playwright.sync_api import expect

    for i in range(3):
        apply(cluster, namespace, job(f"job-abcd{i:04d}", "q", "h"))
    dash = dashboard()
    dash.enter(page, "jobs?q=abcd0001")
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    before = job_lists(cluster)
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    for text in ["abcd0002", "zzzz", "abcd"] * 10:  # a text that matches nothing used to read every job
        answer = httpx.get(dash.url + f"jobs?q={text}&queue=q", cookies=cookies)
        assert answer.status_code == 200
    page.goto(dash.url + "jobs?q=abcd")
    expect(page.locator("#jobs tbody tr")).to_have_count(3)
    # 30 GETs, no LIST of theirs (one per GET would be 30).
    assert job_lists(cluster) - before < 5


def test_why_a_job_waits_its_conditions_events_and_a_bulk_retry_of_a_filter(cluster, namespace, operator, dashboard,
                                                                            page):
    from playwright.sync_api import expect

    apply(cluster, namespace, queue("q", concurrency=3, maxAttempts=1), handler("fails", annotations={EXIT: "3"}))
    waiting = create(cluster, namespace, "fails", "gretings")  # no such queue: it waits, Blocked
    doomed = [create(cluster, namespace, "fails") for _ in range(3)]
    for ident in doomed:
        wait_for(lambda: job_state(cluster, namespace, ident) == "dead", 60, message=f"job {ident} to be dead")
    dash = dashboard()
    dash.enter(page, f"jobs/{namespace}/{waiting}")
    expect(page.locator("#job-waiting")).to_contain_text("QueueNotFound: queue 'gretings' does not exist",
                                                         timeout=30_000)
    expect(page.locator("#conditions")).to_contain_text("Blocked")
    page.goto(f"{dash.url}jobs/{namespace}/{doomed[0]}")
    expect(page.locator("#events tbody tr").first).to_be_visible()
    expect(page.get_by_role("button", name="retry")).to_be_visible()
    expect(page.get_by_role("button", name="cancel")).to_have_count(0)
    # The jobs list says what went wrong; every dead job of the queue is retried with one confirmation.
    page.goto(f"{dash.url}jobs?queue=q&state=dead")
    expect(page.locator(f'tr[data-job="{doomed[0]}"] .error-text')).to_contain_text("exit code 3")
    asked = confirming(page)
    page.get_by_role("button", name="retry all 3").click()
    expect(page.locator("#flash")).to_contain_text("retry requested for 3 of 3 jobs (queue q, state dead)")
    assert asked == ["Retry the 3 failed or dead jobs that match (queue q, state dead)?"]
    for ident in doomed:
        wait_for(lambda: len(job_json(cluster, namespace, ident)["status"].get("attempts") or []) == 2, 60,
                 message=f"job {ident} to run again")


def test_a_queue_is_paused_and_resumed_from_its_row_with_one_confirmation(cluster, namespace, operator, dashboard,
                                                                          page):
    from playwright.sync_api import expect

    apply(cluster, namespace, queue("q"), handler("h"))

    def paused() -> bool | None:
        return get_json(cluster, namespace, "queues.sextant.dev", "q")["spec"].get("paused")

    dash = dashboard()
    dash.enter(page)
    row = page.locator('tr[data-queue="q"]')
    asked = confirming(page)
    row.get_by_role("button", name="pause").click()
    wait_for(lambda: paused() is True, 20, message="spec.paused set by the dashboard")
    expect(row.locator(".paused")).to_be_visible(timeout=30_000)
    row.get_by_role("button", name="resume").click()
    wait_for(lambda: paused() is False, 20, message="spec.paused cleared by the dashboard")
    expect(row.locator(".paused")).to_have_count(0, timeout=30_000)
    assert asked == ["Pause queue q? running attempts finish, nothing new starts.",
                     "Resume queue q? its queued jobs start again, in order."]


def test_an_invalid_schedule_is_flagged_and_offers_no_run_now(cluster, namespace, operator, dashboard, page):
    from playwright.sync_api import expect

    apply(cluster, namespace, queue("q"), handler("h"),
          {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule", "metadata": {"name": "nowhere"},
           "spec": {"interval": "1h", "timeZone": "Mars/Olympus_Mons", "jobTemplate": {"queue": "q", "handler": "h"}}},
          {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule", "metadata": {"name": "hourly"},
           "spec": {"interval": "1h", "jobTemplate": {"queue": "q", "handler": "h"}}})
    dash = dashboard()
    dash.enter(page, "schedules")
    broken = page.locator('tr[data-schedule="nowhere"]')
    expect(broken.locator(".invalid")).to_contain_text("invalid: InvalidTimeZone", timeout=30_000)
    expect(broken.get_by_role("button", name="run now")).to_have_count(0)
    expect(page.locator('tr[data-schedule="hourly"]').get_by_role("button", name="run now")).to_be_visible()


# ------------------------------------------------------------------------------------------ not tests: on request
@pytest.mark.skipif(not os.environ.get("SEXTANT_DASHBOARD_SCREENSHOTS"), reason="SEXTANT_DASHBOARD_SCREENSHOTS=DIR")
def test_screenshots(cluster, namespace, operator, dashboard, page, tmp_path):
    """The pictures of docs/dashboard.md: a few queues and jobs in every state, a schedule, a worker."""
    from playwright.sync_api import expect

    out = Path(os.environ["SEXTANT_DASHBOARD_SCREENSHOTS"])
    out.mkdir(parents=True, exist_ok=True)
    fast = {"backoff": {"policy": "fixed", "initial": "1s"}}
    apply(cluster, namespace, queue("emails", concurrency=2, maxAttempts=2, **fast),
          queue("reports", concurrency=1, maxAttempts=3, backoff={"policy": "fixed", "initial": "10m"}),
          queue("inline", concurrency=4),
          handler("send", annotations={"sextant.dev/test-duration": "1s"}),
          handler("flaky", annotations={"sextant.dev/test-exit-code": "3", "sextant.dev/test-duration": "1s"}),
          handler("slow", annotations=FOREVER),
          {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": "nap"},
           "spec": {"worker": {}}},
          {"apiVersion": "sextant.dev/v1alpha1", "kind": "Schedule", "metadata": {"name": "nightly-report"},
           "spec": {"interval": "30s", "jobTemplate": {"queue": "emails", "handler": "send"}}})
    worker = WorkerProcess(cluster.kubeconfig, namespace, "inline-1", tmp_path, "--module", "napping",
                           "--queue", "inline", "--handler", "nap", "--concurrency", "4").start()
    try:
        for _ in range(6):
            create(cluster, namespace, "send", "emails")
        flaky = create(cluster, namespace, "flaky", "emails")
        create(cluster, namespace, "slow", "reports")
        create(cluster, namespace, "slow", "reports")
        for _ in range(2):
            ok(sextant(cluster, "jobs", "create", "-n", namespace, "--queue", "inline", "--handler", "nap",
                       "--payload", '{"seconds": 600}'))
        wait_for(lambda: job_state(cluster, namespace, flaky) == "dead", 60, message="the flaky job to be dead")
        dash = dashboard()
        dash.enter(page)
        expect(page.locator("#queues")).to_contain_text("inline")
        page.screenshot(path=str(out / "dashboard-queues.png"))
        page.goto(dash.url + "jobs")
        expect(page.locator("#jobs")).to_be_visible()
        page.screenshot(path=str(out / "dashboard-jobs.png"))
        page.goto(f"{dash.url}jobs/{namespace}/{flaky}")
        expect(page.locator(".timeline .bar")).to_have_count(2)
        page.screenshot(path=str(out / "dashboard-job.png"), full_page=True)
        page.goto(dash.url + "schedules")
        expect(page.locator("#schedules")).to_contain_text("nightly-report")
        page.screenshot(path=str(out / "dashboard-schedules.png"))
        page.goto(dash.url + "workers")
        expect(page.locator("#workers")).to_contain_text("inline-1")
        page.screenshot(path=str(out / "dashboard-workers.png"))
    finally:
        worker.stop()


@pytest.mark.skipif(not os.environ.get("SEXTANT_DASHBOARD_10K"), reason="SEXTANT_DASHBOARD_10K=1")
def test_measure_10k_jobs(cluster, namespace, crds, dashboard, page):
    """Time to first render and to filter the jobs view with 10k jobs in the namespace (no operator: the jobs stay
    as created; 10 queues, 4 handlers). Prints the figures; asserts only that the right rows are there."""
    from playwright.sync_api import expect

    count = int(os.environ.get("SEXTANT_DASHBOARD_JOBS", "10000"))

    async def make() -> None:
        conn = kubeconfig.load(str(cluster.kubeconfig))
        async with Kube(conn, user_agent="dashboard-10k") as kube:
            gate = asyncio.Semaphore(64)

            async def one(i: int) -> None:
                async with gate:
                    await kube.create(f"/apis/sextant.dev/v1alpha1/namespaces/{namespace}/jobs", {
                        "apiVersion": "sextant.dev/v1alpha1", "kind": "Job",
                        "metadata": {"name": f"job-{i:08d}"},
                        "spec": {"queue": f"q{i % 10}", "handler": f"h{i % 4}", "payload": {"n": i}}})

            await asyncio.gather(*(one(i) for i in range(count)))

    async def clear() -> None:  # one deletecollection, so that the namespace goes quickly
        async with Kube(kubeconfig.load(str(cluster.kubeconfig)), user_agent="dashboard-10k") as kube:
            await kube.request("DELETE", f"/apis/sextant.dev/v1alpha1/namespaces/{namespace}/jobs")

    def run(coroutine: Any) -> None:  # Playwright's sync API already runs a loop in this thread
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, coroutine).result()

    began = time.monotonic()
    run(make())
    made = time.monotonic() - began
    try:
        _measure(dashboard(), page, count, made)
    finally:
        run(clear())


def _measure(dash: DashboardProcess, page: Any, count: int, made: float) -> None:
    from playwright.sync_api import expect

    figures: dict[str, float] = {}
    dash.enter(page)

    def timed(label: str, url: str, ready: str) -> None:
        start = time.monotonic()
        page.goto(url)
        expect(page.locator(ready)).to_be_visible(timeout=60_000)
        figures[label] = time.monotonic() - start

    timed("queues view, first render (the cache lists 10k jobs)", dash.url, "#queues")
    timed("queues view, again", dash.url, "#queues")
    timed("jobs view, first page", dash.url + "jobs", "#jobs")
    timed("jobs view, filter queue=q3", dash.url + "jobs?queue=q3", "#jobs")
    timed("jobs view, filter queue=q3 handler=h1", dash.url + "jobs?queue=q3&handler=h1", "#jobs")
    timed("jobs view, filter id text '00009'", dash.url + "jobs?q=00009", "#jobs")
    timed("jobs view, filter id text matching 1 job", dash.url + f"jobs?q={count - 1:08d}", "#jobs")
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    page.goto(dash.url + "jobs?queue=q3&handler=h1")
    expect(page.locator("#jobs tbody tr")).to_have_count(50)
    report = [f"{count} jobs created in {made:.1f}s"] + [f"{label}: {seconds * 1000:.0f} ms"
                                                          for label, seconds in figures.items()]
    print("\n".join(["", "dashboard with 10k jobs:", *report]))
    Path(os.environ.get("SEXTANT_DASHBOARD_10K_OUT", "/tmp/dashboard-10k.txt")).write_text("\n".join(report) + "\n")
