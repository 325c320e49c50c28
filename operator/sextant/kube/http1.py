"""The connections Kube's request-answer calls go over: HTTP/1.1 keep-alive, over TLS, one request at a time on each.

Why not aiohttp's client for these: its request path (URL building, header multidicts, a timer, a writer task, the
response object) cost ~146 µs of CPU per request against a real API server, this ~95 µs (bench/request_cpu.py: a
small object, TLS, 20 at once), and the operator makes 3.6 requests per job
(bench/results/20261205-115721-operator-cpu.md). The API server's answers need little: a status line, a few headers,
a body framed by Content-Length or chunked. Watches (long streams) stay on aiohttp.

A connection whose answer is not read to its end (a timeout, a cancel, an error, an answer too long to hold) is
closed, never pooled: what is pooled is always at a request boundary.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

from .kubeconfig import tls_context

MAX_HEAD = 64 * 1024  # bytes of status line and headers; more is not an API server's answer
# RFC 3986's characters allowed in a path as they are; anything else (a space, a CR or LF from a name someone typed)
# is percent-encoded, so it can never end the request line.
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_PLAIN_PATH = re.compile(r"[A-Za-z0-9/:@!$&'()*+,;=._~-]*")


class TooLarge(Exception):
    """An answer longer than its reader would hold (Kube.pages then asks for a smaller page)."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


def target(path: str, params: Mapping[str, str] | None) -> str:
    """The request line's target: the path percent-encoded where it must be, and the query."""
    encoded = path if _PLAIN_PATH.fullmatch(path) else quote(path, safe=_PATH_SAFE)
    return f"{encoded}?{urlencode(params)}" if params else encoded


