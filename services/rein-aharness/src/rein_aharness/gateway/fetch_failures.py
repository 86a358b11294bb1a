"""A failed fetch of remote mode (repository/mirror.py) as the gateway error it fails
the run with (errors.py documents each and its reopen decision).

Apart from errors.py so that module stays free of the repository layer: the close
decisions, which must not import it, use those classes.
"""

from __future__ import annotations

import logging

from rein_aharness.gateway.errors import (
    GatewayError,
    RemoteRepositoryNotFound,
    RepositoryCredentialsRefused,
    RepositoryTooLarge,
    RepositoryUnavailable,
)
from rein_aharness.repository import FetchFailed, FetchFailure

__all__ = ["fetch_error"]

log = logging.getLogger(__name__)

_FETCH_ERRORS: dict[FetchFailure, type[GatewayError]] = {
    "unavailable": RepositoryUnavailable,
    "credentials_refused": RepositoryCredentialsRefused,
    "not_found": RemoteRepositoryNotFound,
    "too_large": RepositoryTooLarge,
}


def fetch_error(failure: FetchFailed, run_id: str) -> GatewayError:
    """The gateway error (and so the reopen decision) of a failed fetch, its reason as is;
    logged as a warning (the reason names the URL, which never carries a credential)."""
    log.warning(
        "the target repository could not be fetched",
        extra={"run_id": run_id, "reason": failure.reason},
    )
    return _FETCH_ERRORS[failure.kind](failure.reason)
