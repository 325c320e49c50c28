"""kube/http1: the connections Kube's request-answer calls go over.

The reading of an answer is checked byte by byte (any framing, cut anywhere into reads); the connections against a
real TCP server on 127.0.0.1 that answers as the test scripts it: keep-alive reuse, a connection the server closes,
`Connection: close`, an answer framed by the close, a timeout or an answer too long (never pooled afterwards), and a
path that tries to end the request line.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sextant.kube.http1 import Answer, Connections, TooLarge, _Connection, target
from tests.harness import until


def _read(stream: bytes, cuts: list[int], max_bytes: int | None = None, early: bool = False) -> Answer:
    """Feed stream to a connection in pieces cut at `cuts`; the answer it reads (early: it may end before the
    last piece, as an error does)."""
    loop = asyncio.new_event_loop()
    try:
        conn = _Connection()
        waiter: asyncio.Future[Answer] = loop.create_future()
        conn._waiter, conn._max_bytes = waiter, max_bytes
        bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(stream))), len(stream)]
        for a, b in zip(bounds, bounds[1:]):
            if early and waiter.done():
                break
            assert not waiter.done(), f"the answer was complete after {a} of {len(stream)} bytes"
            conn.data_received(stream[a:b])
        if not waiter.done():
            conn.connection_lost(None)
        return waiter.result()
    finally:
        loop.close()


def _chunked(body: bytes, sizes: list[int], extension: bool = False, trailer: bool = False) -> bytes:
    out, pos = [], 0
    for size in sizes:
        piece = body[pos:pos + size]
        if not piece:
            break
        out.append(f"{len(piece):x}{';x=y' if extension else ''}\r\n".encode() + piece + b"\r\n")
        pos += len(piece)
    if pos < len(body):
        out.append(f"{len(body) - pos:X}\r\n".encode() + body[pos:] + b"\r\n")
    out.append(b"0\r\n" + (b"X-Trailer: 1\r\n" if trailer else b"") + b"\r\n")
    return b"".join(out)


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nAudit-Id: 1\r\n"


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=3000), sizes=st.lists(st.integers(1, 700), max_size=8),
       cuts=st.lists(st.integers(0, 4000), max_size=12), framing=st.sampled_from(["length", "chunked", "close"]),
       extension=st.booleans(), trailer=st.booleans())
def test_an_answer_reads_the_same_however_it_is_framed_and_cut(body: bytes, sizes: list[int], cuts: list[int],
                                                               framing: str, extension: bool, trailer: bool):
    if framing == "length":
        stream = HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    elif framing == "chunked":
        stream = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(body, sizes, extension, trailer)
    else:
        stream = HEAD + b"\r\n" + body
    answer = _read(stream, cuts)
    assert answer == Answer(200, {"content-type": "application/json", "audit-id": "1",
                                  **({"content-length": str(len(body))} if framing == "length" else {}),
                                  **({"transfer-encoding": "chunked"} if framing == "chunked" else {})}, body)


@pytest.mark.parametrize("stream, problem", [
    (b"SPDY/3 200 OK\r\n\r\n", "not an HTTP/1.1 status line"),
    (b"HTTP/1.1 OK\r\n\r\n", "not an HTTP/1.1 status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "malformed Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n", "a chunk not ended by CRLF"),
])
def test_what_is_not_an_http_answer_is_a_value_error_that_says_why(stream: bytes, problem: str):
    with pytest.raises(ValueError, match=problem):
        _read(stream, list(range(len(stream))), early=True)


@pytest.mark.parametrize("stream", [
    HEAD + b"Content-Length: 10\r\n\r\n12345",
    HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\n12345\r\n",
])
def test_an_answer_cut_short_is_a_connection_error(stream: bytes):
    with pytest.raises(ConnectionResetError, match="before the whole answer"):
        _read(stream, [])


@pytest.mark.parametrize("stream", [
    HEAD + b"Content-Length: 11\r\n\r\n",
    HEAD + b"Transfer-Encoding: chunked\r\n\r\n6\r\n123456\r\n6\r\n123456\r\n0\r\n\r\n",
    HEAD + b"\r\n" + b"x" * 11,
])
def test_an_answer_over_max_bytes_is_too_large(stream: bytes):
    with pytest.raises(TooLarge):
        _read(stream, list(range(len(stream))), max_bytes=10, early=True)


@pytest.mark.parametrize("path, params, expected", [
    ("/api/v1/namespaces/a/pods/b-1", None, "/api/v1/namespaces/a/pods/b-1"),
    ("/api/v1/pods", {"labelSelector": "sextant.dev/job,x in (a,b)", "limit": "5"},
     "/api/v1/pods?labelSelector=sextant.dev%2Fjob%2Cx+in+%28a%2Cb%29&limit=5"),
    ("/api/v1/namespaces/a/pods/b HTTP/1.1\r\nX-Evil: 1", None,
     "/api/v1/namespaces/a/pods/b%20HTTP/1.1%0D%0AX-Evil:%201"),
    ("/apis/sextant.dev/v1alpha1/namespaces/a/jobs/ü", None, "/apis/sextant.dev/v1alpha1/namespaces/a/jobs/%C3%BC"),
])
def test_a_request_target_can_never_end_its_line(path: str, params: dict[str, str] | None, expected: str):
    assert target(path, params) == expected


# --- against a real TCP server -------------------------------------------------------------------------------

Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]


@contextlib.asynccontextmanager
async def server(answer: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on 127.0.0.1: `answer(request_head, writer)` writes each answer and says whether to keep the
    connection. Yields its URL and the number of requests each connection served (in order of accepting)."""
    served: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = len(served)
        served.append(0)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                served[index] += 1
                if not await answer(head, writer):
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", served
    finally:
        srv.close()
        await srv.wait_closed()


