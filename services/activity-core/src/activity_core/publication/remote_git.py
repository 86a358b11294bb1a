"""The git side of a publication, in a scratch repository of its own.

Never trusting the stored bundle (the row could have been written by anyone with the
database), `push_changes`:

1. reads the bundle's header: one prerequisite, the run's baseline; one ref, the run's
   attempt's `refs/heads/rein/<run>/<attempt>`, at the run's head_after;
2. asks the remote (`ls-remote --symref HEAD <ref>`) for its default branch and for the
   ref: already at head_after → published, no push (a repeat, or a workflow whose
   worker died after its push); at another commit → PublishRefused, nothing overwritten;
3. fetches the default branch (the baseline must be on it), unbundles, and checks the
   history again with the upload's own check (changes/verify.py): the tip is head_after,
   a first-parent chain without merges whose oldest commit's parent is the baseline, as
   many commits as the grant allows (and exactly the run's accepted commits when the
   evidence lists them), every touched path allowed;
4. pushes `<head_after>:<ref>` create-only: `--force-with-lease=<ref>:` (an empty
   expectation: the ref must not exist) and no `+`, so git never overwrites anything: a
   ref that appeared since step 2 is rejected, and step 2's rule then classifies it.

Every git call has the scratch repository's hygiene (changes/scratch_git.py: no hooks,
no config but ours, an environment of our own, bounded in time); the calls to the remote
allow exactly the URL's protocol, follow no redirect, and authenticate through
ops_runtime.git_credential_helper, which reads the token from its file: the token is in
no argv, no environment variable, no config file and no error text.
"""

from __future__ import annotations

import shlex
import sys
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from activity_core.changes.bundle_format import ChangesInvalid, parse_bundle_header
from activity_core.changes.scratch_git import (
    GitFailed,
    GitOutputTooLarge,
    GitTimeout,
    ScratchGit,
    run_git,
)
from activity_core.changes.verify import verify_history
from ops_contracts import RepositoryGrantV1
from ops_runtime.git_credential_helper import (
    MODULE as CREDENTIAL_HELPER_MODULE,
)
from ops_runtime.git_credential_helper import (
    ORIGIN_VARIABLE,
    TOKEN_FILE_VARIABLE,
    USERNAME_VARIABLE,
)

__all__ = [
    "PublishFacts",
    "PublishRefused",
    "PushOutcome",
    "Remote",
    "RemoteUnavailable",
    "changes_ref",
    "push_changes",
    "remote_for",
]

_REMOTE_TIMEOUT_S = 120.0
_LOCAL_TIMEOUT_S = 60.0
# what a call may print: ls-remote of two names, unbundle's ref list, a quiet fetch or push
_OUTPUT_BYTES = 1 << 20
_BASE_REF = "refs/publication/base"


class PublishRefused(Exception):
    """Final: the changes are not what the run may publish, or the ref is taken."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RemoteUnavailable(Exception):
    """Transient: the remote could not be reached, refused the credentials, or failed."""


@dataclass(frozen=True)
class Remote:
    url: str
    username: str | None = None
    token_file: Path | None = None


@dataclass(frozen=True)
class PublishFacts:
    """What the run says, from its own row (not from the changes row)."""

    run_id: str
    attempt: int
    baseline: str
    head_after: str
    grant: RepositoryGrantV1
    accepted_commits: tuple[str, ...] | None = None


@dataclass(frozen=True)
class PushOutcome:
    ref: str
    commit: str
    pushed: bool  # False: the ref was there at the commit already
    default_branch: str


def changes_ref(run_id: str, attempt: int) -> str:
    return f"refs/heads/rein/{run_id}/{attempt}"


def remote_for(
    template: str, target_repo: str, *, username: str | None, token_file: Path | None
) -> Remote:
    """The run's remote: the settings' template with its target repository (an
    `owner/name` the queue validated at emission)."""
    return Remote(
        url=template.replace("{target_repo}", target_repo),
        username=username,
        token_file=token_file,
    )


async def push_changes(remote: Remote, bundle: bytes, facts: PublishFacts) -> PushOutcome:
    """Steps 1-4 of the module docstring. Raises PublishRefused or RemoteUnavailable."""
    ref = changes_ref(facts.run_id, facts.attempt)
    try:
        header = parse_bundle_header(bundle)
    except ChangesInvalid as exc:
        raise PublishRefused(f"the stored bundle is not valid: {exc.reason}") from exc
    if header.ref_name != ref:
        raise PublishRefused(
            f"the stored bundle's ref is {header.ref_name[:120]!r}, not this attempt's {ref}"
        )
    if header.tip != facts.head_after:
        raise PublishRefused(
            f"the stored bundle's tip {header.tip} is not the run's head_after {facts.head_after}"
        )
    if header.baseline != facts.baseline:
        raise PublishRefused(
            f"the stored bundle starts at {header.baseline}, not the run's baseline "
            f"{facts.baseline}"
        )
    async with ScratchGit(object_format=header.object_format) as scratch:
        git = _Git(scratch.git_dir, remote)
        default_branch, existing = await git.look_up(ref)
        if existing is not None:
            return _already_there(ref, existing, facts.head_after, default_branch)
        await git.remote(
            "fetch",
            "--no-tags",
            "--no-write-fetch-head",
            "--quiet",
            remote.url,
            f"+{default_branch}:{_BASE_REF}",
        )
        if not await git.succeeds("merge-base", "--is-ancestor", facts.baseline, _BASE_REF):
            raise PublishRefused(
                f"the baseline {facts.baseline} is not on the remote's {default_branch}"
            )
        bundle_file = scratch.git_dir.parent / "changes.bundle"
        bundle_file.write_bytes(bundle)
        try:
            listed = await git.local("bundle", "unbundle", str(bundle_file))
        except GitFailed as exc:
            raise PublishRefused(
                f"the stored bundle cannot be unbundled: {exc.stderr[:200]}"
            ) from exc
        tips = {line.split(" ", 1)[0] for line in listed.decode("ascii", "replace").splitlines()}
        if tips != {facts.head_after}:
            raise PublishRefused("the stored bundle's pack does not hold the run's head_after")
        await _check_history(scratch, facts)
        try:
            await git.remote(
                "push",
                "--porcelain",
                "--no-verify",
                "--no-follow-tags",
                f"--force-with-lease={ref}:",
                remote.url,
                f"{facts.head_after}:{ref}",
            )
        except RemoteUnavailable:
            # rejected because the ref appeared meanwhile, or the remote failed: it says
            _, existing = await git.look_up(ref)
            if existing is None:
                raise
            return _already_there(ref, existing, facts.head_after, default_branch)
    return PushOutcome(ref=ref, commit=facts.head_after, pushed=True, default_branch=default_branch)


def _already_there(ref: str, existing: str, head_after: str, default_branch: str) -> PushOutcome:
    if existing != head_after:
        raise PublishRefused(
            f"the remote already has {ref} at {existing}, not the run's head_after "
            f"{head_after}; nothing was overwritten"
        )
    return PushOutcome(ref=ref, commit=head_after, pushed=False, default_branch=default_branch)


async def _check_history(scratch: ScratchGit, facts: PublishFacts) -> None:
    """The upload's history check (changes/verify.py), again, on the unbundled commits,
    and exactly the run's accepted commits when its evidence lists them."""
    try:
        history = await verify_history(scratch, facts.baseline, facts.head_after, facts.grant)
    except ChangesInvalid as exc:
        raise PublishRefused(exc.reason) from exc
    if facts.accepted_commits is not None and history.commits != facts.accepted_commits:
        raise PublishRefused("the commits are not the run's accepted commits")


