"""The mirror's credential helper: it answers only for the remote's own origin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ops_runtime.git_credential_helper import answer
from rein_aharness.repository.remote import (
    CREDENTIAL_HELPER_MODULE,
    ORIGIN_VARIABLE,
    TOKEN_FILE_VARIABLE,
    USERNAME_VARIABLE,
)


def _environ(token_file: Path) -> dict[str, str]:
    return {
        TOKEN_FILE_VARIABLE: str(token_file),
        USERNAME_VARIABLE: "x-token",
        ORIGIN_VARIABLE: "https://git.example:8443",
    }


def test_it_answers_for_the_remote_only(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-123\n")
    environ = _environ(token)
    request = {"protocol": "https", "host": "git.example:8443", "path": "acme/app.git"}
    assert answer(request, environ) == "username=x-token\npassword=tok-123\n"
    assert answer({**request, "host": "GIT.example:8443"}, environ).endswith("tok-123\n")
    # A redirect elsewhere, another port, plain http, or no origin at all: nothing.
    assert answer({**request, "host": "evil.example"}, environ) == ""
    assert answer({**request, "host": "git.example"}, environ) == ""
    assert answer({**request, "protocol": "http"}, environ) == ""
    assert answer(request, {**environ, ORIGIN_VARIABLE: ""}) == ""


def test_an_unreadable_or_odd_token_file_gives_no_answer(tmp_path: Path) -> None:
    request = {"protocol": "https", "host": "git.example:8443"}
    assert answer(request, _environ(tmp_path / "missing")) == ""
    odd = tmp_path / "odd"
    odd.write_text("two\nlines\n")
    assert answer(request, _environ(odd)) == ""


def _as_git_runs_it(action: str, token: Path) -> subprocess.CompletedProcess[str]:
    """`python -I -m <helper> action`, asked for git.example:8443 as git asks."""
    return subprocess.run(
        [sys.executable, "-I", "-m", CREDENTIAL_HELPER_MODULE, action],
        input="protocol=https\nhost=git.example:8443\n\n",
        env=_environ(token),
        capture_output=True,
        text=True,
        check=True,
    )


def test_git_runs_it_as_a_module(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-456")
    done = _as_git_runs_it("get", token)
    assert done.stdout == "username=x-token\npassword=tok-456\n"
    assert done.stderr == ""  # no runpy warning: the package does not import it
    erased = _as_git_runs_it("erase", token)
    assert erased.stdout == "" and token.read_text() == "tok-456"
