"""`ops-demo` as a new user runs it: a fresh HOME, nothing running. It completes a run,
serves the UI, and on Ctrl-C (SIGINT) stops everything and exits 0, leaving no process
behind. A start that fails ends with one line naming what failed and its log."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from e2e_kit.stack import processes_mentioning
from ops_demo.stack import base_environment
from ops_devsupport.processes import Supervisor, console_script, free_port, log_contains

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
DEV_TOOLS = ("pytest", "mypy", "ruff", "hypothesis", "respx", "schemathesis", "playwright")


def test_the_readme_demo_command_installs_the_product_and_no_dev_tool(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = "uv run --no-dev --package ops-demo ops-demo"
    assert f"```sh\n{command}\n```" in readme
    # what that command syncs, into a scratch environment (from uv's cache: no network)
    uv = shutil.which("uv")
    assert uv is not None
    env = {**base_environment(), "UV_PROJECT_ENVIRONMENT": str(tmp_path / "venv")}
    subprocess.run(
        [uv, "sync", "--frozen", "--no-dev", "--package", "ops-demo", "--quiet"],
        cwd=REPO,
        env=env,
        check=True,
        timeout=300,
    )
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    installed = {entry.name.split("-")[0].lower() for entry in site.iterdir()}
    assert {"ops_demo", "activity_core", "rein_aharness"} <= installed
    assert not installed & set(DEV_TOOLS), installed & set(DEV_TOOLS)


def _new_user(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in base_environment().items()
        if not k.startswith("XDG_") and k != "TEST_DATABASE_URL"
    }
    env["HOME"] = str(home)
    return env


def _assert_the_printed_commands_show_and_publish_the_change(
    out: str, home: Path, env: dict[str, str], token: str
) -> None:
    """The demo prints where the change is seen and how it is published; both commands
    work as printed (with the operator's token): the change lists the brief, and the
    publish pushes the landed branch to the forge at the run's commit."""
    state = home / ".local" / "state" / "ops-demo"
    forge = state / "forge" / "research" / "briefs.git"
    mirror = state / "mirrors" / "research" / "briefs.git"
    cli_env = {**env, "ACTIVITY_CORE_OPERATOR_TOKEN": token}
    change = re.search(
        r"^  the change: uv run activity-core (runs --url \S+ changes \S+)$", out, re.M
    )
    publish = re.search(
        r"^  publish it: uv run activity-core (runs --url \S+ publish (\S+))$", out, re.M
    )
    branch = re.search(r"\(pushes (rein/\S+) to ", out)
    assert change and publish and branch, out
    activity_core = str(console_script("activity-core"))
    shown = subprocess.run(
        [activity_core, *change[1].split()], env=cli_env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "briefs/" in shown.stdout, shown.stdout
    published = subprocess.run(
        [activity_core, *publish[1].split()],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert published.returncode == 0, published.stderr
    landed = _git("-C", str(mirror), "rev-parse", branch[1])
    deadline = time.monotonic() + 60
    while (
        _git("-C", str(forge), "for-each-ref", "--format=%(objectname)", f"refs/heads/{branch[1]}")
        != landed
    ):
        assert time.monotonic() < deadline, f"{branch[1]} was not published to the forge"
        time.sleep(0.5)


@pytest.mark.timeout(240)
def test_the_demo_completes_a_run_serves_the_ui_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path,
) -> None:
    env = _new_user(tmp_path)
    home = env["HOME"]
    with Supervisor(tmp_path / "logs", env=env) as sup:
        demo = sup.start(
            "ops-demo",
            [str(console_script("ops-demo")), "--port", str(free_port())],
            ready=log_contains("Press Ctrl-C to stop."),
            ready_timeout=180,
            stop_timeout=60,
        )
        out = demo.output()
        assert "run completed: succeeded" in out, out
        states = re.findall(r"ops run \S+  (\w+) +attempt (\d)", out)
        assert states == [("open", "0"), ("claimed", "1"), ("succeeded", "1")], out
        ui = re.search(r"^Ops UI: +(\S+)$", out, re.MULTILINE)
        temporal_ui = re.search(r"^Temporal UI: +(\S+)$", out, re.MULTILINE)
        assert temporal_ui, out
        assert httpx.get(temporal_ui[1], timeout=15).status_code == 200  # the UI answers
        token = re.search(r"^Operator token: +(\S+)$", out, re.MULTILINE)
        assert ui and token, out

        assert httpx.get(ui[1], timeout=15).status_code == 303  # to the login form
        assert re.search(r"^Operator: +operator$", out, re.MULTILINE), out
        # sign in the way the form does: name and token, from the UI's own origin
        base = httpx.URL(ui[1])
        origin = f"{base.scheme}://{base.netloc.decode()}"
        signed_in = httpx.post(
            f"{origin}/ops/ui/login",
            data={"name": "operator", "token": token[1]},
            headers={"origin": origin},
            timeout=15,
        )
        assert signed_in.status_code == 303, signed_in.text
        session = signed_in.cookies["ops_session"]
        page = httpx.get(ui[1], cookies={"ops_session": session}, timeout=15)
        assert page.status_code == 200
        assert 'data-field="state">succeeded<' in page.text
        assert "briefs/" in page.text  # the artefact
        assert "profile.bwrap-local" in page.text  # the brief ran in the sandbox
        _assert_the_run_started_from_the_fetched_remote(out, Path(home))
        _assert_the_printed_commands_show_and_publish_the_change(out, Path(home), env, token[1])

        demo.send_signal(signal.SIGINT)  # what Ctrl-C in its terminal sends
        assert demo.wait(90) == 0, demo.output()
        out = demo.output()
        assert "stopped." in out, out
        assert "Traceback" not in out, out
    assert processes_mentioning(home) == []


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.strip()


def _assert_the_run_started_from_the_fetched_remote(out: str, home: Path) -> None:
    """The worker fetched the demo's forge repository into its mirror, started the run at
    the forge's head and landed the brief on a branch of the mirror whose parent is it; the
    printed `see it` command shows the brief."""
    state = home / ".local" / "state" / "ops-demo"
    forge = state / "forge" / "research" / "briefs.git"
    mirror = state / "mirrors" / "research" / "briefs.git"
    assert f"fetching from file://{state / 'forge'}/{{target_repo}}.git" in out, out
    see_it = re.search(r"^  see it:  git -C (\S+) show (rein/\S+):(\S+)$", out, re.MULTILINE)
    assert see_it and Path(see_it[1]) == mirror, out
    forge_head = _git("-C", str(forge), "rev-parse", "HEAD")
    assert _git("-C", str(mirror), "rev-parse", "refs/remotes/origin/main") == forge_head
    assert _git("-C", str(mirror), "rev-parse", f"{see_it[2]}^") == forge_head
    brief = _git("-C", see_it[1], "show", f"{see_it[2]}:{see_it[3]}")
    assert brief  # the brief the run wrote
    # the forge itself is only read: the landed branch exists in the mirror alone
    assert _git("-C", str(forge), "for-each-ref", "refs/heads/rein/") == ""


@pytest.mark.timeout(240)
def test_a_failed_start_is_one_line_naming_what_failed_and_its_log(tmp_path: Path) -> None:
    env = _new_user(tmp_path)
    examples = tmp_path / "examples"
    shutil.copytree(EXAMPLES, examples)
    (examples / "definitions" / "broken.yaml").write_text("id: Not A Slug\n", encoding="utf-8")
    with Supervisor(tmp_path / "logs", env=env) as sup:
        demo = sup.start(
            "ops-demo",
            [
                str(console_script("ops-demo")),
                "--port",
                str(free_port()),
                "--examples",
                str(examples),
            ],
        )
        assert demo.wait(180) == 1
        out = demo.output()
    assert "Traceback" not in out, out
    (failure,) = [
        line
        for line in out.splitlines()
        if line.startswith("ops-demo: ") and " failed with status " in line
    ]
    log = re.search(r"\(log: (\S+)\)$", failure)
    assert log and "sync-definitions" in failure, out
    assert "broken.yaml" in Path(log[1]).read_text()
    assert "stopped." in out
    assert processes_mentioning(env["HOME"]) == []
