"""Links to a delivered file that tell the truth: pure, only from values that validate.

A run's commits exist only in the worker's repository until an operator publishes them
(POST /ops-runs/{id}/publish), so a Forgejo link is made only for a published commit:
`FORGEJO_WEB_BASE/{org}/{repo}/src/commit/{commit}/{path}` (`forgejo_file_url`, given the
publication's commit). Before that, a file links to the run's own change view of it, the
ops UI's run page at the file's diff: `/ops/ui/runs/{run}#{change_anchor(path)}`
(`change_view_url`). Every part is validated again here (a historic row, a misconfigured
base), each path segment is percent-encoded, and a missing or invalid part means no link
rather than a wrong one.
"""

from __future__ import annotations

import urllib.parse
import uuid

from activity_core.changes.anchors import change_anchor
from activity_core.settings import absolute_http_base
from ops_evidence import git_object_id, repo_path, target_repo

__all__ = ["change_view_url", "forgejo_file_url", "split_org_repo", "web_base"]


def web_base(value: object) -> str | None:
    """An absolute http(s) base URL without credentials, query or fragment; no trailing `/`.

    The same rule FORGEJO_WEB_BASE is held to at start (`settings.absolute_http_base`)."""
    return absolute_http_base(value)


def split_org_repo(value: object) -> tuple[str, str] | None:
    """`org/repo` as Forgejo addresses it; anything deeper or shallower has no web page."""
    repo = target_repo(value)
    if repo is None:
        return None
    org, sep, name = repo.partition("/")
    if not sep or "/" in name:
        return None
    return org, name


def forgejo_file_url(
    base: object, repository: object, head_after: object, path: object
) -> str | None:
    """The Forgejo page of `path` at commit `head_after` in `repository`, or None."""
    root = web_base(base)
    org_repo = split_org_repo(repository)
    commit = git_object_id(head_after)
    file_path = repo_path(path)
    if root is None or org_repo is None or commit is None or file_path is None:
        return None
    org, name = org_repo
    quoted_path = "/".join(urllib.parse.quote(segment, safe="") for segment in file_path.split("/"))
    return (
        f"{root}/{urllib.parse.quote(org, safe='')}/{urllib.parse.quote(name, safe='')}"
        f"/src/commit/{commit}/{quoted_path}"
    )


def change_view_url(ops_run_id: object, path: object) -> str | None:
    """The ops UI's run page at `path`'s diff (a path relative to the UI's origin), or None."""
    file_path = repo_path(path)
    if file_path is None:
        return None
    try:
        run = uuid.UUID(str(ops_run_id))
    except ValueError:
        return None
    return f"/ops/ui/runs/{run}#{change_anchor(file_path)}"
