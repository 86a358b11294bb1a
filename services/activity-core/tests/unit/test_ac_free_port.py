"""Ports chosen for servers we start lie below the OS's ephemeral range."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from activity_core.temporal import dev_server
from activity_core.temporal.dev_server import ephemeral_low, free_port


def test_the_ephemeral_range_is_read_and_a_bad_file_is_none(tmp_path: Path) -> None:
    good = tmp_path / "range"
    good.write_text("32768\t60999\n", encoding="ascii")
    assert ephemeral_low(good) == 32768
    bad = tmp_path / "bad"
    bad.write_text("nonsense", encoding="ascii")
    assert ephemeral_low(bad) is None
    assert ephemeral_low(tmp_path / "missing") is None


def test_a_chosen_port_is_below_the_ephemeral_range_and_can_be_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dev_server, "ephemeral_low", lambda: 32768)
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < 32768 for port in ports), ports
    assert len(ports) > 1  # chosen at random, not one fixed port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", ports.pop()))


def test_a_port_someone_holds_is_not_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken: int = held.getsockname()[1]
        monkeypatch.setattr(dev_server, "ephemeral_low", lambda: taken + 100)
        candidates = iter([taken, taken, taken + 1])
        monkeypatch.setattr(random.SystemRandom, "randrange", lambda *_: next(candidates))
        assert free_port() == taken + 1


def test_without_room_below_the_range_the_os_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    # The OS picks from its ephemeral range: where that can be read, the port lies in it.
    real_low = ephemeral_low() or 1
    monkeypatch.setattr(dev_server, "ephemeral_low", lambda: None)
    assert free_port() >= real_low
    monkeypatch.setattr(dev_server, "ephemeral_low", lambda: 1024)
    assert free_port() >= real_low
