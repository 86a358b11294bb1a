"""uvicorn as `serve` configures it takes a request only within bounds (bounded_requests.py):
a head of at most 64 KiB, a whole request within the read deadline. Over a real socket,
with the deadline shortened; the app records what reached it."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import psutil
import pytest
from starlette.types import Message, Receive, Scope, Send

from ac_serve import serve_env, serve_process
from ac_threaded_uvicorn import uvicorn_in_a_thread
from activity_core.bounded_requests import MAX_HEAD_BYTES, BoundedRequests
from activity_core.serve import Listen, uvicorn_config

READ_SECONDS = 0.5
LINGER_SECONDS = 0.5


@dataclass
class Seen:
    """What reached the app: each request's path and client port, and the messages it
    received."""

    paths: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)


def recording_app(seen: Seen):  # type: ignore[no-untyped-def]
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        seen.paths.append(scope["path"])
        seen.ports.append(scope["client"][1])
        if scope["path"] == "/late-reader":
            await asyncio.sleep(READ_SECONDS * 3)
        while True:
            message = await receive()
            seen.messages.append(message)
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        if scope["path"] == "/slow":
            await asyncio.sleep(READ_SECONDS * 3)
        body = json.dumps({"path": scope["path"]}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


@contextmanager
def serving(seen: Seen) -> Iterator[int]:
    config = uvicorn_config(recording_app(seen), Listen("127.0.0.1", 0))
    assert issubclass(config.http, BoundedRequests)
    shorter = {"request_read_seconds": READ_SECONDS, "linger_seconds": LINGER_SECONDS}
    config.http = type("Quick", (config.http,), shorter)
    with uvicorn_in_a_thread(config) as port:
        yield port


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(10)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def receive_until(sock: socket.socket, marker: bytes) -> bytes:
    received = b""
    while marker not in received:
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    return received


def refusal_of(answer: bytes) -> tuple[int, dict[str, str], dict[str, str]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in header_lines)
    parsed: dict[str, str] = json.loads(body)
    assert int(headers["content-length"]) == len(body)
    return int(status_line.split(" ")[1]), headers, parsed


def get(path: str, extra_headers: bytes = b"") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n".encode() + extra_headers + b"\r\n"


def post_head(path: str, length: int, extra_headers: bytes = b"") -> bytes:
    """A POST's head announcing a body of `length` bytes (the body is sent apart)."""
    start = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {length}\r\n".encode()
    return start + extra_headers + b"\r\n"


# -- the head's size -----------------------------------------------------------------


def test_a_head_within_the_limit_is_served() -> None:
    seen = Seen()
    filler = b"".join(b"x-fill-%d: %s\r\n" % (n, b"a" * 990) for n in range(60))
    with serving(seen) as port, connect(port) as sock:
        sock.sendall(get("/near", filler))
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert seen.paths == ["/near"]


@pytest.mark.parametrize("at_once", [True, False], ids=["in-one-send", "line-by-line"])
def test_a_head_over_the_limit_is_refused_before_the_app(at_once: bool) -> None:
    seen = Seen()
    filler = b"".join(b"x-fill-%d: %s\r\n" % (n, b"a" * 990) for n in range(70))
    request = get("/big", filler)
    assert len(request) > MAX_HEAD_BYTES
    with serving(seen) as port, connect(port) as sock:
        if at_once:
            sock.sendall(request)
        else:
            for start in range(0, len(request), 1000):
                sock.sendall(request[start : start + 1000])
        answer = read_all(sock)
    status, headers, body = refusal_of(answer)
    assert status == 431
    assert headers["connection"] == "close"
    assert headers["content-type"] == "application/json"
    assert body["code"] == "headers_too_large"
    assert str(MAX_HEAD_BYTES) in body["detail"]
    assert seen.paths == []


