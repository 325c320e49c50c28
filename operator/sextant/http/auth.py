"""Who is calling the /v2 API and may they: bearer tokens checked with a TokenReview, every request with a
SubjectAccessReview — the API server decides, with the cluster's own RBAC.

A token's review is remembered briefly, accepted or refused, so that a client repeating a token costs the API
server one TokenReview per `token_ttl`. A client sending token after new token that the API server refuses (a
guessing attack, or a broken client in a loop) may cause `failed_burst` reviews at once and `failed_rate` per
second after that; beyond, its requests with tokens not yet reviewed are answered 429 with Retry-After, without
a review. "A client" is the peer address as the operator sees it (behind a proxy: the proxy's).

A SubjectAccessReview's answer is remembered for `review_ttl` (a few seconds), allowed or denied, per user, verb,
resource, namespace and object name: a client repeating one request costs one review per `review_ttl`, and a
revoked right takes effect within it.

The operator's service account needs `create` on tokenreviews (authentication.k8s.io) and
subjectaccessreviews (authorization.k8s.io).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..kube import metrics
from ..kube.client import ApiError, Kube
from ..resources import GROUP, contract
from .limits import ExpiringCache, TokenBuckets


class HttpError(Exception):
    """An API answer other than success: status, reason, message (and the invalid field for 422)."""

    def __init__(self, status: int, reason: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.field = status, reason, message, field
        self.headers = headers or {}


@dataclass(frozen=True)
class User:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())


INVALID_TOKEN = 'Bearer realm="sextant", error="invalid_token"'


class Authorizer:
    def __init__(self, kube: Kube, token_ttl: float = 10.0, failed_burst: int = 10, failed_rate: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, review_ttl: float = 5.0) -> None:
        self.kube = kube
        self.clock = clock
        # (user, verb, resource, namespace, name) → None when allowed, else the refusal's words
        self._reviewed: ExpiringCache[tuple[User, str, str, str, str], tuple[str | None]] = ExpiringCache(review_ttl)
        self._accepted: ExpiringCache[str, User] = ExpiringCache(token_ttl)
        self._refused: ExpiringCache[str, str] = ExpiringCache(token_ttl)  # token digest → the refusal's words
        self._failures = TokenBuckets(failed_burst, failed_rate)  # per client address
        self._reviewing: dict[str, asyncio.Event] = {}  # token digest → set when its review in flight ends

    async def authenticate(self, authorization: str | None, client: str = "") -> User:
        if not authorization:
            raise HttpError(401, "Unauthorized", "no credentials: send `Authorization: Bearer <token>` (a "
                                                 "Kubernetes token, e.g. from `kubectl create token`)",
                            headers={"WWW-Authenticate": 'Bearer realm="sextant"'})
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise HttpError(401, "Unauthorized", "the Authorization header must be `Bearer <token>`",
                            headers={"WWW-Authenticate": 'Bearer realm="sextant"'})
        digest = hashlib.sha256(token.encode()).hexdigest()
        while True:
            now = self.clock()
            user = self._accepted.get(digest, now)
            if user is not None:
                return user
            pending = self._reviewing.get(digest)
            if pending is None:
                break
            # One review per token at a time: a client's concurrent first requests wait for it and then read its
            # answer from the caches (accepted, or refused: 401) instead of each costing a review, and beyond
            # failed_burst of them in flight a 429. When it ended without an answer, the next one reviews.
            await pending.wait()
        self._reviewing[digest] = done = asyncio.Event()
        try:
            return await self._authenticate(digest, token, client, now)
        finally:
            del self._reviewing[digest]
            done.set()

    async def _authenticate(self, digest: str, token: str, client: str, now: float) -> User:
        refusal = self._refused.get(digest, now)
        if refusal is not None:
            raise HttpError(401, "Unauthorized", refusal, headers={"WWW-Authenticate": INVALID_TOKEN})
        if not self._failures.take(client, now):
            metrics.HTTP_REFUSED.labels("failed-authentication").inc()
            wait = self._failures.retry_after(client, now)
            raise HttpError(429, "TooManyRequests",
                            f"too many tokens from {client or 'this client'} were not accepted by the API server; "
                            f"retry in {wait} s", headers={"Retry-After": str(wait)})
        try:
            review = await self._review(contract.TOKEN_REVIEWS_PATH, {"apiVersion": "authentication.k8s.io/v1",
                                                        "kind": "TokenReview", "spec": {"token": token}})
        except HttpError:
            self._failures.give_back(client, self.clock())  # the API server's trouble, not the client's failure
            metrics.TOKEN_REVIEWS.labels("error").inc()
            raise
        status = review.get("status") or {}
        if not status.get("authenticated"):
            metrics.TOKEN_REVIEWS.labels("refused").inc()
            detail = status.get("error") or "the token is not valid (expired, revoked, or for another cluster)"
            refusal = f"the token was not accepted: {detail}"
            self._refused.put(digest, refusal, self.clock())
            raise HttpError(401, "Unauthorized", refusal, headers={"WWW-Authenticate": INVALID_TOKEN})
        metrics.TOKEN_REVIEWS.labels("accepted").inc()
        self._failures.give_back(client, self.clock())
        info = status.get("user") or {}
        user = User(username=info.get("username", ""), uid=info.get("uid", ""),
                    groups=tuple(info.get("groups") or ()),
                    extra=tuple(sorted((k, tuple(v)) for k, v in (info.get("extra") or {}).items())))
        self._accepted.put(digest, user, self.clock())
        return user

    async def authorize(self, user: User, verb: str, resource: str, namespace: str, name: str | None = None) -> None:
        key = (user, verb, resource, namespace, name or "")
        remembered = self._reviewed.get(key, self.clock())
        if remembered is None:
            remembered = (await self._access_review(user, verb, resource, namespace, name),)
            self._reviewed.put(key, remembered, self.clock())
        if remembered[0] is not None:
            raise HttpError(403, "Forbidden", remembered[0])

    async def _access_review(self, user: User, verb: str, resource: str, namespace: str,
                             name: str | None) -> str | None:
        """One SubjectAccessReview: None when allowed, else the refusal in the API server's words."""
        attributes: dict[str, Any] = {"namespace": namespace, "verb": verb, "group": GROUP, "resource": resource}
        if name:
            attributes["name"] = name
        spec: dict[str, Any] = {"user": user.username, "groups": list(user.groups), "resourceAttributes": attributes}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        review = await self._review(contract.ACCESS_REVIEWS_PATH, {"apiVersion": "authorization.k8s.io/v1",
                                                     "kind": "SubjectAccessReview", "spec": spec})
        status = review.get("status") or {}
        if status.get("allowed") and not status.get("denied"):
            return None
        target = f'resource "{resource}" in API group "{GROUP}" in the namespace "{namespace}"'
        message = f'User "{user.username}" cannot {verb} {target}'
        if status.get("reason"):
            message += f": {status['reason']}"
        return message

    async def _review(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.kube.create(path, body)
        except ApiError as exc:
            raise HttpError(503, "ServiceUnavailable",
                            f"cannot check the credentials with the API server ({exc.status} {exc.reason}: "
                            f"{exc.message}); the operator needs create on tokenreviews and subjectaccessreviews",
                            headers={"Retry-After": "5"}) from None
