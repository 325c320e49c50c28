"""The /v2 API under attack and load, against a real operator and API server: bad tokens cost a bounded number of
TokenReviews (a repeated one is remembered, new ones are rate-limited per client), and at most --http-max-in-flight
requests are served at once, each for at most --http-request-timeout, with 429/503 and Retry-After beyond that,
while the probes keep answering."""

from __future__ import annotations

import json
import secrets
import socket
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import wait_for

from .plugin_support import grant
from .support import Operator

FAILED_BURST = 10  # auth.Authorizer's defaults: 10 failed reviews at once per client, then 1 per second
FAILED_RATE = 1.0


def metric(http: httpx.Client, url: str, name: str, **labels: str) -> float:
    text = http.get(url + "/metrics").text
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def token_reviews(http: httpx.Client, url: str) -> float:
    """TokenReviews the API server did for the operator's HTTP API (its Kubernetes client's own request counter)."""
    return metric(http, url, "sextant_http_kube_requests_total", verb="create", resource="tokenreviews", code="201")


def started(op: Operator, http: httpx.Client) -> None:
    op.log_path.parent.mkdir(parents=True, exist_ok=True)
    op.start()
    wait_for(lambda: http.get(op.http_url + "/readyz").status_code == 200, 60,
             message=lambda: f"the operator to be ready; log:\n{op.log_tail()}")


def test_bad_tokens_cost_a_bounded_number_of_token_reviews(cluster, namespace, crds, tmp_path):
    good = grant(cluster, namespace, "caller")
    op = Operator(cluster.kubeconfig, namespace, tmp_path)
    with httpx.Client(timeout=30) as http:
        started(op, http)
        try:
            url, params = op.http_url + "/v2/jobs", {"namespace": namespace}

            def call(token: str) -> httpx.Response:
                return http.get(url, params=params, headers={"Authorization": f"Bearer {token}"})

            assert call(good).status_code == 200
            # One bad token, again and again: one review, then the remembered refusal.
            before = token_reviews(http, op.http_url)
            answers = [call("bad-" + "x" * 40) for _ in range(50)]
            assert {a.status_code for a in answers} == {401}
            assert all("the token was not accepted" in a.json()["error"]["message"] for a in answers)
            assert token_reviews(http, op.http_url) - before == 1

            # A new bad token each time (guessing): the burst is reviewed, then a trickle; the rest are 429.
            before, start = token_reviews(http, op.http_url), time.monotonic()
            answers = [call(secrets.token_urlsafe(32)) for _ in range(200)]
            elapsed = time.monotonic() - start
            reviewed = token_reviews(http, op.http_url) - before
            codes = [a.status_code for a in answers]
            assert set(codes) == {401, 429} and codes.count(401) == reviewed, codes
            # The bucket held FAILED_BURST - 1 tokens (the repeated bad token took one); +1: a refill while reading.
            assert reviewed <= FAILED_BURST + FAILED_RATE * elapsed + 1, (reviewed, elapsed)
            limited = next(a for a in answers if a.status_code == 429)
            assert limited.json()["error"]["reason"] == "TooManyRequests"
            assert int(limited.headers["Retry-After"]) >= 1
            assert "were not accepted by the API server" in limited.json()["error"]["message"]
            assert metric(http, op.http_url, "sextant_http_refused_total", reason="failed-authentication") == \
                codes.count(429)

            # The probes are never limited; and once the bucket refills, a good token is reviewed and served again.
            assert http.get(op.http_url + "/readyz").status_code == 200
            fresh = cluster.kubectl("create", "token", "-n", namespace, "caller", "--duration=1h").stdout.strip()
            wait_for(lambda: call(fresh).status_code == 200, 30, interval=0.5,
                     message="a new good token to be served once the client's bucket refills")
        finally:
            op.stop()


