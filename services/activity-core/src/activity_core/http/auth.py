"""Who is calling: a worker bound to one identity, a named operator or viewer, or nobody.

- Worker: a token (X-Worker-Token or Authorization: Bearer) bound to exactly one worker id:
  ACTIVITY_CORE_WORKER_TOKEN + ACTIVITY_CORE_WORKER_ID, and/or a credentials file mapping
  worker ids to sha256 token digests so one deployment serves a fleet.
- Operator plane: named principals, each with a role. ACTIVITY_CORE_OPERATOR_TOKEN is the
  operator named `operator` (role operator); an operators file
  (ACTIVITY_CORE_OPERATORS_FILE, `{"operators": {"<name>": {"token": "sha256:<hex>",
  "role": "operator"|"viewer"}}}`) adds more. An `operator` reads and acts; a `viewer`
  reads everything and acts on nothing (403 forbidden). Presented as Authorization:
  Bearer or X-Operator-Token. (The ops UI signs an operator in with name and token and
  keeps a server-side session: ui_guard.py; its cookie opens UI pages only, never the
  JSON API.) Operator-plane credentials never act as a worker identity.
- Metrics scraper: ACTIVITY_CORE_METRICS_TOKEN, presented as Authorization: Bearer to
  `GET /metrics` only. It is no principal: it opens nothing else, and no worker or
  operator token opens /metrics. Unset, /metrics is open (the network must restrict it).
- No implicit open mode: a kind of credential that is not configured refuses every request,
  unless ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1 (local development; the open operator
  plane's caller is then the operator named `anonymous`).

A token is never compared as itself: its sha256 digest is looked up among the known
digests (a hash lookup, one per request however many credentials there are), or compared
with hmac.compare_digest where there is one to compare with (sign-in, /metrics). Timing
can then tell at most something of the digest, and a digest gives nothing towards a token
(that would take a SHA-256 preimage), so no prefix of a token leaks.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from pathlib import Path

from activity_core.queue.errors import QueueRefusal
from ops_contracts import OperatorRole, RefusalCode

__all__ = [
    "ANONYMOUS_OPERATOR_NAME",
    "Authenticator",
    "CredentialsFileError",
    "MetricsTokenReused",
    "OperatorCredential",
    "Principal",
    "bearer_token",
    "load_operator_credentials",
    "load_worker_credentials",
    "operator_name_ok",
    "token_digest",
]

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_WORKER_ID = re.compile(r"^[A-Za-z0-9._@:/+-]{1,200}$")
# An operator's name: what the audit trail and a cancelled run's `cancelled_by` show.
_OPERATOR_NAME = re.compile(r"^[A-Za-z0-9._@:/+-]{1,100}$")

# What an unknown name's token is compared with at sign-in: no token has this digest.
_NO_DIGEST = "sha256:" + "x" * 64

# ACTIVITY_CORE_OPERATOR_TOKEN's operator, and the caller of an open operator plane.
TOKEN_OPERATOR_NAME = "operator"
ANONYMOUS_OPERATOR_NAME = "anonymous"


class CredentialsFileError(Exception):
    """A credentials file (workers or operators) is unreadable or malformed (message says
    where)."""


class MetricsTokenReused(ValueError):
    """ACTIVITY_CORE_METRICS_TOKEN is also a worker's or an operator's token."""


@dataclass(frozen=True)
class OperatorCredential:
    digest: str
    role: OperatorRole


def operator_name_ok(name: str) -> bool:
    return _OPERATOR_NAME.fullmatch(name) is not None


def token_digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def load_worker_credentials(path: Path) -> dict[str, str]:
    """Read `{"workers": {"<worker id>": "sha256:<hex>", ...}}` into id -> digest."""
    data = _read_json(path)
    workers = data.get("workers") if isinstance(data, dict) else None
    if not isinstance(workers, dict) or not workers:
        raise CredentialsFileError(f'{path}: expected {{"workers": {{"<id>": "sha256:<hex>"}}}}')
    out: dict[str, str] = {}
    for worker_id, digest in workers.items():
        if not _WORKER_ID.fullmatch(worker_id):
            raise CredentialsFileError(f"{path}: workers.{worker_id}: not a valid worker id")
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise CredentialsFileError(f"{path}: workers.{worker_id}: expected sha256:<64 hex>")
        out[worker_id] = digest
    return out


def load_operator_credentials(path: Path) -> dict[str, OperatorCredential]:
    """Read `{"operators": {"<name>": {"token": "sha256:<hex>", "role": "operator"|"viewer"}}}`
    into name -> credential. A token may name one operator only."""
    data = _read_json(path)
    operators = data.get("operators") if isinstance(data, dict) else None
    if not isinstance(operators, dict) or not operators:
        raise CredentialsFileError(
            f'{path}: expected {{"operators": {{"<name>": {{"token": "sha256:<hex>", '
            '"role": "operator"|"viewer"}}}}'
        )
    out: dict[str, OperatorCredential] = {}
    for name, entry in operators.items():
        if not _OPERATOR_NAME.fullmatch(name):
            raise CredentialsFileError(
                f"{path}: operators.{name}: not a valid operator name "
                "(1-100 letters, digits and . _ @ : / + -)"
            )
        if name == ANONYMOUS_OPERATOR_NAME:
            raise CredentialsFileError(f"{path}: operators.{name}: the name is reserved")
        if not isinstance(entry, dict) or set(entry) - {"token", "role"}:
            raise CredentialsFileError(
                f'{path}: operators.{name}: expected {{"token": "sha256:<hex>", "role": …}}'
            )
        digest = entry.get("token")
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise CredentialsFileError(f"{path}: operators.{name}.token: expected sha256:<64 hex>")
        role = entry.get("role")
        if role not in {r.value for r in OperatorRole}:
            raise CredentialsFileError(
                f"{path}: operators.{name}.role: expected operator or viewer"
            )
        if any(hmac.compare_digest(digest, known.digest) for known in out.values()):
            raise CredentialsFileError(
                f"{path}: operators.{name}.token: another operator has the same token"
            )
        out[name] = OperatorCredential(digest, OperatorRole(role))
    return out


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CredentialsFileError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise CredentialsFileError(f"{path}: not valid JSON ({exc})") from None


@dataclass(frozen=True)
class Principal:
    kind: str  # "worker" | "operator" | "anonymous"
    worker_id: str | None = None
    # operator-plane principals: the operator's name and role
    name: str | None = None
    role: OperatorRole | None = None


class Authenticator:
    def __init__(
        self,
        *,
        operator_token: str | None,
        workers: dict[str, str],
        allow_unauth: bool,
        operators: dict[str, OperatorCredential] | None = None,
        metrics_token: str | None = None,
    ) -> None:
        self._operators = dict(operators or {})
        self._metrics_digest = token_digest(metrics_token) if metrics_token else None
        if operator_token:
            if TOKEN_OPERATOR_NAME in self._operators:
                raise CredentialsFileError(
                    f"operators.{TOKEN_OPERATOR_NAME}: the name belongs to "
                    "ACTIVITY_CORE_OPERATOR_TOKEN; name this operator differently"
                )
            self._operators[TOKEN_OPERATOR_NAME] = OperatorCredential(
                token_digest(operator_token), OperatorRole.operator
            )
        self._workers = dict(workers)
        # Who a presented digest belongs to, looked up by the digest itself: one hash
        # lookup per request however many credentials there are (a scan of every
        # credential cost a comparison per worker on each claim and close). The lookup's
        # timing depends on the SHA-256 of the token, which tells nothing of the token.
        # Where two credentials share a digest, the later one answers, as the scan did.
        self._worker_by_digest = {digest: worker_id for worker_id, digest in workers.items()}
        self._operator_by_digest = {c.digest: name for name, c in self._operators.items()}
        self._allow_unauth = allow_unauth
        known = [*self._workers.values(), *(c.digest for c in self._operators.values())]
        if self._metrics_digest in known:
            # one secret would then open /metrics and the API alike
            raise MetricsTokenReused("must differ from every operator's and every worker's token")

    @property
    def worker_auth_configured(self) -> bool:
        return bool(self._workers)

    @property
    def operator_auth_configured(self) -> bool:
        return bool(self._operators)

    @property
    def operator_names(self) -> dict[str, OperatorRole]:
        return {name: credential.role for name, credential in self._operators.items()}

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
        if not self._operators:
            notes.append(
                "operator endpoints are open (ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1)"
                if self._allow_unauth
                else "no ACTIVITY_CORE_OPERATOR_TOKEN or ACTIVITY_CORE_OPERATORS_FILE: the "
                "operator endpoints and the ops UI are refused"
            )
        return notes

    def sign_in(self, name: str, token: str) -> Principal:
        """The operator-plane principal `name`, when `token` is its credential (the ops
        UI's sign-in form: name and token, like a user name and password). Refuses 401
        without saying which of the two was wrong; an unknown name costs the same
        comparison as a known one."""
        credential = self._operators.get(name)
        expected = credential.digest if credential is not None else _NO_DIGEST
        matches = hmac.compare_digest(token_digest(token), expected)
        if credential is None or not matches:
            raise QueueRefusal(RefusalCode.unauthenticated, "sign-in failed")
        return Principal("operator", name=name, role=credential.role)

    def credential_digest(self, name: str) -> str | None:
        """The digest of the token operator `name` has now (None: no such operator)."""
        credential = self._operators.get(name)
        return credential.digest if credential is not None else None

    def role_of(self, name: str) -> OperatorRole | None:
        credential = self._operators.get(name)
        return credential.role if credential is not None else None

    @property
    def operator_plane_open(self) -> bool:
        """No operator credential is configured and local development opened the plane:
        its caller is the operator `anonymous`."""
        return not self._operators and self._allow_unauth

    def identify(self, token: str | None) -> Principal:
        if not token:
            return Principal("anonymous")
        presented = token_digest(token)
        matched_worker = self._worker_by_digest.get(presented)
        if matched_worker is not None:
            return Principal("worker", matched_worker)
        matched_operator = self._operator_by_digest.get(presented)
        if matched_operator is not None:
            role = self._operators[matched_operator].role
            return Principal("operator", name=matched_operator, role=role)
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

    def require_metrics(self, token: str | None) -> None:
        """Refuses (401) a scrape of /metrics without the metrics token, when one is
        configured; any other credential, a worker's or an operator's, is no better than
        none."""
        if self._metrics_digest is None:
            return
        if not token:
            raise QueueRefusal(RefusalCode.unauthenticated, "a metrics token is required")
        if not hmac.compare_digest(token_digest(token), self._metrics_digest):
            raise QueueRefusal(RefusalCode.unauthenticated, "the presented credential is not valid")

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

    def require_viewer(self, token: str | None) -> Principal:
        """The operator-plane principal (an operator or a viewer) that may read; 401/403
        for anyone else."""
        if not self._operators:
            if self._allow_unauth:
                return Principal(
                    "operator", name=ANONYMOUS_OPERATOR_NAME, role=OperatorRole.operator
                )
            raise QueueRefusal(
                RefusalCode.unauthenticated,
                "operator endpoints are disabled: neither ACTIVITY_CORE_OPERATOR_TOKEN nor "
                "ACTIVITY_CORE_OPERATORS_FILE is set",
            )
        principal = self.identify(token)
        if principal.kind == "anonymous":
            raise QueueRefusal(RefusalCode.unauthenticated, "an operator token is required")
        if principal.kind != "operator":
            raise QueueRefusal(RefusalCode.forbidden, "worker credentials cannot act as operator")
        return principal

    def require_operator(self, token: str | None) -> Principal:
        """The operator (role `operator`) that may act; a viewer is refused 403 forbidden."""
        principal = self.require_viewer(token)
        if principal.role is not OperatorRole.operator:
            raise QueueRefusal(
                RefusalCode.forbidden,
                f"{principal.name} is a viewer: viewers read, only operators act",
            )
        return principal


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
