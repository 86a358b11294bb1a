"""What the scenarios run: their definitions, the harness profiles, worker identities.

One definition per scenario, each with its own label and target repository, so the
scenarios' workers (which claim only their scenario's label) never see another's runs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

# Worker identities of the session (each with its own token in the credentials file).
WORKER_IDS = (
    "e2e-scheduled",
    "e2e-kill-1",
    "e2e-kill-2",
    "e2e-lost",
    "e2e-auth-wrong-token",
    "e2e-auth-other-id",
    "e2e-auth-right",
    "e2e-reopen",
    "e2e-restart-1",
    "e2e-restart-2",
    "e2e-stale",
    "e2e-cancel",
    "e2e-publish",
    "e2e-remote",
)

# target_repo of each scenario's definition (one repository each)
REPOSITORIES = (
    "e2e/scheduled",
    "e2e/kill",
    "e2e/lost",
    "e2e/auth",
    "e2e/reopen",
    "e2e/restart",
    "e2e/stale",
    "e2e/cancel",
)

GRANT_BRIEFS = (
    '{version: "1", allowed_paths: [briefs/], commit_count: {min: 1, max: 1}, publish: false}'
)
GRANT_DOCS = (
    '{version: "1", allowed_paths: [docs/], commit_count: {min: 1, max: 1}, publish: false}'
)


def definition(
    slug: str,
    *,
    repo: str,
    profile: str,
    grant: str,
    schedule: str | None = None,
) -> str:
    schedule_line = f"schedule: {schedule}\n" if schedule else ""
    body = textwrap.dedent(
        f"""\
        rules:
          - id: work
            action:
              task_template: "{slug} for {{scheduled_for:%Y-%m-%d}}"
              description_template: "The {slug} scenario of the end-to-end suite."
              target_repo: {repo}
              labels: [automated, {slug}]
              priority: medium
              harness_profile_ref: {profile}
              execution_refs: {{correlation_id: context.request.correlation_id}}
              repository_grant: {grant}
        """
    )
    return f"id: {slug}\ntitle: E2E {slug}\n{schedule_line}{body}"


def write_definitions(directory: Path, slugs: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for slug, text in slugs.items():
        (directory / f"{slug}.yaml").write_text(text, encoding="utf-8")
    return directory


def commit_script(*, slow_attempt: str | None, seconds: int) -> str:
    """A `command` approach: maybe sleep, then commit one file under docs/ (inside the
    scenario's grant). It runs in the worker's sandbox, so it can leave no mark outside its
    worktree: the scenarios see its executions in the workers' logs (`approach started`,
    `approach finished`) and its work on the landing branches."""
    sleep = (
        f'if [ "$REIN_RUN_ATTEMPT" = "{slow_attempt}" ]; then sleep {seconds}; fi'
        if slow_attempt is not None
        else f"sleep {seconds}"
    )
    return (
        "set -e; "
        f"{sleep}; "
        "mkdir -p docs; "
        'echo "$REIN_RUN_ID attempt $REIN_RUN_ATTEMPT" > "docs/$REIN_RUN_ID.md"; '
        'git add docs; git commit -q -m "e2e: $REIN_RUN_ID attempt $REIN_RUN_ATTEMPT"'
    )


def write_profiles(path: Path) -> Path:
    def command(profile_id: str, argv: list[str], timeout_s: float) -> str:
        quoted = ", ".join(f"'{arg}'" for arg in argv)
        return textwrap.dedent(
            f"""\
              - id: {profile_id}
                version: 1.0.0
                approach: command
                command:
                  argv: [{quoted}]
                  timeout_s: {timeout_s}
                  env_allowlist: [PATH, HOME, LANG]
                sandbox_profile: profile.bwrap-local
                resolved_model: null
                rein: {{id: rein-aharness, version: 0.1.0}}
            """
        )

    brief = textwrap.dedent(
        """\
          - id: harness.agent-dev
            version: 1.0.0
            approach: brief
            brief: {output_path: "briefs/{date}.md"}
            sandbox_profile: profile.bwrap-local
            resolved_model: null
            rein: {id: rein-aharness, version: 0.1.0}
        """
    )
    crash = commit_script(slow_attempt="1", seconds=60)
    restart = commit_script(slow_attempt=None, seconds=12)
    stale = commit_script(slow_attempt="2", seconds=8)
    text = (
        "profiles:\n"
        + brief
        + command("harness.e2e-crash", ["/bin/sh", "-c", crash], 120)
        + command("harness.e2e-restart", ["/bin/sh", "-c", restart], 120)
        + command("harness.e2e-stale", ["/bin/sh", "-c", stale], 120)
        + command("harness.e2e-timeout", ["sleep", "30"], 0.3)
        # sleeps a minute, then would commit: an operator cancels it long before
        + command(
            "harness.e2e-cancel",
            ["/bin/sh", "-c", commit_script(slow_attempt=None, seconds=60)],
            120,
        )
    )
    path.write_text(text, encoding="utf-8")
    return path


AGENT_DEV = "harness.agent-dev@1.0.0"


def scenario(slug: str, profile: str, grant: str, schedule: str | None = None) -> str:
    """The definition of scenario `slug` (`e2e-<name>`), on its repository `e2e/<name>`."""
    repo = f"e2e/{slug.removeprefix('e2e-')}"
    return definition(slug, repo=repo, profile=profile, grant=grant, schedule=schedule)


SESSION_DEFINITIONS = {
    slug: scenario(slug, *rest)
    for slug, *rest in (
        # never due during a test run: the scenario triggers the schedule itself
        ("e2e-scheduled", AGENT_DEV, GRANT_BRIEFS, '{cron: "0 3 1 1 *", timezone: Europe/Berlin}'),
        ("e2e-kill", "harness.e2e-crash@1.0.0", GRANT_DOCS),
        ("e2e-lost", AGENT_DEV, GRANT_BRIEFS),
        ("e2e-auth", AGENT_DEV, GRANT_BRIEFS),
        ("e2e-reopen", "harness.e2e-timeout@1.0.0", GRANT_DOCS),
        ("e2e-stale", "harness.e2e-stale@1.0.0", GRANT_DOCS),
        ("e2e-cancel", "harness.e2e-cancel@1.0.0", GRANT_DOCS),
        # its repository lives on the scenario's git server, not under the session's root
        ("e2e-remote", AGENT_DEV, GRANT_BRIEFS),
        ("e2e-publish", AGENT_DEV, GRANT_BRIEFS),
    )
}

RESTART_DEFINITIONS = {
    "e2e-restart": scenario("e2e-restart", "harness.e2e-restart@1.0.0", GRANT_DOCS)
}
