"""Where a target repository's remote is: the URL template, and how the worker logs in.

`REIN_AHARNESS_REPOSITORY_URL` is a template such as `https://git.example/{target_repo}.git`,
rendered with the run's `owner/name`. Its scheme is http, https or file (`file://` for a
single-host setup); it carries no credentials, query or fragment, so a URL the worker
renders can appear in git's messages and in a run's error without revealing anything.
Credentials come from a token file the worker's credential helper reads for the fetch
alone (ops_runtime.git_credential_helper); only the file's path is kept, never its contents.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import ops_evidence
from ops_runtime.git_credential_helper import MODULE as CREDENTIAL_HELPER_MODULE
from ops_runtime.git_credential_helper import (
    ORIGIN_VARIABLE,
    TOKEN_FILE_VARIABLE,
    USERNAME_VARIABLE,
)

__all__ = [
    "CREDENTIAL_HELPER_MODULE",
    "DEFAULT_USERNAME",
    "ORIGIN_VARIABLE",
    "PLACEHOLDER",
    "TOKEN_FILE_VARIABLE",
    "USERNAME_VARIABLE",
    "RemoteSource",
    "render_url",
    "url_template_error",
]

PLACEHOLDER = "{target_repo}"
# What Forgejo, Gitea and GitHub accept as the user name of a token used as a password.
DEFAULT_USERNAME = "x-token"
SCHEMES = ("http", "https", "file")
_SAMPLE = "owner/name"

# The credential helper the mirror's fetch configures (ops_runtime.git_credential_helper,
# shared with activity-core's publication) is named by CREDENTIAL_HELPER_MODULE; it reads
# the ORIGIN, TOKEN_FILE and USERNAME variables of that one git process's environment.


@dataclass(frozen=True)
class RemoteSource:
    """Remote mode's settings, as the mirror (mirror.py) needs them."""

    url_template: str
    token_file: Path | None = None
    username: str = DEFAULT_USERNAME
    timeout_seconds: float = 120.0
    max_bytes: int = 2048 * 1024 * 1024

    @property
    def scheme(self) -> str:
        return urlsplit(self.url_template.replace(PLACEHOLDER, _SAMPLE)).scheme.lower()

    def url(self, target_repo: str) -> str:
        return render_url(self.url_template, target_repo)


def render_url(template: str, target_repo: str) -> str:
    """The template with `target_repo` in place; ValueError for a name that is not an
    evidence `owner/name` (so nothing a run names can change the URL's shape)."""
    if ops_evidence.target_repo(target_repo) is None:
        raise ValueError(f"target_repo {target_repo[:80]!r} is not an owner/name path")
    return template.replace(PLACEHOLDER, quote(target_repo, safe="/"))


def url_template_error(template: str) -> str | None:
    """Why `template` cannot be used (one phrase, the template never echoed), or None."""
    if template.count(PLACEHOLDER) != 1:
        return f"must contain {PLACEHOLDER} exactly once"
    if any(ch.isspace() or not ch.isprintable() for ch in template):
        return "must not contain whitespace or control characters"
    try:
        parts = urlsplit(template.replace(PLACEHOLDER, _SAMPLE))
        port = parts.port
    except ValueError:
        return "does not render to a valid URL"
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        return "must be an http, https or file URL"
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return "must not carry credentials (use REIN_AHARNESS_REPOSITORY_TOKEN_FILE)"
    if parts.query or parts.fragment or "?" in template or "#" in template:
        return "must not have a query or fragment"
    if scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            return "a file URL must be file:///absolute/path"
    elif not parts.hostname or (port is not None and port == 0):
        return "must name a host"
    # The name goes in the path: the part before it must already reach the path.
    if not urlsplit(template.split(PLACEHOLDER, 1)[0]).path.startswith("/"):
        return f"{PLACEHOLDER} must be in the path, not the host"
    return None
