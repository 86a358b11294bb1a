"""publication/forgejo.py against a respx Forgejo: an existing pull request is found, not
duplicated; a new one has the branch, the default branch, the title and a link back; a
409 race finds the other's; refusals and outages are told apart; the token is sent only
in the Authorization header."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import respx

from activity_core.publication.forgejo import (
    Forgejo,
    ForgejoFailed,
    ForgejoUnavailable,
    pull_request_body,
)

API = "https://forgejo.example.org/api/v1"
TOKEN = "forgejo-token-0123456789"
HEAD = "rein/0b9e7a52-64a1-4bd6-9f39-0d3c3b1e2f10/1"
LOOKUP = f"{API}/repos/research/briefs/pulls/main/rein%2F0b9e7a52-64a1-4bd6-9f39-0d3c3b1e2f10%2F1"
PR_URL = "https://forgejo.example.org/research/briefs/pulls/7"


def _forgejo(tmp_path: Path) -> Forgejo:
    token_file = tmp_path / "forgejo-token"
    token_file.write_text(TOKEN + "\n")
    return Forgejo(api_url=API, token_file=token_file)


async def _open(forgejo: Forgejo) -> str:
    return await forgejo.open_pull_request(
        "research/briefs",
        head=HEAD,
        base="main",
        title="Research brief",
        body=pull_request_body("0b9e7a52", "https://ops.example.org"),
    )


@respx.mock
async def test_a_new_pull_request_is_opened_with_the_branch_and_a_link_back(tmp_path: Path) -> None:
    respx.get(LOOKUP).mock(return_value=httpx.Response(404, json={"message": "not found"}))
    created = respx.post(f"{API}/repos/research/briefs/pulls").mock(
        return_value=httpx.Response(201, json={"html_url": PR_URL, "number": 7})
    )
    assert await _open(_forgejo(tmp_path)) == PR_URL
    sent = json.loads(created.calls.last.request.content)
    assert sent["head"] == HEAD and sent["base"] == "main" and sent["title"] == "Research brief"
    assert "https://ops.example.org/ops/ui/runs/0b9e7a52" in sent["body"]
    request = created.calls.last.request
    assert request.headers["Authorization"] == f"token {TOKEN}"
    assert TOKEN not in str(request.url) and TOKEN not in request.content.decode()


@respx.mock
async def test_an_existing_pull_request_is_found_not_duplicated(tmp_path: Path) -> None:
    respx.get(LOOKUP).mock(return_value=httpx.Response(200, json={"html_url": PR_URL}))
    created = respx.post(f"{API}/repos/research/briefs/pulls")
    assert await _open(_forgejo(tmp_path)) == PR_URL
    assert not created.called


@respx.mock
async def test_a_409_race_finds_the_other_openers_pull_request(tmp_path: Path) -> None:
    respx.get(LOOKUP).mock(
        side_effect=[
            httpx.Response(404, json={}),
            httpx.Response(200, json={"html_url": PR_URL}),
        ]
    )
    respx.post(f"{API}/repos/research/briefs/pulls").mock(
        return_value=httpx.Response(409, json={"message": "pull request already exists"})
    )
    assert await _open(_forgejo(tmp_path)) == PR_URL


@respx.mock
async def test_refusals_are_final_and_outages_transient(tmp_path: Path) -> None:
    forgejo = _forgejo(tmp_path)
    respx.get(LOOKUP).mock(return_value=httpx.Response(403, json={"message": "no access"}))
    with pytest.raises(ForgejoFailed, match="403 no access") as refused:
        await _open(forgejo)
    assert TOKEN not in str(refused.value)
    respx.get(LOOKUP).mock(return_value=httpx.Response(502))
    with pytest.raises(ForgejoUnavailable):
        await _open(forgejo)
    respx.get(LOOKUP).mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(ForgejoUnavailable):
        await _open(forgejo)


async def test_a_missing_token_file_is_a_final_failure(tmp_path: Path) -> None:
    forgejo = Forgejo(api_url=API, token_file=tmp_path / "absent")
    with pytest.raises(ForgejoFailed, match="TOKEN_FILE"):
        await _open(forgejo)


def test_without_a_public_url_the_body_names_the_run() -> None:
    assert "ops run abc" in pull_request_body("abc", None)
