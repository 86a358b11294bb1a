"""`rein-aharness close-outbox status|replay`: output, JSON shape and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from ops_devsupport.processes import run_console_script
from ops_testsupport.factories import run_projection
from rein_aharness.cli import main
from rein_aharness.operator.exit_codes import ExitCode
from rein_aharness.outbox import OutboxStore

BASE = "http://activity-core.test"
RUN = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"

Factory = Callable[..., dict[str, Any]]


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in list(os.environ):
        if name.startswith(("ACTIVITY_CORE_", "REIN_AHARNESS_")):
            monkeypatch.delenv(name)
    state = tmp_path / "state"
    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", str(state))
    monkeypatch.setenv("ACTIVITY_CORE_URL", BASE)
    monkeypatch.setenv("ACTIVITY_CORE_WORKER_TOKEN", "s3cret-token")
    monkeypatch.setenv("ACTIVITY_CORE_WORKER_ID", "rein-aharness@railiance01")
    yield state


@pytest.fixture
def cli_store(environment: Path) -> OutboxStore:
    return OutboxStore(environment / "close-outbox")


Enqueue = Callable[..., str]


@pytest.fixture
def enqueue(cli_store: OutboxStore, make_close: Factory) -> Enqueue:
    """`enqueue(**overrides)` puts make_close's close (with `overrides`) in the CLI's
    outbox: its key."""

    def enqueue_one(**overrides: Any) -> str:
        return cli_store.enqueue_close(**make_close(**overrides)).record.key

    return enqueue_one


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = _run(capsys, *argv)
    assert err == ""
    return code, json.loads(out)


def _closed(disposition: str) -> httpx.Response:
    body = {**run_projection(state="succeeded"), "close_disposition": disposition}
    return httpx.Response(200, json=body)


# -- status ------------------------------------------------------------------------------


def test_status_of_an_empty_outbox_exits_0(
    capsys: pytest.CaptureFixture[str], environment: Path
) -> None:
    code, report = _json(capsys, "close-outbox", "status", "--json")
    assert code == ExitCode.CLEAN
    assert int(ExitCode.CLEAN) == 0
    assert report == {
        "format": "rein-aharness/close-outbox-report/v1",
        "root": str(environment / "close-outbox"),
        "counts": {"pending": 0, "delivered": 0, "quarantined": 0},
        "entries": [],
        "replay": None,
    }


def test_status_exits_1_while_pending_and_lists_the_entry(
    capsys: pytest.CaptureFixture[str], enqueue: Enqueue
) -> None:
    key = enqueue()
    code, report = _json(capsys, "close-outbox", "status", "--json")
    assert code == ExitCode.PENDING
    assert int(ExitCode.PENDING) == 1
    assert report["counts"] == {"pending": 1, "delivered": 0, "quarantined": 0}
    (entry,) = report["entries"]
    assert entry == {
        "state": "pending",
        "name": f"{key}.json",
        "key": key,
        "run_id": RUN,
        "action": "complete",
        "worker_id": "rein-aharness@railiance01",
        "run_attempt": None,
        "attempts": 0,
        "last_failure_class": None,
        "age_seconds": entry["age_seconds"],
        "reason": None,
        "code": None,
    }
    assert isinstance(entry["age_seconds"], int) and entry["age_seconds"] >= 0


def test_status_exits_3_while_quarantined(
    capsys: pytest.CaptureFixture[str], cli_store: OutboxStore
) -> None:
    (cli_store.paths.quarantine / "junk.txt").write_text("x")
    (cli_store.paths.quarantine / "junk.txt.reason.json").write_text(
        '{"reason": "unexpected_name", "code": null}'
    )
    code, report = _json(capsys, "close-outbox", "status", "--json")
    assert code == ExitCode.QUARANTINED
    assert int(ExitCode.QUARANTINED) == 3
    assert report["entries"][0]["state"] == "quarantined"
    assert report["entries"][0]["reason"] == "unexpected_name"


def test_status_table_is_readable(capsys: pytest.CaptureFixture[str], enqueue: Enqueue) -> None:
    enqueue()
    code, out, err = _run(capsys, "close-outbox", "status")
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert lines[1] == "pending 1  delivered 0  quarantined 0"
    header = lines[3].split()
    assert header[:2] == ["STATE", "RUN"] and "ATTEMPTS" in header and "AGE" in header
    assert lines[4].split()[:4] == ["pending", RUN, "complete", "0"]


def test_status_needs_no_activity_core_settings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ACTIVITY_CORE_URL", "ACTIVITY_CORE_WORKER_TOKEN", "ACTIVITY_CORE_WORKER_ID"):
        monkeypatch.delenv(name)
    assert _run(capsys, "close-outbox", "status")[0] == 0


# -- replay ------------------------------------------------------------------------------


def test_replay_delivers_and_exits_0(capsys: pytest.CaptureFixture[str], enqueue: Enqueue) -> None:
    enqueue()
    with respx.mock(base_url=BASE) as router:
        route = router.post(f"/ops-runs/{RUN}/complete").mock(return_value=_closed("reconciled"))
        code, report = _json(capsys, "close-outbox", "replay", "--json")
    assert code == 0
    assert route.calls.last.request.headers["Authorization"] == "Bearer s3cret-token"
    assert report["counts"] == {"pending": 0, "delivered": 1, "quarantined": 0}
    assert report["replay"] == {
        "attempted": 1,
        "delivered": 1,
        "cancelled": 0,
        "failed": 0,
        "quarantined": 0,
        "skipped": 0,
        "set_aside": 0,
        "invalid_quarantined": 0,
        "pruned": 0,
        "stopped_early": False,
    }


def test_replay_outage_keeps_pending_stops_early_and_exits_1(
    capsys: pytest.CaptureFixture[str], enqueue: Enqueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rein_aharness.adapters import queue_client
    from rein_aharness.adapters.retry import RetryPolicy

    fast = RetryPolicy(attempts=2, initial_wait=0, max_wait=0)
    monkeypatch.setattr(queue_client, "RetryPolicy", lambda: fast)
    enqueue(run_id="run-a")
    enqueue(run_id="run-b")
    with respx.mock(base_url=BASE) as router:
        router.post(url__regex=r".*/complete$").mock(side_effect=httpx.ConnectError("down"))
        code, out, err = _run(capsys, "close-outbox", "replay", "--json")
    report = json.loads(out)
    # the report alone on stdout; on stderr, the one retry of run-a's close, as a log line
    retried = [json.loads(line) for line in err.splitlines()]
    assert [(line["message"], line["run_id"]) for line in retried] == [
        ("queue request retried", "run-a")
    ]
    assert code == ExitCode.PENDING
    assert report["replay"]["stopped_early"] is True
    assert report["replay"]["failed"] == 1
    classes = sorted(str(entry["last_failure_class"]) for entry in report["entries"])
    assert classes == ["None", "QueueTransportError"]


def test_replay_conclusive_refusal_quarantines_and_exits_3(
    capsys: pytest.CaptureFixture[str], enqueue: Enqueue
) -> None:
    enqueue()
    with respx.mock(base_url=BASE) as router:
        route = router.post(f"/ops-runs/{RUN}/complete").mock(
            return_value=httpx.Response(409, json={"code": "terminal_conflict", "detail": "x"})
        )
        code, report = _json(capsys, "close-outbox", "replay", "--json")
    assert route.call_count == 1
    assert code == ExitCode.QUARANTINED
    (entry,) = report["entries"]
    assert (entry["state"], entry["reason"], entry["code"]) == (
        "quarantined",
        "conclusive_refusal",
        "terminal_conflict",
    )


def test_replay_settles_a_close_refused_for_an_operator_cancel_and_exits_0(
    capsys: pytest.CaptureFixture[str], cli_store: OutboxStore, enqueue: Enqueue
) -> None:
    enqueue()
    detail = "the run was cancelled by operator alice"  # close_decision.py's, for a cancel
    with respx.mock(base_url=BASE) as router:
        route = router.post(f"/ops-runs/{RUN}/complete").mock(
            return_value=httpx.Response(409, json={"code": "terminal_conflict", "detail": detail})
        )
        code, report = _json(capsys, "close-outbox", "replay", "--json")
    assert route.call_count == 1
    assert code == ExitCode.CLEAN
    assert report["counts"] == {"pending": 0, "delivered": 1, "quarantined": 0}
    assert (report["replay"]["cancelled"], report["replay"]["quarantined"]) == (1, 0)
    assert report["entries"] == []
    [delivered] = cli_store.paths.delivered.iterdir()
    assert json.loads(delivered.read_bytes())["disposition"] == "cancelled"


def test_replay_sends_only_the_configured_identity_and_sets_the_others_aside(
    capsys: pytest.CaptureFixture[str], enqueue: Enqueue
) -> None:
    """An entry recorded under another identity would be refused (403) for this token
    alone; it must not end the pass before the configured identity's entries."""
    enqueue(run_id="old-run", worker_id="rein-aharness@previous")
    enqueue()
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        foreign = router.post("/ops-runs/old-run/complete").mock(
            return_value=httpx.Response(
                403, json={"code": "worker_identity_mismatch", "detail": "x"}
            )
        )
        own = router.post(f"/ops-runs/{RUN}/complete").mock(return_value=_closed("applied"))
        code, report = _json(capsys, "close-outbox", "replay", "--json")
    assert (foreign.call_count, own.call_count) == (0, 1)
    assert code == ExitCode.PENDING
    assert report["replay"]["set_aside"] == 1 and report["replay"]["delivered"] == 1
    assert report["replay"]["stopped_early"] is False
    [entry] = report["entries"]
    assert (entry["state"], entry["run_id"], entry["worker_id"]) == (
        "pending",
        "old-run",
        "rein-aharness@previous",
    )


