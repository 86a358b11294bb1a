"""WritesOfAnIteration: the writes of one event-loop iteration leave as one write, in order;
close, write_eof and abort keep the transport's own meaning (one_write_answers.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from activity_core.one_write_answers import FLUSH_AT_BYTES, WritesOfAnIteration


class RecordingTransport(asyncio.Transport):
    """What a socket transport was asked to do, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []
        self.closing = False
        self.buffered = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.calls.append(("write", bytes(data)))

    def close(self) -> None:
        self.calls.append(("close", None))
        self.closing = True

    def write_eof(self) -> None:
        self.calls.append(("write_eof", None))

    def abort(self) -> None:
        self.calls.append(("abort", None))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        self.calls.append(("pause_reading", None))

    def resume_reading(self) -> None:
        self.calls.append(("resume_reading", None))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 4242)}.get(name, default)

    def get_write_buffer_size(self) -> int:
        return self.buffered


@pytest.fixture
def inner() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
async def writes(inner: RecordingTransport) -> WritesOfAnIteration:
    return WritesOfAnIteration(inner, asyncio.get_running_loop())


async def _next_iteration() -> None:
    # call_soon callbacks made before this sleep run before it returns
    await asyncio.sleep(0)


async def test_the_writes_of_one_iteration_leave_as_one_write_after_it(
    inner: RecordingTransport, writes: WritesOfAnIteration
) -> None:
    writes.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    writes.write(b"{}")
    assert inner.calls == []  # held until the loop has run what is ready
    await _next_iteration()
    assert inner.calls == [("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")]


async def test_writes_of_later_iterations_leave_later_in_the_order_written(
    inner: RecordingTransport, writes: WritesOfAnIteration
) -> None:
    writes.write(b"a")
    await _next_iteration()
    writes.writelines([b"b", bytearray(b"c")])
    writes.write(b"")  # nothing to write: no write at all
    await _next_iteration()
    await _next_iteration()
    assert inner.calls == [("write", b"a"), ("write", b"bc")]


async def test_once_enough_is_held_it_is_written_at_once_with_what_came_before(
    inner: RecordingTransport, writes: WritesOfAnIteration
) -> None:
    writes.write(b"head")
    assert inner.calls == []
    large = b"x" * (FLUSH_AT_BYTES - 4)
    writes.write(large)
    # within the iteration: the socket's flow control sees it as it would unwrapped
    assert inner.calls == [("write", b"head" + large)]
    assert writes.get_write_buffer_size() == 0
    writes.write(b"tail")
    await _next_iteration()
    assert inner.calls == [("write", b"head" + large), ("write", b"tail")]


async def test_a_written_buffer_is_copied_so_reusing_it_changes_nothing(
    inner: RecordingTransport, writes: WritesOfAnIteration
) -> None:
    buffer = bytearray(b"first")
    writes.write(buffer)
    writes.write(memoryview(buffer)[:2])
    buffer[:] = b"XXXXX"
    await _next_iteration()
    assert inner.calls == [("write", b"firstfi")]


async def test_close_sends_what_is_held_first(
    inner: RecordingTransport, writes: WritesOfAnIteration
) -> None:
    writes.write(b"answer")
    writes.close()
    assert inner.calls == [("write", b"answer"), ("close", None)]
    await _next_iteration()  # the scheduled flush finds nothing left
    assert inner.calls == [("write", b"answer"), ("close", None)]


async def test_write_eof_sends_what_is_held_first(
    inner: RecordingTransport, writes: WritesOfAnIteration
) -> None:
    writes.write(b"last")
    writes.write_eof()
    assert inner.calls == [("write", b"last"), ("write_eof", None)]


async def test_what_is_written_once_the_transport_is_closing_is_dropped(
    inner: RecordingTransport, writes: WritesOfAnIteration
) -> None:
    writes.close()
    writes.write(b"late")
    await _next_iteration()
    assert inner.calls == [("close", None)]


async def test_abort_drops_what_is_held_as_the_transport_drops_its_buffer(
    inner: RecordingTransport, writes: WritesOfAnIteration
) -> None:
    writes.write(b"never sent")
    writes.abort()
    await _next_iteration()
    assert inner.calls == [("abort", None)]


async def test_everything_else_is_the_wrapped_transports(
    inner: RecordingTransport, writes: WritesOfAnIteration
) -> None:
    inner.buffered = 10
    writes.write(b"held")
    # flow control sees what is held as well as what the socket has not taken yet
    assert writes.get_write_buffer_size() == 14
    assert writes.get_extra_info("peername") == ("127.0.0.1", 4242)
    assert writes.get_extra_info("sockname", "none") == "none"
    assert not writes.is_closing()
    writes.pause_reading()
    writes.resume_reading()
    assert inner.calls == [("pause_reading", None), ("resume_reading", None)]
    await _next_iteration()
    assert inner.calls[-1] == ("write", b"held")
