"""The pull request of a publication, through Forgejo's API (a Gitea-compatible one).

`open_pull_request` finds the pull request whose head is the published branch
(`GET /repos/{owner}/{repo}/pulls/{base}/{head}`), else opens one
(`POST /repos/{owner}/{repo}/pulls`: head = the branch, base = the default branch, the
run's title, a body linking back to the run). A 409 from the POST (Forgejo's "a pull
request for these branches exists", a race with another opener) looks it up again, so a
retried activity never opens a second one. The token is read from its file for each call
and sent in the Authorization header only; no error text repeats it.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import httpx

from ops_runtime.git_credential_helper import read_token

__all__ = ["Forgejo", "ForgejoFailed", "ForgejoUnavailable", "pull_request_body"]

_TIMEOUT = httpx.Timeout(20.0)
_MAX_TITLE = 255


class ForgejoUnavailable(Exception):
    """Transient: Forgejo could not be reached or answered 5xx / 429."""


class ForgejoFailed(Exception):
    """Final: Forgejo refused the request (a 4xx); the reason says what it answered."""


@dataclass(frozen=True)
class Forgejo:
    api_url: str  # e.g. https://forgejo.example.org/api/v1, no trailing slash
    token_file: Path
    transport: httpx.AsyncBaseTransport | None = None

    async def open_pull_request(
        self, target_repo: str, *, head: str, base: str, title: str, body: str
    ) -> str:
        """The pull request's web URL (html_url). Raises ForgejoUnavailable/ForgejoFailed."""
        token = read_token(str(self.token_file))
        if token is None:
            raise ForgejoFailed("ACTIVITY_CORE_FORGEJO_TOKEN_FILE holds no readable token")
        owner, _, name = target_repo.partition("/")
        repo = f"{self.api_url}/repos/{_q(owner)}/{_q(name)}"
        headers = {"Authorization": f"token {token}", "Accept": "application/json"}
        async with httpx.AsyncClient(
            timeout=_TIMEOUT, transport=self.transport, follow_redirects=False, headers=headers
        ) as client:
            found = await self._existing(client, repo, base, head)
            if found is not None:
                return found
            payload = {"head": head, "base": base, "title": title[:_MAX_TITLE], "body": body}
            response = await _call(client, "POST", f"{repo}/pulls", json=payload)
            if response.status_code == 409:
                found = await self._existing(client, repo, base, head)
                if found is not None:
                    return found
            return _html_url(_checked(response, "open a pull request"))

    async def _existing(
        self, client: httpx.AsyncClient, repo: str, base: str, head: str
    ) -> str | None:
        response = await _call(client, "GET", f"{repo}/pulls/{_q(base)}/{_q(head)}")
        if response.status_code == 404:
            return None
        return _html_url(_checked(response, "look up the pull request"))


def pull_request_body(run_id: str, public_url: str | None) -> str:
    where = f"{public_url}/ops/ui/runs/{run_id}" if public_url is not None else f"ops run {run_id}"
    return (
        f"Published by activity-core from ops run `{run_id}` at an operator's request.\n\n"
        f"The run, its changes and its evidence: {where}\n"
    )


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


async def _call(
    client: httpx.AsyncClient, method: str, url: str, **kwargs: object
) -> httpx.Response:
    try:
        return await client.request(method, url, **kwargs)  # type: ignore[arg-type]
    except httpx.TransportError as exc:
        raise ForgejoUnavailable(f"Forgejo is not reachable: {type(exc).__name__}") from exc


def _checked(response: httpx.Response, what: str) -> httpx.Response:
    status = response.status_code
    if status >= 500 or status == 429:
        raise ForgejoUnavailable(f"Forgejo answered {status} when asked to {what}")
    if status >= 400:
        raise ForgejoFailed(f"Forgejo refused to {what}: {status} {_message(response)}")
    return response


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return str(message)[:200] if message else ""


def _html_url(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    url = body.get("html_url") if isinstance(body, dict) else None
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise ForgejoFailed("Forgejo's answer names no pull request URL (html_url)")
    return url