def _ok(body: bytes = b"{}", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\n" + extra + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


async def _get(connections: Connections, path: str = "/x", timeout: float = 5.0, **kw: object) -> Answer:
    return await connections.request("GET", path, headers={"Accept": "application/json"}, timeout=timeout,
                                     **kw)  # type: ignore[arg-type]


async def test_a_connection_serves_one_request_after_another():
    async def answer(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(_ok(b'{"n": 1}'))
        return True

    async with server(answer) as (url, served):
        connections = Connections(url, False)
        for _ in range(5):
            assert (await _get(connections)).body == b'{"n": 1}'
        answers = await asyncio.gather(*(_get(connections) for _ in range(3)))  # at once: one connection each
        connections.close()
    assert [a.status for a in answers] == [200] * 3
    assert served[0] >= 5 and sum(served) == 8 and len(served) <= 3


async def test_a_connection_the_server_ends_is_not_used_again():
    async def answer(head: bytes, writer: asyncio.StreamWriter) -> bool:
        close = b"/close" in head
        writer.write(_ok(extra=b"Connection: close\r\n" if close else b""))
        return b"/drop" not in head and not close

    async with server(answer) as (url, served):
        connections = Connections(url, False)
        await _get(connections, "/close")  # the answer says so
        await _get(connections, "/drop")  # the server closes after the answer, without saying so
        # its close reaches the pooled connection (a race with a request: the caller's)
        await until(lambda: connections._idle[-1].closed, message="the dropped connection to be seen closed")
        await _get(connections, "/x")
        connections.close()
    assert served == [1, 1, 1]


async def test_a_timed_out_or_too_long_answer_leaves_no_connection_behind():
    async def answer(head: bytes, writer: asyncio.StreamWriter) -> bool:
        if b"/slow" in head:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")  # and the rest never comes
        elif b"/big" in head:
            writer.write(_ok(b"[" + b"1," * 1000 + b"1]"))
        else:
            writer.write(_ok())
        return True

    async with server(answer) as (url, served):
        connections = Connections(url, False)
        with pytest.raises(TimeoutError):
            await _get(connections, "/slow", timeout=0.3)
        with pytest.raises(TooLarge):
            await _get(connections, "/big", max_bytes=100)
        assert (await _get(connections, "/x")).status == 200
        connections.close()
    # Each cut connection was closed: the third request came on a connection of its own.
    assert served == [1, 1, 1]


async def test_a_server_that_refuses_connections_is_an_os_error():
    async with server(lambda head, writer: asyncio.sleep(0, False)) as (url, _):
        pass  # closed: nothing listens on its port any more
    with pytest.raises(OSError):
        await _get(Connections(url, False))


@pytest.mark.parametrize("server_url", ["ftp://example", "https://", "example:443"])
def test_a_server_that_is_not_an_http_url_is_refused(server_url: str):
    with pytest.raises(ValueError, match="an http:// or https:// URL is needed"):
        Connections(server_url, False)


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent():
    async def answer(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(_ok())
        return True

    async with server(answer) as (url, served):
        connections = Connections(url, False)
        for evil in ("Bearer x\r\nX-Evil: 1", "Bearer x\nX-Evil: 1", "Bearer x\r"):
            with pytest.raises(ValueError, match="a request header holds a line break"):
                await connections.request("GET", "/x", headers={"Authorization": evil}, timeout=5)
        connections.close()
    assert served == []
