"""The ops UI session cookie: a signed, expiring statement "an operator signed in".

Value: `v1.<expires unix seconds>.<nonce>.<signature>`, the signature being
HMAC-SHA256 over `v1.<expires>.<nonce>` (base64url, unpadded). The key is derived from
ACTIVITY_CORE_OPERATOR_TOKEN (HMAC-SHA256 of a fixed label keyed by the token), so

- the cookie never contains the token, and the token cannot be recovered from it;
- rotating the operator token invalidates every session at once (the revocation story:
  sessions are stateless, logout only clears the browser's copy);
- a value that is not exactly this shape - a raw token included - is not a session.

An expiry in the past or further ahead than the session lifetime allows is refused, so
even a leaked key could not mint an everlasting cookie without it being visible here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable

COOKIE_NAME = "ops_session"
COOKIE_PATH = "/ops"
SESSION_SECONDS = 8 * 3600

_KEY_LABEL = b"activity-core ops-ui session key v1"
_SHAPE = re.compile(r"v1\.([0-9]{1,12})\.([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


class SessionSigner:
    def __init__(
        self,
        operator_token: str,
        *,
        lifetime_seconds: int = SESSION_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = hmac.new(operator_token.encode("utf-8"), _KEY_LABEL, hashlib.sha256).digest()
        self.lifetime_seconds = lifetime_seconds
        self._clock = clock

    def _signature(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest())

    def issue(self) -> str:
        expires = int(self._clock()) + self.lifetime_seconds
        payload = f"v1.{expires}.{_b64(secrets.token_bytes(16))}"
        return f"{payload}.{self._signature(payload)}"

    def verify(self, value: str | None) -> bool:
        if not value:
            return False
        match = _SHAPE.fullmatch(value)
        if match is None:
            return False
        expected = self._signature(value[: match.start(3) - 1])
        if not hmac.compare_digest(expected, match.group(3)):
            return False
        now = self._clock()
        expires = int(match.group(1))
        return now < expires <= now + self.lifetime_seconds + 60


def session_signer(operator_token: str | None) -> SessionSigner | None:
    """The signer for the configured operator token; None (no sessions) without one."""
    return SessionSigner(operator_token) if operator_token else None