class _Connection(asyncio.Protocol):
    """One connection, and the answer being read on it: head, then a body of Content-Length bytes, or chunks, or
    (without either) everything until the server closes."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = True
        self._buf = bytearray()
        self._waiter: asyncio.Future[Answer] | None = None
        self._max_bytes: int | None = None
        self._reset()

    def _reset(self) -> None:
        self._status = 0
        self._headers: dict[str, str] | None = None
        self._length: int | None = None  # Content-Length framing
        self._chunked = False
        self._chunk: int | None = None  # bytes left of the chunk being read (with its CRLF); None: its size is next
        self._trailers = False
        self._parts: list[bytes] = []
        self._size = 0

    # --- asyncio.Protocol ---
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers is not None and self._length is None and not self._chunked:
            self._finish(b"".join(self._parts))  # framed by the close itself
        else:
            waiter.set_exception(ConnectionResetError(
                f"the connection closed before the whole answer came ({self._size} bytes of body read)"))

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.close()  # nothing was asked: this connection is out of step
            return
        self._buf += data
        try:
            self._read()
        except (ValueError, TooLarge) as exc:
            if not self._waiter.done():
                self._waiter.set_exception(exc)
            self.close()

    # --- requests ---
    def send(self, request: bytes, waiter: asyncio.Future[Answer], max_bytes: int | None) -> None:
        assert self.transport is not None
        self._waiter = waiter
        self._max_bytes = max_bytes
        self._reset()
        self.transport.write(request)

    def close(self, *, gently: bool = False) -> None:
        """gently: at a request boundary (TLS says goodbye); else cut at once, whatever is in flight."""
        self.reusable = False
        if self.transport is not None and not self.closed:
            if gently:
                self.transport.close()
            else:
                self.transport.abort()

    def _read(self) -> None:
        buf = self._buf
        if self._headers is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise ValueError(f"an answer's head is over {MAX_HEAD} bytes")
                return
            self._head(bytes(buf[:end]))
            del buf[:end + 4]
        if self._length is not None:
            if len(buf) >= self._length:
                body = bytes(buf[:self._length])
                del buf[:self._length]
                self._finish(body)
            return
        if not self._chunked:
            self._take(bytes(buf))  # until the server closes
            del buf[:]
            return
        while True:
            if self._trailers:
                # The last chunk was read: trailers (Go sends none) up to an empty line.
                end = 0 if buf[:2] == b"\r\n" else buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                del buf[:end + (2 if end == 0 else 4)]
                self._finish(b"".join(self._parts))
                return
            if self._chunk is None:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 1024:
                        raise ValueError("a chunk size line over 1024 bytes")
                    return
                try:
                    size = int(bytes(buf[:end]).split(b";", 1)[0], 16)
                except ValueError:
                    raise ValueError(f"malformed chunk size {bytes(buf[:min(end, 40)])!r}") from None
                del buf[:end + 2]
                if size == 0:
                    self._trailers = True
                    continue
                self._chunk = size + 2
            if len(buf) < self._chunk:
                return
            if buf[self._chunk - 2:self._chunk] != b"\r\n":
                raise ValueError("a chunk not ended by CRLF")
            self._take(bytes(buf[:self._chunk - 2]))
            del buf[:self._chunk]
            self._chunk = None

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
        self._status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"malformed header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        self._headers = headers
        if headers.get("connection", "").lower() == "close":
            self.reusable = False
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = True
        elif "content-length" in headers:
            try:
                self._length = int(headers["content-length"])
            except ValueError:
                raise ValueError(f"malformed Content-Length {headers['content-length'][:40]!r}") from None
            if self._max_bytes is not None and self._length > self._max_bytes:
                raise TooLarge(self._length)
        elif self._status in (204, 304) or 100 <= self._status < 200:
            self._length = 0
        else:
            self.reusable = False  # framed by the close

    def _take(self, data: bytes) -> None:
        self._size += len(data)
        if self._max_bytes is not None and self._size > self._max_bytes:
            raise TooLarge(self._size)
        self._parts.append(data)

    def _finish(self, body: bytes) -> None:
        waiter, self._waiter = self._waiter, None
        if self._buf:
            self.reusable = False  # more than the answer came: out of step from here on
        assert waiter is not None and self._headers is not None
        if not waiter.done():
            waiter.set_result(Answer(self._status, self._headers, body))


class Connections:
    """Keep-alive connections to one server, at most `limit` at once; the idle ones are reused, newest first."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext | bool, *, limit: int = 256,
                 connect_timeout: float = 10.0) -> None:
        url = urlsplit(server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"server {server!r}: an http:// or https:// URL is needed")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")  # a server URL may carry a path (behind a proxy)
        self.ssl: ssl.SSLContext | None = None
        if url.scheme == "https":  # a bool: verify the server's certificate or not, as aiohttp's ssl= meant
            context = ssl_context if isinstance(ssl_context, ssl.SSLContext) else tls_context(server, ssl_context, None)
            assert isinstance(context, ssl.SSLContext)
            self.ssl = context
        self.connect_timeout = connect_timeout
        self._host_header = url.netloc.rpartition("@")[2]
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(limit)

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      headers: Mapping[str, str], body: bytes | None = None, timeout: float,
                      max_bytes: int | None = None) -> Answer:
        """One request and its whole answer; asyncio.TimeoutError after `timeout` seconds in all, OSError when the
        connection fails, ValueError for an answer that is not HTTP, TooLarge past max_bytes of body."""
        lines = [f"{method} {self.prefix}{target(path, params)} HTTP/1.1", f"Host: {self._host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if any("\r" in line or "\n" in line for line in lines[2:]):
            # A header may carry a caller's words (the HTTP API passes on its caller's token): none ends a line.
            raise ValueError("a request header holds a line break")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        async with self._slots, asyncio.timeout(timeout):
            conn = await self._connection()
            waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
            try:
                conn.send(request, waiter, max_bytes)
                answer = await waiter
            except BaseException:
                conn.close()  # mid-answer: never reused
                raise
            if conn.reusable and not conn.closed:
                self._idle.append(conn)
            else:
                conn.close()
            return answer

    async def _connection(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.connect_timeout):
            _, conn = await loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl)
        return conn

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close(gently=True)