def test_replay_limit_bounds_the_pass(capsys: pytest.CaptureFixture[str], enqueue: Enqueue) -> None:
    for index in range(3):
        enqueue(run_id=f"run-{index}")
    with respx.mock(base_url=BASE) as router:
        router.post(url__regex=r".*/complete$").mock(return_value=_closed("applied"))
        code, report = _json(capsys, "close-outbox", "replay", "--limit", "2", "--json")
    assert code == 1
    assert report["replay"]["delivered"] == 2
    assert report["counts"]["pending"] == 1


def test_replay_table_output(capsys: pytest.CaptureFixture[str], enqueue: Enqueue) -> None:
    enqueue()
    with respx.mock(base_url=BASE) as router:
        router.post(url__regex=r".*/complete$").mock(return_value=_closed("applied"))
        code, out, _ = _run(capsys, "close-outbox", "replay")
    assert code == 0
    assert "replay: 1 attempted, 1 delivered" in out
    assert "pending 0  delivered 1  quarantined 0" in out


def test_replay_of_an_empty_outbox_makes_no_request(capsys: pytest.CaptureFixture[str]) -> None:
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        code, _, _ = _run(capsys, "close-outbox", "replay")
    assert code == 0 and router.calls.call_count == 0


def test_replay_needs_activity_core_url(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACTIVITY_CORE_URL")
    code, out, err = _run(capsys, "close-outbox", "replay")
    assert code == 2 and out == ""
    assert err == "rein-aharness: ACTIVITY_CORE_URL: required for close-outbox replay\n"


# -- bad arguments and settings: one line, exit 2, never a traceback ---------------------


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([], "required: COMMAND"),
        (["close-outbox"], "required: ACTION"),
        (["close-outbox", "purge"], "invalid choice"),
        (["close-outbox", "replay", "--limit", "0"], "--limit"),
        (["close-outbox", "replay", "--limit", "ten"], "--limit"),
        (["close-outbox", "status", "--verbose"], "unrecognized arguments"),
        (["run", "--labels-mode", "some"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert fragment in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ACTIVITY_CORE_URL", "not a url"),
        ("ACTIVITY_CORE_URL", "ftp://activity-core"),
        ("ACTIVITY_CORE_WORKER_ID", "has spaces"),
        ("ACTIVITY_CORE_WORKER_TOKEN", " padded-s3cret "),
        ("REIN_AHARNESS_STATE_DIR", "relative/state"),
        ("REIN_AHARNESS_PROFILES", "/no/such/profiles.yaml"),
    ],
)
@pytest.mark.parametrize("command", ["status", "replay"])
def test_a_bad_setting_names_the_variable_and_exits_2(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    command: str,
) -> None:
    monkeypatch.setenv(variable, value)
    code, out, err = _run(capsys, "close-outbox", command)
    assert code == 2 and out == ""
    assert err.startswith("rein-aharness: invalid setting ")
    assert variable in err and len(err.splitlines()) == 1
    assert "s3cret" not in err


def test_an_unusable_state_dir_exits_4(
    capsys: pytest.CaptureFixture[str], environment: Path
) -> None:
    environment.parent.mkdir(parents=True, exist_ok=True)
    environment.write_text("a file where the state directory should be")
    code, _, err = _run(capsys, "close-outbox", "status")
    assert code == ExitCode.STORE_UNUSABLE
    assert int(ExitCode.STORE_UNUSABLE) == 4
    assert err.startswith("rein-aharness: close outbox unusable:") and "Traceback" not in err


def test_run_without_a_catalogue_stops_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    # the worker loop itself is tested in test_rein_worker*.py
    code, _, err = _run(capsys, "run", "--once")
    assert code == 2 and err == "rein-aharness: REIN_AHARNESS_PROFILES: required for run\n"


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "close-outbox", "status", "--help")
    assert code == 0
    assert "exit codes:" in out and "3    quarantined" in out


