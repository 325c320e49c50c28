"""The handful of Kubernetes API calls the local node agent makes: JSON over one aiohttp session.

Kept apart from the operator's client on purpose: the agent is a test and laptop tool with its own, tiny
needs (get/create/patch/delete, one list+watch), and it must not change when the operator's client does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from ..kubeconfig import Connection

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
RETRYABLE = frozenset({429, 500, 502, 503, 504})


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str = "", path: str = "") -> None:
        self.status = status
        self.body = body
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        message = body.get("message", "") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: {status} {self.reason}: {message}")


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class Api:
    def __init__(self, conn: Connection, user_agent: str = "sextant-localnode") -> None:
        self.conn = conn
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.conn.ssl_context, limit=32),
                headers={"User-Agent": self.user_agent, "Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        attempts: int = 4,
        timeout: float = 30,
    ) -> dict[str, Any]:
        """One API call; retries transport errors and 429/5xx a few times; ApiError for any other non-2xx."""
        data = json.dumps(body) if body is not None else None
        for attempt in range(1, attempts + 1):
            headers = {**self.conn.headers()}
            if data is not None:
                headers["Content-Type"] = content_type
            try:
                async with self.session.request(
                    method, self.conn.server + path, data=data, params=params, headers=headers,
                    timeout=aiohttp.ClientTimeout(total=timeout),
                ) as resp:
                    text = await resp.text()
                    if resp.status < 300:
                        return json.loads(text) if text else {}
                    try:
                        parsed: Any = json.loads(text)
                    except ValueError:
                        parsed = text
                    if resp.status not in RETRYABLE or attempt == attempts:
                        raise ApiError(resp.status, parsed, method, path)
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                if attempt == attempts:
                    raise
                log.debug("%s %s: %r; retrying", method, path, exc)
            await asyncio.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")

    async def get(self, path: str, **params: str) -> dict[str, Any]:
        return await self.request("GET", path, params=params or None)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=body)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.request("DELETE", path, body=body)

    async def watch(self, path: str, resource_version: str, **params: str) -> AsyncIterator[dict[str, Any]]:
        """The events of one watch request (until the server closes it); Gone on 410."""
        query = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": "290", **params}
        async with self.session.get(
            self.conn.server + path, params=query, headers=self.conn.headers(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=330),
        ) as resp:
            if resp.status == 410:
                raise Gone()
            if resp.status >= 300:
                text = await resp.text()
                try:
                    parsed: Any = json.loads(text)
                except ValueError:
                    parsed = text
                raise ApiError(resp.status, parsed, "WATCH", path)
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        obj = event.get("object") or {}
                        if obj.get("code") == 410:
                            raise Gone()
                        raise ApiError(int(obj.get("code") or 500), obj, "WATCH", path)
                    yield event