class _Git:
    """git in the scratch repository: local calls with no transport at all, remote calls
    with the URL's protocol alone and the credential helper."""

    def __init__(self, git_dir: Path, remote: Remote) -> None:
        self._git_dir = git_dir
        self._home = git_dir.parent
        self._remote = remote
        parts = urllib.parse.urlsplit(remote.url)
        self._scheme = parts.scheme
        self._origin = f"{parts.scheme}://{parts.netloc}"

    async def local(self, *args: str) -> bytes:
        return await self._run(args, ("protocol.allow=never",), {}, _LOCAL_TIMEOUT_S)

    async def succeeds(self, *args: str) -> bool:
        try:
            await self.local(*args)
        except GitFailed:
            return False
        return True

    async def remote(self, *args: str) -> bytes:
        config = [
            "protocol.allow=never",
            f"protocol.{self._scheme}.allow=always",
            "http.followRedirects=false",
            "credential.helper=",
            "push.gpgSign=false",
        ]
        env: dict[str, str] = {}
        if self._remote.token_file is not None and self._remote.username is not None:
            config.append(
                f"credential.helper=!{shlex.quote(sys.executable)} -I -m {CREDENTIAL_HELPER_MODULE}"
            )
            env = {
                ORIGIN_VARIABLE: self._origin,
                TOKEN_FILE_VARIABLE: str(self._remote.token_file),
                USERNAME_VARIABLE: self._remote.username,
            }
        try:
            return await self._run(args, config, env, _REMOTE_TIMEOUT_S)
        except GitFailed as exc:
            raise RemoteUnavailable(
                f"git {args[0]} to {self._remote.url}: {exc.stderr[:300]}"
            ) from exc
        except (GitTimeout, GitOutputTooLarge) as exc:
            raise RemoteUnavailable(f"git {args[0]} to {self._remote.url}: {exc}") from exc

    async def look_up(self, ref: str) -> tuple[str, str | None]:
        """(the remote's default branch, the sha of `ref` there or None)."""
        out = await self.remote("ls-remote", "--symref", self._remote.url, "HEAD", ref)
        default_branch: str | None = None
        existing: str | None = None
        for line in out.decode("utf-8", "replace").splitlines():
            left, _, name = line.partition("\t")
            if left.startswith("ref: ") and name == "HEAD":
                default_branch = left.removeprefix("ref: ").strip()
            elif name == ref:
                existing = left.strip()
        if default_branch is None or not default_branch.startswith("refs/heads/"):
            raise RemoteUnavailable(f"{self._remote.url} names no default branch (HEAD)")
        return default_branch, existing

    async def _run(
        self,
        args: Sequence[str],
        config: Sequence[str],
        extra_env: dict[str, str],
        timeout_s: float,
    ) -> bytes:
        return await run_git(
            args,
            git_dir=self._git_dir,
            home=self._home,
            max_output_bytes=_OUTPUT_BYTES,
            timeout_s=timeout_s,
            config=config,
            env=extra_env,
        )
