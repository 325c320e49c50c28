"""Who is calling the /v2 API and may they: bearer tokens checked with a TokenReview, every request with a
SubjectAccessReview — the API server decides, with the cluster's own RBAC.

The operator's service account needs `create` on tokenreviews (authentication.k8s.io) and
subjectaccessreviews (authorization.k8s.io).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from ..kube import ApiError, Kube
from ..resources import GROUP

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


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


class Authorizer:
    def __init__(self, kube: Kube, token_ttl: float = 10.0) -> None:
        self.kube = kube
        self.token_ttl = token_ttl
        self._tokens: dict[str, tuple[float, User]] = {}

    async def authenticate(self, authorization: str | None) -> User:
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
        cached = self._tokens.get(digest)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        review = await self._review(TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                                    "spec": {"token": token}})
        status = review.get("status") or {}
        if not status.get("authenticated"):
            detail = status.get("error") or "the token is not valid (expired, revoked, or for another cluster)"
            raise HttpError(401, "Unauthorized", f"the token was not accepted: {detail}",
                            headers={"WWW-Authenticate": 'Bearer realm="sextant", error="invalid_token"'})
        info = status.get("user") or {}
        user = User(username=info.get("username", ""), uid=info.get("uid", ""),
                    groups=tuple(info.get("groups") or ()),
                    extra=tuple(sorted((k, tuple(v)) for k, v in (info.get("extra") or {}).items())))
        if len(self._tokens) > 10_000:
            self._tokens.clear()
        self._tokens[digest] = (time.monotonic() + self.token_ttl, user)
        return user

    async def authorize(self, user: User, verb: str, resource: str, namespace: str, name: str | None = None) -> None:
        attributes: dict[str, Any] = {"namespace": namespace, "verb": verb, "group": GROUP, "resource": resource}
        if name:
            attributes["name"] = name
        spec: dict[str, Any] = {"user": user.username, "groups": list(user.groups), "resourceAttributes": attributes}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        review = await self._review(ACCESS_REVIEWS, {"apiVersion": "authorization.k8s.io/v1",
                                                     "kind": "SubjectAccessReview", "spec": spec})
        status = review.get("status") or {}
        if status.get("allowed") and not status.get("denied"):
            return
        target = f'resource "{resource}" in API group "{GROUP}" in the namespace "{namespace}"'
        message = f'User "{user.username}" cannot {verb} {target}'
        if status.get("reason"):
            message += f": {status['reason']}"
        raise HttpError(403, "Forbidden", message)

    async def _review(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.kube.create(path, body)
        except ApiError as exc:
            raise HttpError(503, "ServiceUnavailable",
                            f"cannot check the credentials with the API server ({exc.status} {exc.reason}: "
                            f"{exc.message}); the operator needs create on tokenreviews and subjectaccessreviews")
