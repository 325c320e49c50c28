"""The async Kubernetes client of the operator, the runner, `sextant worker`, the dashboard, `sextant dev` and the local
node agent: JSON in, JSON out, retries, counters (per verb, resource and code; writes refused by the fence)."""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson

from . import jsontext
from .kubeconfig import Connection

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# What a dropped, reset, truncated or stalled connection raises: aiohttp's errors of every kind (a truncated chunk
# is a ClientPayloadError, not a connection error), timeouts, and the socket's own (a TLS reset is an OSError).
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
FIRST_PAGE = 10  # items on the first page of a list sized by bytes (Kube.pages): objects of any weight fit
MAX_RETRY_AFTER = 30.0  # seconds; a larger (or malformed) Retry-After is not obeyed blindly
CONNECTIONS = 256  # keep-alive connections to the API server at most, at once
CONNECT_TIMEOUT = 10.0  # seconds to open a connection, within a request's own timeout
# Seconds an idle connection is kept: under the API server's own idle timeout (90 s), so that it is we who close it.
KEEPALIVE = 60.0


# Asked for by writes whose caller needs only the new metadata: the API server sends it as a PartialObjectMetadata
# (for any resource: built-in or custom), or the whole object if it cannot.
ACCEPT_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def _is_list(path: str) -> bool:
    """A GET of a collection (…/pods) rather than of one object (…/pods/NAME): the Kubernetes verb."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    core = parts[2:] if parts and parts[0] == "api" else parts[3:]
    if core[:1] == ["namespaces"] and len(core) >= 3:
        core = core[2:]
    return len(core) == 1


class ApiError(Exception):
    """An answer of the API server that is not a success (status 0: no answer at all), from either client.

    Made with a status that has its own class, it is of that class, whoever raises it: ApiError(404, …) is a
    NotFound, as OSError(ENOENT, …) is a FileNotFoundError; so a caller writes `except NotFound:`."""

    def __new__(cls, status: int, *args: Any, **kwargs: Any) -> ApiError:
        return super().__new__(_BY_STATUS.get(status, cls) if cls is ApiError else cls)

    def __init__(self, status: int, body: dict[str, Any] | str, method: str = "", path: str = "") -> None:
        self.status = status
        self.body = body
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        message = body.get("message", "") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: {status} {self.reason}: {message}")

    @property
    def message(self) -> str:
        return self.body.get("message", "") if isinstance(self.body, dict) else str(self.body)


class NotFound(ApiError):
    """404: the object (or its namespace, or its kind) does not exist."""


class Conflict(ApiError):
    """409: the object already exists (a create), or changed since the resourceVersion written against."""


class Gone(ApiError):
    """410: the watch's resourceVersion is too old, or a list's continue token has expired: list again."""


_BY_STATUS: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 410: Gone}


class TooLarge(Exception):
    """An answer longer than its reader would hold (Kube.pages then asks for a smaller page)."""


class NotLeader(ApiError):
    """A write refused before it was sent: this replica does not lead (fencing, controller/leader.py)."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(503, {"reason": "NotLeader", "message": "this replica is not the leader"}, method, path)


def retry_after(value: str | None) -> float:
    """A Retry-After header in seconds, within [0, MAX_RETRY_AFTER]; 0 when absent or not a number of seconds."""
    try:
        seconds = float(value or 0)
    except ValueError:
        return 0.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER) if seconds == seconds else 0.0  # NaN is not a delay


