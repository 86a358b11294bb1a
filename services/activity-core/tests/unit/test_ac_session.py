"""The UI session cookie: signed, expiring, keyed from the operator token, never the token."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from activity_core.http.session import SESSION_SECONDS, SessionSigner, session_signer

TOKEN = "operator-token-0123456789abcdef"


def test_an_issued_session_verifies_and_does_not_contain_the_token() -> None:
    signer = SessionSigner(TOKEN)
    cookie = signer.issue()
    assert signer.verify(cookie)
    assert TOKEN not in cookie
    assert cookie.startswith("v1.")
    assert signer.issue() != cookie  # a fresh nonce each time


def _flip(text: str, index: int) -> str:
    replacement = "A" if text[index] != "A" else "B"
    return text[:index] + replacement + text[index + 1 :]


@pytest.mark.parametrize(
    "forge",
    [
        lambda c: _flip(c, len(c) - 1),  # signature
        lambda c: _flip(c, len(c) - 50),  # nonce
        lambda c: c.replace("v1.", "v2.", 1),
        lambda c: "v1.9999999999." + c.split(".", 2)[2],  # a later expiry, same signature
        lambda c: c + "A",
        lambda c: c[:-1],
        lambda c: c.replace(".", ":"),
        lambda c: " " + c,
    ],
)
def test_a_tampered_session_is_refused(forge: Callable[[str], str]) -> None:
    signer = SessionSigner(TOKEN)
    assert not signer.verify(forge(signer.issue()))


@pytest.mark.parametrize(
    "value", [None, "", TOKEN, f"Bearer {TOKEN}", "v1", "v1...", "v1.1.a.b", "\x00" * 90]
)
def test_anything_but_a_signed_session_is_refused(value: str | None) -> None:
    assert not SessionSigner(TOKEN).verify(value)


def test_another_operator_token_does_not_verify_the_session() -> None:
    cookie = SessionSigner(TOKEN).issue()
    assert not SessionSigner(TOKEN + "-rotated").verify(cookie)


def test_an_expired_session_is_refused() -> None:
    issued_at = time.time() - SESSION_SECONDS - 1
    old = SessionSigner(TOKEN, clock=lambda: issued_at).issue()
    assert not SessionSigner(TOKEN).verify(old)
    nearly = SessionSigner(TOKEN, clock=lambda: time.time() - SESSION_SECONDS + 30).issue()
    assert SessionSigner(TOKEN).verify(nearly)


def test_an_expiry_beyond_the_lifetime_is_refused() -> None:
    # Minted with the right key but a longer lifetime than the server allows.
    long_lived = SessionSigner(TOKEN, lifetime_seconds=SESSION_SECONDS * 10).issue()
    assert not SessionSigner(TOKEN).verify(long_lived)


def test_no_operator_token_means_no_sessions() -> None:
    assert session_signer(None) is None
    assert session_signer(TOKEN) is not None