# -- the installed entry point -------------------------------------------------------------


def _entry(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_console_script("rein-aharness", *argv, env=env)


def test_entry_point_status_json(environment: Path) -> None:
    env = {**os.environ, "REIN_AHARNESS_STATE_DIR": str(environment)}
    completed = _entry("close-outbox", "status", "--json", env=env)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["counts"] == {
        "pending": 0,
        "delivered": 0,
        "quarantined": 0,
    }


@pytest.mark.parametrize(
    ("argv", "extra_env"),
    [
        (["close-outbox", "replay", "--limit", "-5"], {}),
        (["close-outbox", "status"], {"ACTIVITY_CORE_URL": "::"}),
        (["close-outbox", "status"], {"REIN_AHARNESS_STATE_DIR": "rel"}),
        (["bogus"], {}),
    ],
)
def test_entry_point_never_prints_a_traceback(
    environment: Path, argv: list[str], extra_env: dict[str, str]
) -> None:
    env = {**os.environ, "REIN_AHARNESS_STATE_DIR": str(environment), **extra_env}
    completed = _entry(*argv, env=env)
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    assert completed.stderr.startswith("rein-aharness")


def test_replay_with_a_remote_glas_fetches_a_lost_bundle_again(
    capsys: pytest.CaptureFixture[str], enqueue: Enqueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's replay finds a lost bundle as the worker does: with
    REIN_AHARNESS_GLAS_URL it asks Glas again (the attempt's request id), uploads the
    bytes of the intent's digest, then closes."""
    import hashlib

    bundle = b"# v2 git bundle\n-" + b"a" * 40 + b"\n\nPACK"
    digest = "sha256:" + hashlib.sha256(bundle).hexdigest()
    monkeypatch.setenv("REIN_AHARNESS_GLAS_URL", "http://glas.test")
    result = {
        "ok": True,
        "head_after": "b" * 40,
        "committed": True,
        "repository_transaction": {
            "transaction_id": f"rtx-{RUN}.1",
            "baseline_digest": "a" * 40,
            "changes_digest": digest,
            "acceptance": "accepted",
            "accepted_commits": ["b" * 40],
            "accepted_paths": ["briefs/x.md"],
        },
    }
    enqueue(transaction_id=f"rtx-{RUN}.1", result=result, attempt=1)
    with respx.mock(assert_all_called=True) as router:
        fetched = router.get(f"http://glas.test/v1/requests/{RUN}.1/changes.bundle").mock(
            return_value=httpx.Response(200, content=bundle)
        )
        uploaded = router.put(f"{BASE}/ops-runs/{RUN}/changes").mock(
            return_value=httpx.Response(
                201,
                json={"run_id": RUN, "attempt": 1, "digest": digest, "size": len(bundle)},
            )
        )
        router.post(f"{BASE}/ops-runs/{RUN}/complete").mock(return_value=_closed("applied"))
        code, out, err = _run(capsys, "close-outbox", "replay", "--json")
    report = json.loads(out)
    assert code == ExitCode.CLEAN, report
    assert "changes bundle fetched again from glas" in err
    assert fetched.call_count == 1
    assert uploaded.calls.last.request.content == bundle
    assert report["counts"] == {"pending": 0, "delivered": 1, "quarantined": 0}