def _resource_of(path: str) -> str:
    """'/api/v1/namespaces/ns/pods/x/status' → 'pods/status' (for the request counters)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if "namespaces" in parts:
        i = parts.index("namespaces")
        parts = parts[:i] + parts[i + 2:] if len(parts) > i + 2 else parts[:i] + ["namespaces"]
    core = parts[2:] if parts and parts[0] == "api" else parts[3:]
    if not core:
        return "?"
    resource = core[0]
    return f"{resource}/{core[2]}" if len(core) > 2 else resource


class Kube:
    """An async Kubernetes client: JSON in, JSON out, ApiError (NotFound, Conflict, Gone) for every non-2xx answer."""

    def __init__(self, conn: Connection, user_agent: str = "sextant-operator", attempts: int = 5,
                 fence: Callable[[], bool] | None = None) -> None:
        self.conn = conn
        self.user_agent = user_agent
        self.attempts = attempts
        self.fence = fence  # when set, every write first asks it whether this replica may still write
        self.fenced = 0  # writes refused by the fence
        self.requests: Counter[tuple[str, str, int]] = Counter()  # (verb, resource, code)
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._token: str | None = None
        self._headers: dict[tuple[str | None, bool], dict[str, str]] = {}  # by (content type, metadata only)

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        """The session of the running event loop: its keep-alive connections belong to that loop (a process may
        run one loop after another with one Kube)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.conn.ssl_context, limit=CONNECTIONS,
                                               keepalive_timeout=KEEPALIVE),
                timeout=_timeout(None),
                # The API server sets no cookie; and no Accept-Encoding: a gzipped list page costs the API server
                # and this process CPU that a local link does not pay back.
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("Accept-Encoding",),
            )
            self._session_loop = loop
        return self._session

    def _prepared(self, content_type: str | None, metadata_only: bool = False) -> dict[str, str]:
        """A request's headers, built once for each kind of request and token (a rotated token builds them again).
        A header holding a line break (the HTTP API passes its caller's token on) is refused here, before anything
        is sent."""
        token = self.conn.token()
        if token != self._token:
            self._token, self._headers = token, {}
        headers = self._headers.get((content_type, metadata_only))
        if headers is None:
            headers = {"User-Agent": self.user_agent, "Accept": ACCEPT_METADATA if metadata_only else "application/json"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            if content_type is not None:
                headers["Content-Type"] = content_type
            if any("\r" in value or "\n" in value for value in headers.values()):
                raise ValueError("a request header holds a line break")
            self._headers[(content_type, metadata_only)] = headers
        return headers

    async def close(self) -> None:
        if self._session is not None and self._session_loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None

    def _count(self, verb: str, resource: str, code: int) -> None:
        self.requests[(verb, resource, code)] += 1

    async def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json",
                      retry: bool = True, timeout: float = 60.0, metadata_only: bool = False) -> dict[str, Any]:
        """timeout: seconds for each try, the whole of it (connecting, sending, the answer). metadata_only: the
        answer is the object's metadata alone (a PartialObjectMetadata), if the server can (else the object)."""
        answer, _ = await self._send(method, path, params=params, body=body, content_type=content_type, retry=retry,
                                     timeout=timeout, metadata_only=metadata_only)
        return answer

    async def _send(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                    body: Any = None, content_type: str = "application/json", retry: bool = True,
                    timeout: float = 60.0, max_bytes: int | None = None,
                    metadata_only: bool = False) -> tuple[dict[str, Any], int]:
        """request(), and the size of the answer's JSON. With max_bytes, an answer longer than that is not read
        further: TooLarge (not retried)."""
        if method != "GET" and self.fence is not None and not self.fence():
            self.fenced += 1
            raise NotLeader(method, path)
        data = orjson.dumps(body) if body is not None else None
        try:
            headers = self._prepared(content_type if data is not None else None, metadata_only)
        except ValueError as exc:
            raise ApiError(0, str(exc), method, path) from None
        verb = _VERBS.get(method, method.lower()) if method != "GET" else ("list" if _is_list(path) else "get")
        resource = _resource_of(path)  # once, not per try: the counters' key
        url = self.conn.server + path
        for attempt in range(1, self.attempts + 1):
            try:
                async with self.session.request(method, url, params=params, data=data, headers=headers,
                                                timeout=_timeout(timeout), allow_redirects=False) as resp:
                    raw = await _read(resp, max_bytes)
                status = resp.status
                self._count(verb, resource, status)
                payload = _decode(raw)
                if status < 300:
                    if isinstance(payload, dict):
                        return payload, len(raw)
                    if raw.strip():  # a body that is not a JSON object: cut short, or not the API server's
                        raise ValueError(f"malformed response ({len(raw)} bytes): {raw[:100]!r}")
                    return {}, len(raw)
                error = ApiError(status, payload, method, path)
                if not retry or status not in RETRYABLE_STATUS or attempt == self.attempts:
                    raise error
                delay = retry_after(resp.headers.get("Retry-After"))
            except (*TRANSPORT_ERRORS, ValueError) as exc:
                self._count(verb, resource, 0)
                if not retry or attempt == self.attempts:
                    raise ApiError(0, f"{type(exc).__name__}: {exc}", method, path) from exc
                delay = 0.0
            await asyncio.sleep(max(delay, min(5.0, 0.1 * 2**attempt) * (0.5 + random.random())))
        raise AssertionError("unreachable")

    async def get(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=body)

    async def create_as_sent(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create; what comes back is body with the server's metadata (uid, resourceVersion, creationTimestamp):
        only the metadata is sent back, not the whole object encoded again. Its spec is as sent, not as the server
        defaulted it, and it has no status: for a caller that reads only what it wrote (the operator's pods)."""
        return with_metadata(body, await self.request("POST", path, body=body, metadata_only=True))

    async def merge_patch(self, path: str, body: dict[str, Any], *, retry: bool = True) -> dict[str, Any]:
        return await self.request("PATCH", path, body=body, content_type="application/merge-patch+json", retry=retry)

    async def replace_status(self, path: str, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        """Write a custom resource's whole status, only if it is still at obj's resourceVersion (optimistic
        concurrency: a stale writer meets a 409). None when it is gone or changed meanwhile: the watch brings
        the new version, and with it another look. What comes back is obj with the new metadata and this status.

        A PUT of the status subresource: the API server keeps everything but the status from the stored object,
        and skips the encode-merge-decode a merge patch costs it (8 % of its CPU under a burst). The spec is not
        sent: the server takes it from the stored object anyway, and a payload need not be encoded again."""
        meta = obj["metadata"]
        body = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                             "resourceVersion": meta["resourceVersion"]},
                "status": status}
        try:
            answer = await self.request("PUT", f"{path}/status", body=body, retry=False, metadata_only=True)
        except (NotFound, Conflict):
            return None
        # The server sends back the metadata alone; spec and metadata but the version are the stored object's,
        # which obj is, and the status is what was written (the CRDs are generated from the models, so nothing
        # written is pruned, and their status schemas have no defaults).
        return with_metadata({**obj, "status": status}, answer)

    async def delete(self, path: str, grace_seconds: int | None = None,
                     preconditions: dict[str, str] | None = None) -> dict[str, Any]:
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if preconditions:
            options["preconditions"] = preconditions
        return await self.request("DELETE", path, body=options)

    async def pages(self, path: str, params: dict[str, Any] | None = None, page: int = 500,
                    page_bytes: int | None = None) -> AsyncIterator[tuple[list[dict[str, Any]], str | None]]:
        """A list, page by page, so that a caller can digest each before the next arrives (100k objects never
        sit in memory twice): (items, None), and on the last page (items, the list's resourceVersion, from
        which a watch continues). The caller may drop each item once digested: nothing else holds the page.

        With page_bytes, a page holds about that much JSON, whatever its objects weigh: the first asks for
        FIRST_PAGE items, each next one for as many as page_bytes holds at the size per item of the one before
        (up to `page`, and at most 8 times as many as the one before). An answer longer than 3 × page_bytes is
        not read further, and that page is asked for again with a quarter of the items. So 10,000 jobs of 256 KiB
        come ~30 at a time, and 100k small ones in pages of thousands."""
        limit = page if page_bytes is None else min(page, FIRST_PAGE)
        cap = None if page_bytes is None else 3 * page_bytes
        query = {**(params or {}), "limit": str(limit)}
        ahead = self._get_soon(path, query, cap)
        try:
            while True:
                try:
                    body, size = await ahead
                except TooLarge:
                    if limit == 1:
                        raise ApiError(0, f"one object is over {cap} bytes of JSON", "GET", path) from None
                    limit = max(1, limit // 4)
                    query["limit"] = str(limit)
                    ahead = self._get_soon(path, query, cap)
                    continue
                meta = body.get("metadata", {})
                items = body.get("items") or []
                del body
                if not meta.get("continue"):
                    yield items, meta.get("resourceVersion", "")
                    return
                if page_bytes is not None and items and size:
                    limit = max(1, min(page, 8 * limit, int(page_bytes * len(items) / size)))
                    query["limit"] = str(limit)
                # Ask for the next page before the caller digests this one: the API server encodes it on another
                # core meanwhile (100k jobs: start-up in the larger of the two times, not their sum).
                query["continue"] = meta["continue"]
                ahead = self._get_soon(path, query, cap)
                await asyncio.sleep(0)  # the request goes out now, before the caller's digest holds the loop
                yield items, None
                del items
        finally:
            if not ahead.done():
                ahead.cancel()

    def _get_soon(self, path: str, query: dict[str, Any], max_bytes: int | None = None) -> asyncio.Future[Any]:
        future = asyncio.ensure_future(self._send("GET", path, params=dict(query), max_bytes=max_bytes))
        # A page asked for and never awaited (the caller stopped early) must not log "exception never retrieved".
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        return future

    async def list(self, path: str, params: dict[str, Any] | None = None,
                   page: int = 500) -> tuple[list[dict[str, Any]], str]:
        """All items (in pages) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        resource_version = ""
        async for chunk, version in self.pages(path, params, page):
            items.extend(chunk)
            resource_version = version or resource_version
        return items, resource_version

    async def watch(self, path: str, resource_version: str, params: dict[str, Any] | None = None,
                    timeout: int = 300, opened: Callable[[], None] | None = None) -> AsyncIterator[tuple[str, dict]]:
        """Watch events from resource_version on: (type, object); BOOKMARKs included. Raises Gone on 410, and
        ApiError for everything else that ends it early: an error status, a dropped or truncated stream (code 0),
        a line that is not a watch event. `opened` is called once the server has answered 200."""
        query = {**(params or {}), "watch": "true", "resourceVersion": resource_version,
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout)}
        try:
            async with self.session.get(self.conn.server + path, params=query, headers=self._prepared(None),
                                        timeout=_timeout(timeout + 30, read=True)) as resp:
                self._count("watch", _resource_of(path), resp.status)
                if resp.status >= 300:
                    raise ApiError(resp.status, _decode(await resp.read()), "WATCH", path)
                if opened is not None:
                    opened()
                buffer = b""
                async for chunk in resp.content.iter_any():
                    # All the events a read brought, split at once (the rest is not copied again for each).
                    *lines, buffer = (buffer + chunk).split(b"\n") if buffer else chunk.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield _event(line, path)
                if buffer.strip():  # the stream ended inside an event: it was cut, not finished
                    raise ApiError(0, f"the watch stream ended inside an event ({len(buffer)} bytes)", "WATCH", path)
        except TRANSPORT_ERRORS as exc:
            self._count("watch", _resource_of(path), 0)
            raise ApiError(0, f"{type(exc).__name__}: {exc}", "WATCH", path) from exc


def _event(line: bytes, path: str) -> tuple[str, dict[str, Any]]:
    """One line of a watch stream as (type, object); Gone or ApiError for an ERROR event, ApiError for a line
    that is not an event at all (the stream is not to be trusted from there on)."""
    try:
        event = jsontext.loads(line)
    except ValueError as exc:
        raise ApiError(0, f"malformed watch event ({len(line)} bytes): {exc}", "WATCH", path) from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str) \
            or not isinstance(event.get("object"), dict):
        raise ApiError(0, f"malformed watch event: {line[:100]!r}", "WATCH", path)
    if event["type"] == "ERROR":
        status = event["object"]
        code = status.get("code")
        raise ApiError(code if isinstance(code, int) else 500, status, "WATCH", path)
    return event["type"], event["object"]


@functools.lru_cache(maxsize=16)
def _timeout(seconds: float | None, read: bool = False) -> aiohttp.ClientTimeout:
    """A request's whole timeout (and, read: between reads), built once for each value a caller uses."""
    return aiohttp.ClientTimeout(total=seconds, sock_connect=CONNECT_TIMEOUT, sock_read=seconds if read else None)


async def _read(resp: aiohttp.ClientResponse, max_bytes: int | None) -> bytes:
    """The answer's body; with max_bytes, TooLarge once it is longer, and no more of it read (its connection is
    closed, not reused: it is mid-answer)."""
    if max_bytes is None:
        return await resp.read()
    if resp.content_length is not None and resp.content_length > max_bytes:
        resp.close()
        raise TooLarge(resp.content_length)
    body = bytearray()
    async for chunk in resp.content.iter_any():
        body += chunk
        if len(body) > max_bytes:
            resp.close()
            raise TooLarge(len(body))
    return bytes(body)


def with_metadata(obj: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """obj with the metadata of a metadata-only answer; a whole object (a server that sent one) as it is."""
    if answer.get("kind") != "PartialObjectMetadata" or not isinstance(answer.get("metadata"), dict):
        return answer
    return {**obj, "metadata": answer["metadata"]}


def _decode(data: bytes) -> Any:
    try:
        return jsontext.loads(data) if data else {}
    except ValueError:
        return data.decode(errors="replace")
