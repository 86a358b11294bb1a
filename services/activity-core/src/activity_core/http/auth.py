"""Who is calling: a worker bound to one identity, an operator, or nobody.

- Worker: a token (X-Worker-Token or Authorization: Bearer) bound to exactly one worker id:
  ACTIVITY_CORE_WORKER_TOKEN + ACTIVITY_CORE_WORKER_ID, and/or a credentials file mapping
  worker ids to sha256 token digests so one deployment serves a fleet.
- Operator: ACTIVITY_CORE_OPERATOR_TOKEN (Authorization: Bearer, X-Operator-Token, or the
  UI session cookie). Operator credentials never act as a worker identity.
- No implicit open mode: a kind of credential that is not configured refuses every request,
  unless ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1 (local development).

Tokens are compared as sha256 digests with hmac.compare_digest against every known digest,
so neither the match position nor a prefix leaks through timing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ops_contracts import RefusalCode

from ..queue.errors import QueueRefusal

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_WORKER_ID = re.compile(r"^[A-Za-z0-9._@:/+-]{1,200}$")


class CredentialsFileError(Exception):
    """The worker credentials file is unreadable or malformed (message says where)."""


def token_digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def load_worker_credentials(path: Path) -> dict[str, str]:
    """Read `{"workers": {"<worker id>": "sha256:<hex>", ...}}` into id -> digest."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CredentialsFileError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise CredentialsFileError(f"{path}: not valid JSON ({exc})") from None
    workers = data.get("workers") if isinstance(data, dict) else None
    if not isinstance(workers, dict) or not workers:
        raise CredentialsFileError(f'{path}: expected {{"workers": {{"<id>": "sha256:<hex>"}}}}')
    out: dict[str, str] = {}
    for worker_id, digest in workers.items():
        if not _WORKER_ID.match(worker_id):
            raise CredentialsFileError(f"{path}: workers.{worker_id}: not a valid worker id")
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            raise CredentialsFileError(f"{path}: workers.{worker_id}: expected sha256:<64 hex>")
        out[worker_id] = digest
    return out


@dataclass(frozen=True)
class Principal:
    kind: str  # "worker" | "operator" | "anonymous"
    worker_id: str | None = None


class Authenticator:
    def __init__(
        self,
        *,
        operator_token: str | None,
        workers: dict[str, str],
        allow_unauth: bool,
    ) -> None:
        self._operator_digest = token_digest(operator_token) if operator_token else None
        self._workers = dict(workers)
        self._allow_unauth = allow_unauth

    @property
    def worker_auth_configured(self) -> bool:
        return bool(self._workers)

    @property
    def operator_auth_configured(self) -> bool:
        return self._operator_digest is not None

    def startup_warnings(self) -> list[str]:
        notes = []
        if not self._workers:
            notes.append(
                "worker endpoints are open (ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1)"
                if self._allow_unauth
                else "no worker credentials configured: claim/heartbeat/complete/fail are refused; "
                "set ACTIVITY_CORE_WORKER_TOKEN + ACTIVITY_CORE_WORKER_ID, "
                "ACTIVITY_CORE_WORKER_CREDENTIALS_FILE, "
                "or ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1"
            )
        if self._operator_digest is None:
            notes.append(
                "operator endpoints are open (ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1)"
                if self._allow_unauth
                else "no ACTIVITY_CORE_OPERATOR_TOKEN: list/get/expire-leases and the ops UI "
                "are refused"
            )
        return notes

    def identify(self, token: str | None) -> Principal:
        if not token:
            return Principal("anonymous")
        presented = token_digest(token)
        matched_worker: str | None = None
        for worker_id, digest in self._workers.items():
            if hmac.compare_digest(presented, digest):
                matched_worker = worker_id
        operator = self._operator_digest is not None and hmac.compare_digest(
            presented, self._operator_digest
        )
        if matched_worker is not None:
            return Principal("worker", matched_worker)
        if operator:
            return Principal("operator")
        raise QueueRefusal(RefusalCode.unauthenticated, "the presented credential is not valid")

    def authenticate_worker(self, token: str | None) -> str | None:
        """The worker identity the credential is bound to; None when worker endpoints are
        open (ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1, no worker credentials) and no
        credential was presented. Refuses (401/403) anything else: what a request says is
        looked at only after this."""
        if not self._workers:
            if not self._allow_unauth:
                raise QueueRefusal(
                    RefusalCode.unauthenticated,
                    "worker mutations are disabled: no worker credentials are configured",
                )
            if not token:
                return None
        principal = self.identify(token)
        if principal.kind == "anonymous":
            raise QueueRefusal(RefusalCode.unauthenticated, "a worker token is required")
        if principal.kind == "operator":
            raise QueueRefusal(
                RefusalCode.forbidden, "operator credentials cannot act as a worker identity"
            )
        assert principal.worker_id is not None
        return principal.worker_id

    def require_worker(self, token: str | None, body_worker_id: str) -> str:
        """The authenticated worker identity; the body's worker_id must be exactly it."""
        bound = self.authenticate_worker(token)
        if bound is None:
            return body_worker_id
        if bound != body_worker_id:
            raise QueueRefusal(
                RefusalCode.worker_identity_mismatch,
                "worker_id does not match the identity bound to this token",
            )
        return body_worker_id

    def require_operator(self, token: str | None) -> None:
        if self._operator_digest is None:
            if self._allow_unauth:
                return
            raise QueueRefusal(
                RefusalCode.unauthenticated,
                "operator endpoints are disabled: ACTIVITY_CORE_OPERATOR_TOKEN is not set",
            )
        principal = self.identify(token)
        if principal.kind == "anonymous":
            raise QueueRefusal(RefusalCode.unauthenticated, "an operator token is required")
        if principal.kind != "operator":
            raise QueueRefusal(RefusalCode.forbidden, "worker credentials cannot act as operator")


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
