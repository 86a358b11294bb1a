"""uvicorn as `serve` configures it writes each answer to the socket in one write: status
line, headers and body together; an answer streamed over several awaits still arrives
whole and in order (one_write_answers.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from ac_threaded_uvicorn import uvicorn_in_a_thread
from activity_core import one_write_answers
from activity_core.serve import Listen, uvicorn_config


class SocketWrites(asyncio.Transport):
    """The socket transport, with each write it is given kept in `sent`."""

    def __init__(self, transport: asyncio.Transport, sent: list[bytes]) -> None:
        super().__init__()
        self._transport = transport
        self._sent = sent

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._sent.append(bytes(data))
        self._transport.write(data)

    def close(self) -> None:
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()


LARGE = bytes(range(256)) * 800


async def answers(scope: Scope, receive: Receive, send: Send) -> None:
    """/one: a JSON answer in one body message; /large: 200 KB in one body message;
    /streamed: three body messages, awaited apart."""
    if scope["type"] != "http":
        return
    await receive()
    if scope["path"] == "/one":
        body = b'{"runs":[]}'
        headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    if scope["path"] == "/large":
        headers = [(b"content-length", str(len(LARGE)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": LARGE})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for part in (b"first,", b"second,", b"third"):
        await send({"type": "http.response.body", "body": part, "more_body": True})
        await asyncio.sleep(0.01)
    await send({"type": "http.response.body", "body": b""})


@contextmanager
def served() -> Iterator[int]:
    config = uvicorn_config(answers, Listen("127.0.0.1", 0))
    config.lifespan = "off"
    with uvicorn_in_a_thread(config) as port:
        yield port


def _read_answer(conn: socket.socket, ends_with: bytes) -> bytes:
    data = b""
    deadline = time.monotonic() + 10
    while not data.endswith(ends_with):
        assert time.monotonic() < deadline, f"no whole answer: {data!r}"
        chunk = conn.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return data


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    writes: list[bytes] = []

    class RecordedWrites(one_write_answers.WritesOfAnIteration):
        def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
            super().__init__(SocketWrites(transport, writes), loop)

    monkeypatch.setattr(one_write_answers, "WritesOfAnIteration", RecordedWrites)
    return writes


def test_each_answer_leaves_in_one_write_on_a_kept_alive_connection(sent: list[bytes]) -> None:
    with served() as port, socket.create_connection(("127.0.0.1", port)) as conn:
        request = b"GET /one HTTP/1.1\r\nhost: test\r\n\r\n"
        conn.sendall(request)
        first = _read_answer(conn, b'{"runs":[]}')
        conn.sendall(request)
        second = _read_answer(conn, b'{"runs":[]}')
    assert first.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\ncontent-length: 11\r\n" in first
    assert b"server:" not in first
    # two answers, two writes, each the whole answer
    assert sent == [first, second]


def test_an_answer_streamed_over_awaits_arrives_whole_and_in_order(sent: list[bytes]) -> None:
    with served() as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"GET /streamed HTTP/1.1\r\nhost: test\r\n\r\n")
        answer = _read_answer(conn, b"0\r\n\r\n")
    head, _, chunked = answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head
    assert chunked == b"6\r\nfirst,\r\n7\r\nsecond,\r\n5\r\nthird\r\n0\r\n\r\n"
    # the status line and headers went with the first part; each later part on its own
    assert b"".join(sent) == answer
    assert len(sent) == 4
    assert sent[0].endswith(b"\r\n\r\n6\r\nfirst,\r\n")


def test_a_large_answer_is_written_at_once_and_arrives_whole(sent: list[bytes]) -> None:
    with served() as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"GET /large HTTP/1.1\r\nhost: test\r\n\r\n")
        answer = _read_answer(conn, LARGE)
    assert answer.partition(b"\r\n\r\n")[2] == LARGE
    # past FLUSH_AT_BYTES the held headers and the body leave together, at once
    assert sent == [answer]
