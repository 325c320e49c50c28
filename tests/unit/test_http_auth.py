"""The /v2 API's token check (http/auth.py) against an API double that answers TokenReviews slowly: a client's
concurrent first requests with one token cost one review and all get its answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sextant.http.auth import Authorizer, HttpError, User


class SlowReviews:
    """Answers each TokenReview after a moment: the tokens in `good` are accepted."""

    def __init__(self, good: set[str]) -> None:
        self.good = good
        self.reviews = 0

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.reviews += 1
        await asyncio.sleep(0.05)
        token = body["spec"]["token"]
        if token in self.good:
            return {"status": {"authenticated": True, "user": {"username": "alice", "uid": "u-1"}}}
        return {"status": {"authenticated": False, "error": "invalid bearer token"}}


async def test_twenty_concurrent_first_requests_with_one_token_cost_one_review_and_no_429():
    kube = SlowReviews({"t-good"})
    auth = Authorizer(kube, failed_burst=10)  # type: ignore[arg-type]
    users = await asyncio.gather(*(auth.authenticate("Bearer t-good", "10.0.0.1") for _ in range(20)))
    assert {u.username for u in users} == {"alice"} and kube.reviews == 1


async def test_concurrent_requests_with_a_refused_token_all_get_401_from_one_review():
    kube = SlowReviews(set())
    auth = Authorizer(kube, failed_burst=10)  # type: ignore[arg-type]
    answers = await asyncio.gather(*(auth.authenticate("Bearer t-bad", "10.0.0.1") for _ in range(20)),
                                   return_exceptions=True)
    assert [a.status for a in answers if isinstance(a, HttpError)] == [401] * 20
    assert kube.reviews == 1


async def test_when_the_first_request_goes_away_a_waiting_one_reviews_the_token_itself():
    kube = SlowReviews({"t-good"})
    auth = Authorizer(kube)  # type: ignore[arg-type]
    first = asyncio.ensure_future(auth.authenticate("Bearer t-good"))
    while kube.reviews < 1:  # the first request's review is under way
        await asyncio.sleep(0)
    second = asyncio.ensure_future(auth.authenticate("Bearer t-good"))
    for _ in range(3):  # turns of the loop: the second request now waits for the first's review
        await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (await second).username == "alice" and kube.reviews == 2


class Reviews:
    """Answers SubjectAccessReviews at once: allowed unless the verb is in `denied`."""

    def __init__(self, denied: set[str]) -> None:
        self.denied, self.reviews = denied, 0

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.reviews += 1
        verb = body["spec"]["resourceAttributes"]["verb"]
        return {"status": {"allowed": verb not in self.denied, "reason": "no RBAC rule"}}


async def test_access_reviews_are_remembered_briefly_per_user_verb_resource_namespace_and_name():
    now = [100.0]
    kube = Reviews({"patch"})
    auth = Authorizer(kube, clock=lambda: now[0], review_ttl=5)  # type: ignore[arg-type]
    alice, bob = User("alice"), User("bob", groups=("dev",))
    for _ in range(10):
        await auth.authorize(alice, "list", "jobs", "shop")
    assert kube.reviews == 1
    await auth.authorize(bob, "list", "jobs", "shop")
    await auth.authorize(alice, "list", "jobs", "other")
    await auth.authorize(alice, "list", "queues", "shop")
    await auth.authorize(alice, "get", "jobs", "shop", "job-a")
    await auth.authorize(alice, "get", "jobs", "shop", "job-b")
    assert kube.reviews == 6
    for _ in range(3):  # a refusal is remembered too, with its words
        with pytest.raises(HttpError, match='User "alice" cannot patch .*: no RBAC rule') as refused:
            await auth.authorize(alice, "patch", "jobs", "shop", "job-a")
        assert refused.value.status == 403
    assert kube.reviews == 7
    now[0] += 5  # its time is up: asked again (a revoked right takes effect within review_ttl)
    await auth.authorize(alice, "list", "jobs", "shop")
    assert kube.reviews == 8