def stall(port: int, path: str, token: str) -> socket.socket:
    """A POST whose body never arrives in full: the request sits in its handler until the deadline."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall((f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"queue\": ").encode())
    return sock


def answer(sock: socket.socket) -> tuple[int, dict[str, str], dict[str, Any]]:
    """Status, headers and JSON body of the one response on a socket (Content-Length framed)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-answer"
        body += chunk
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_a_concurrency_cap_and_a_deadline_answer_429_and_503_with_retry_after(cluster, namespace, crds, tmp_path):
    deadline = 6
    token = grant(cluster, namespace, "caller")
    op = Operator(cluster.kubeconfig, namespace, tmp_path, "--http-max-in-flight", "2",
                  "--http-request-timeout", f"{deadline}s")
    with httpx.Client(timeout=30) as http:
        started(op, http)
        try:
            url, params = op.http_url + "/v2/jobs", {"namespace": namespace}
            headers = {"Authorization": f"Bearer {token}"}
            assert http.get(url, params=params, headers=headers).status_code == 200
            stalled_at = time.monotonic()
            stalled = [stall(op.http_port, f"/v2/jobs?namespace={namespace}", token) for _ in range(2)]
            try:
                wait_for(lambda: metric(http, op.http_url, "sextant_http_in_flight") == 2, deadline - 2,
                         interval=0.05, message="both stalled requests to be in flight")  # /metrics takes no slot
                # Both slots taken: the next request is refused at once, without being looked at.
                refused = http.get(url, params=params, headers=headers)
                assert refused.status_code == 429, refused.text
                error = refused.json()["error"]
                assert error["reason"] == "TooManyRequests" and "maximum of 2" in error["message"]
                assert refused.headers["Retry-After"] == "1"
                for probe in ("/healthz", "/readyz", "/metrics"):  # never refused
                    assert http.get(op.http_url + probe).status_code == 200, probe
                # The stalled requests end at their deadline: 503 with Retry-After, nothing created.
                for sock in stalled:
                    status, answer_headers, body = answer(sock)
                    assert status == 503 and answer_headers["retry-after"] == "1", body
                    assert body["error"]["reason"] == "Timeout"
                    assert f"not done within {deadline} s" in body["error"]["message"]
                assert time.monotonic() - stalled_at >= deadline - 0.5
            finally:
                for sock in stalled:
                    sock.close()
            # The slots are free again.
            wait_for(lambda: http.get(url, params=params, headers=headers).status_code == 200, 10,
                     message="requests to be served again")
            assert http.get(url, params=params, headers=headers).json()["items"] == []
            assert metric(http, op.http_url, "sextant_http_refused_total", reason="deadline") == 2
            assert metric(http, op.http_url, "sextant_http_refused_total", reason="in-flight") == 1
            assert metric(http, op.http_url, "sextant_http_in_flight") == 0
        finally:
            op.stop()


def access_reviews(http: httpx.Client, url: str) -> float:
    return metric(http, url, "sextant_http_kube_requests_total", verb="create", resource="subjectaccessreviews",
                  code="201")


def test_access_reviews_are_remembered_briefly_and_each_user_has_a_rate(cluster, namespace, crds, tmp_path):
    busy, other = grant(cluster, namespace, "busy"), grant(cluster, namespace, "other")
    op = Operator(cluster.kubeconfig, namespace, tmp_path, "--http-user-burst", "5", "--http-user-rate", "1")
    with httpx.Client(timeout=30) as http:
        started(op, http)
        try:
            url, params = op.http_url + "/v2/jobs", {"namespace": namespace}

            def call(token: str) -> httpx.Response:
                return http.get(url, params=params, headers={"Authorization": f"Bearer {token}"})

            before, start = access_reviews(http, op.http_url), time.monotonic()
            answers = [call(busy) for _ in range(12)]
            elapsed = time.monotonic() - start
            codes = [a.status_code for a in answers]
            assert set(codes) == {200, 429}, codes
            # The burst, then a token a second (+1: a refill while counting).
            assert 5 <= codes.count(200) <= 5 + elapsed + 1, (codes, elapsed)
            limited = next(a for a in answers if a.status_code == 429)
            assert int(limited.headers["Retry-After"]) >= 1
            assert limited.json()["error"]["message"].startswith(f"user system:serviceaccount:{namespace}:busy has")
            assert metric(http, op.http_url, "sextant_http_refused_total", reason="user-rate") == codes.count(429)
            # One review answered them all (the same user, verb, resource and namespace, within seconds).
            assert access_reviews(http, op.http_url) - before == 1
            # Another user has a rate of their own.
            assert call(other).status_code == 200
        finally:
            op.stop()