def test_a_refused_connection_lingers_so_that_the_refusal_is_not_reset() -> None:
    # Closed at once with the client still sending, the server's kernel would answer the
    # client's bytes with a reset, which can destroy the refusal on its way to the client.
    # So the server ends its side, reads and drops for a while, and only then closes.
    line = b"x-a: " + b"a" * 994 + b"\r\n"
    with serving(Seen()) as port, connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n")
        for _ in range(MAX_HEAD_BYTES // len(line) + 2):
            sock.sendall(line)
        answer = b""
        while chunk := sock.recv(65536):  # the refusal, then the server's end of sending
            answer += chunk
        assert refusal_of(answer)[0] == 431
        for _ in range(5):  # taken and dropped: no reset while the server lingers
            sock.sendall(line)
            time.sleep(LINGER_SECONDS / 20)
        time.sleep(LINGER_SECONDS * 2)
        with pytest.raises(OSError):  # closed after the linger: reset, then a broken pipe
            for _ in range(100):
                sock.sendall(line)
                time.sleep(0.01)


def test_an_endless_head_is_cut_off_without_growing_the_process() -> None:
    seen = Seen()
    line = b"x-a: " + b"a" * 8000 + b"\r\n"
    process = psutil.Process()
    with serving(seen) as port, connect(port) as sock:
        before = process.memory_info().rss
        sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n")
        sent = 0
        with pytest.raises(OSError):  # reset or broken pipe: the server closed
            while sent < 200 * 1024 * 1024:
                sock.sendall(line)
                sent += len(line)
        grown = process.memory_info().rss - before
    # what the kernel's buffers took before the close reached us, not 200 MiB
    assert sent < 32 * 1024 * 1024
    assert grown < 16 * 1024 * 1024
    assert seen.paths == []


# -- the read deadline ---------------------------------------------------------------


def test_a_connection_that_sends_nothing_is_closed_without_an_answer() -> None:
    with serving(Seen()) as port, connect(port) as sock:
        started = time.monotonic()
        assert read_all(sock) == b""
        assert READ_SECONDS * 0.8 <= time.monotonic() - started < READ_SECONDS * 10


def test_a_head_that_stops_arriving_is_answered_408() -> None:
    seen = Seen()
    with serving(seen) as port, connect(port) as sock:
        sock.sendall(b"POST /ops-runs/claim HTTP/1.1\r\nHost: t\r\nContent-Ty")
        status, headers, body = refusal_of(read_all(sock))
    assert (status, body["code"]) == (408, "request_timeout")
    assert headers["connection"] == "close"
    assert seen.paths == []


def test_a_head_begun_in_the_read_that_ended_the_request_before_has_its_deadline() -> None:
    seen = Seen()
    with serving(seen) as port, connect(port) as sock:
        sock.sendall(get("/first") + b"POST /second HTTP/1.1\r\nHost: t\r\nContent-Le")
        received = read_all(sock)
    first, _, refusal = received.partition(b"0\r\n\r\n")  # the end of the chunked answer
    assert first.startswith(b"HTTP/1.1 200 ") and b'{"path": "/first"}' in first
    status, _, body = refusal_of(refusal)
    assert (status, body["code"]) == (408, "request_timeout")
    assert seen.paths == ["/first"]


def test_a_head_dribbled_a_byte_at_a_time_is_held_to_the_deadline() -> None:
    with serving(Seen()) as port, connect(port) as sock:
        started = time.monotonic()
        with pytest.raises(OSError):
            for byte in get("/dribble", b"x-long: " + b"a" * 1000 + b"\r\n"):
                sock.sendall(bytes([byte]))
                time.sleep(READ_SECONDS / 10)
        assert time.monotonic() - started < READ_SECONDS * 10


def test_blank_lines_dribbled_between_requests_are_held_to_the_deadline() -> None:
    # the parser skips empty lines before a request line, and any byte stops uvicorn's
    # keep-alive timer: without the deadline this connection would be held for ever
    with serving(Seen()) as port, connect(port) as sock:
        sock.sendall(get("/first"))
        receive_until(sock, b'"/first"')
        started = time.monotonic()
        closed = False
        while not closed and time.monotonic() - started < READ_SECONDS * 10:
            try:
                sock.sendall(b"\r\n")
            except OSError:
                break
            readable, _, _ = select.select([sock], [], [], READ_SECONDS / 5)
            closed = bool(readable) and sock.recv(65536) == b""
        assert time.monotonic() - started < READ_SECONDS * 10


def test_a_body_that_stops_arriving_closes_the_connection_and_the_app_sees_it() -> None:
    seen = Seen()
    with serving(seen) as port, connect(port) as sock:
        sock.sendall(post_head("/body", 20, b"Content-Type: application/json\r\n") + b'{"half":')
        assert read_all(sock) == b""
    assert seen.paths == ["/body"]
    assert seen.messages[-1]["type"] == "http.disconnect"


def test_an_answer_may_take_longer_than_the_deadline() -> None:
    # a long-poll claim: the request has arrived; only the answer waits
    seen = Seen()
    with serving(seen) as port, connect(port) as sock:
        sock.sendall(get("/slow"))
        answer = receive_until(sock, b'{"path": "/slow"}')
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_each_request_of_a_kept_alive_connection_has_its_own_deadline() -> None:
    seen = Seen()
    with (
        serving(seen) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as http,
    ):
        for n in range(4):
            assert http.get(f"/kept-{n}").status_code == 200
            time.sleep(READ_SECONDS * 0.6)
        # the pool kept one connection: 4 requests over 2.4 deadlines
        assert http.get("/last").status_code == 200
    assert seen.paths == ["/kept-0", "/kept-1", "/kept-2", "/kept-3", "/last"]
    assert len(set(seen.ports)) == 1


def test_a_pipelined_request_is_not_timed_while_the_server_does_not_read() -> None:
    # /next's head arrives while /slow is answered: the server stops reading (flow control)
    # for longer than the deadline, and its body comes once the server reads again
    seen = Seen()
    with serving(seen) as port, connect(port) as sock:
        sock.sendall(get("/slow") + post_head("/next", 5))
        first = receive_until(sock, b'"/slow"')
        sock.sendall(b"hello")
        second = receive_until(sock, b'"/next"')
    assert first.startswith(b"HTTP/1.1 200 ") and second.startswith(b"HTTP/1.1 200 ")
    assert seen.paths == ["/slow", "/next"]
    assert seen.messages[-1] == {"type": "http.request", "body": b"hello", "more_body": False}


def test_a_client_waiting_for_100_continue_is_not_late() -> None:
    # uvicorn sends `100 Continue` when the app first reads the body; this app reads it
    # only after three deadlines
    seen = Seen()
    with serving(seen) as port, connect(port) as sock:
        sock.sendall(post_head("/late-reader", 5, b"Expect: 100-continue\r\n"))
        assert receive_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 100 ")
        sock.sendall(b"hello")
        answer = receive_until(sock, b'"/late-reader"')
    assert b"HTTP/1.1 200 " in answer
    assert seen.messages == [{"type": "http.request", "body": b"hello", "more_body": False}]


def test_an_upgrade_request_is_answered_as_http() -> None:
    # no WebSocket endpoint: the request reaches the app, and the deadline does not cut it
    seen = Seen()
    with serving(seen) as port, connect(port) as sock:
        sock.sendall(
            get(
                "/upgrade",
                b"Connection: Upgrade\r\nUpgrade: websocket\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
            )
        )
        answer = receive_until(sock, b'"/upgrade"')
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert seen.paths == ["/upgrade"]


# -- as `activity-core serve` runs ------------------------------------------------------


async def test_serve_refuses_an_oversized_head(db_dsn: str) -> None:
    async with serve_process(serve_env(db_dsn)) as (_, url):
        huge = {f"x-fill-{n}": "a" * 1000 for n in range(70)}
        async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
            answer = await http.get("/healthz", headers=huge)
            assert answer.status_code == 431
            assert answer.json()["code"] == "headers_too_large"
            assert (await http.get("/healthz")).status_code == 200
