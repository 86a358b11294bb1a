"""publication/remote_git.py against the real git server (smart HTTP, Basic auth): the
push is create-only, a repeat pushes nothing, a taken ref is never overwritten, and a
stored bundle that is not the run's is refused before anything is pushed."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from ac_publication_kit import TARGET_REPO, History, grant, receive_pack_posts, run_history
from activity_core.publication.remote_git import (
    PublishFacts,
    PublishRefused,
    Remote,
    RemoteUnavailable,
    changes_ref,
    push_changes,
    remote_for,
)
from ops_testsupport.changes_bundles import commit_files, git
from ops_testsupport.git_server import GitServer


def _remote(server: GitServer, tmp_path: Path) -> Remote:
    return remote_for(
        server.url_template,
        TARGET_REPO,
        username=server.username,
        token_file=server.write_token_file(tmp_path / "secrets"),
    )


def _facts(history: History, run_id: str, attempt: int = 1, **override: object) -> PublishFacts:
    values: dict[str, object] = {
        "run_id": run_id,
        "attempt": attempt,
        "baseline": history.baseline,
        "head_after": history.tip,
        "grant": grant(),
        "accepted_commits": history.commits,
    }
    values.update(override)
    return PublishFacts(**values)  # type: ignore[arg-type]


async def test_the_published_tip_is_head_after_and_descends_from_the_baseline(
    git_server: GitServer, tmp_path: Path
) -> None:
    history = run_history(git_server, tmp_path / "work")
    run_id = str(uuid.uuid4())
    outcome = await push_changes(
        _remote(git_server, tmp_path), history.bundle(run_id, 1), _facts(history, run_id)
    )
    ref = changes_ref(run_id, 1)
    assert outcome.pushed and outcome.ref == ref and outcome.commit == history.tip
    assert outcome.default_branch == "refs/heads/main"
    refs = git_server.refs(TARGET_REPO)
    assert refs[ref] == history.tip
    # nothing else changed on the server: the default branch stays at the baseline
    assert refs["refs/heads/main"] == history.baseline
    bare = git_server.root / f"{TARGET_REPO}.git"
    chain = git(bare, "rev-list", "--first-parent", ref).decode().split()
    assert chain[: len(history.commits)] == list(reversed(history.commits))
    assert chain[len(history.commits)] == history.baseline
    # every request served was authenticated as the configured user (git's first try of
    # each connection is anonymous and answered 401)
    served = [r for r in git_server.requests_to(TARGET_REPO) if r.status < 400]
    assert served and all(r.user == git_server.username for r in served)
    assert receive_pack_posts(git_server) == 1


async def test_a_second_publication_pushes_nothing(git_server: GitServer, tmp_path: Path) -> None:
    history = run_history(git_server, tmp_path / "work")
    run_id = str(uuid.uuid4())
    remote = _remote(git_server, tmp_path)
    await push_changes(remote, history.bundle(run_id, 1), _facts(history, run_id))
    again = await push_changes(remote, history.bundle(run_id, 1), _facts(history, run_id))
    assert not again.pushed and again.commit == history.tip
    assert receive_pack_posts(git_server) == 1


async def test_a_taken_ref_is_refused_and_never_overwritten(
    git_server: GitServer, tmp_path: Path
) -> None:
    history = run_history(git_server, tmp_path / "work")
    run_id = str(uuid.uuid4())
    ref = changes_ref(run_id, 1)
    bare = git_server.root / f"{TARGET_REPO}.git"
    other = git_server.push_commit(TARGET_REPO, {"other.md": "x\n"})
    git(bare, "update-ref", ref, other)
    git(bare, "update-ref", "refs/heads/main", history.baseline)
    with pytest.raises(PublishRefused, match=r"already has .* nothing was overwritten"):
        await push_changes(
            _remote(git_server, tmp_path), history.bundle(run_id, 1), _facts(history, run_id)
        )
    assert git_server.refs(TARGET_REPO)[ref] == other
    assert receive_pack_posts(git_server) == 0


@pytest.mark.parametrize("tamper", ["tip", "path", "baseline", "attempt", "accepted"])
async def test_a_stored_bundle_that_is_not_the_runs_is_refused_before_any_push(
    git_server: GitServer, tmp_path: Path, tamper: str
) -> None:
    run_id = str(uuid.uuid4())
    files: dict[str, str | bytes | None] | None = (
        {"outside/evil.md": "x\n"} if tamper == "path" else None
    )
    history = run_history(git_server, tmp_path / "work", files=files)
    facts = _facts(history, run_id)
    if tamper == "tip":
        # the bundle of an earlier commit, while the run says head_after is the tip
        bundle = History(history.repo, history.baseline, history.commits[:1]).bundle(run_id, 1)
        expected = "tip"
    elif tamper == "path":
        bundle = history.bundle(run_id, 1)
        expected = "outside the grant"
    elif tamper == "baseline":
        # history that does not start at the run's baseline: a root of its own
        git(history.repo, "checkout", "--quiet", "--orphan", "elsewhere")
        root = commit_files(history.repo, {"briefs/x.md": "x\n"}, "unrelated root")
        tip = commit_files(history.repo, {"briefs/y.md": "y\n"}, "on it")
        bundle = History(history.repo, root, (tip,)).bundle(run_id, 1)
        facts = _facts(history, run_id, head_after=tip, accepted_commits=(tip,))
        expected = "starts at"
    elif tamper == "attempt":
        bundle = history.bundle(run_id, 2)
        expected = "not this attempt's"
    else:
        bundle = history.bundle(run_id, 1)
        facts = _facts(history, run_id, accepted_commits=history.commits[1:])
        expected = "accepted commits"
    with pytest.raises(PublishRefused, match=expected):
        await push_changes(_remote(git_server, tmp_path), bundle, facts)
    assert changes_ref(run_id, 1) not in git_server.refs(TARGET_REPO)
    assert receive_pack_posts(git_server) == 0


async def test_refused_credentials_are_unavailable_and_the_token_is_in_no_argv_or_file(
    git_server: GitServer, tmp_path: Path
) -> None:
    history = run_history(git_server, tmp_path / "work")
    run_id = str(uuid.uuid4())
    git_server.refuse_credentials = True
    with pytest.raises(RemoteUnavailable) as raised:
        await push_changes(
            _remote(git_server, tmp_path), history.bundle(run_id, 1), _facts(history, run_id)
        )
    assert git_server.token not in str(raised.value)
    # no temp scratch repository is left behind holding anything
    leftovers = [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("ac-changes-*")]
    for directory in leftovers:
        for file in directory.rglob("*"):
            if file.is_file():
                assert git_server.token.encode() not in file.read_bytes()


async def test_a_file_remote_publishes_without_credentials(tmp_path: Path) -> None:
    from ops_testsupport.git_server import running_git_server

    with running_git_server(tmp_path / "srv") as server:
        history = run_history(server, tmp_path / "work")
    run_id = str(uuid.uuid4())
    remote = remote_for(
        f"file://{server.root}/{{target_repo}}.git", TARGET_REPO, username=None, token_file=None
    )
    outcome = await push_changes(remote, history.bundle(run_id, 1), _facts(history, run_id))
    assert outcome.pushed
    bare = server.root / f"{TARGET_REPO}.git"
    assert git(bare, "rev-parse", changes_ref(run_id, 1)).decode().strip() == history.tip
