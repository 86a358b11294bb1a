"""One log schema (docs/logging.md): both services write the same JSON lines.

The schema is written down once, here (`SCHEMA`, `parse_line`), and held against:

- both formatters, given the same records: they write the same line;
- every line `activity-core serve` writes while a worker claims and closes runs, an
  operator's action is refused (with its X-Request-Id), a UI sign-in fails and a client
  sends bytes that are no HTTP;
- every line `rein-aharness run` writes while it executes one command whose output is
  full of control characters and one whose executable does not exist (an exception,
  logged with its traceback);
- an uncaught exception, in each service's excepthook, and in `activity-core serve`
  crashing at start: one line with its traceback, not Python's text.

The processes' stdout and stderr go to one log (ops_devsupport.processes); neither writes to
stdout, so each line checked is a line of stderr.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import activity_core.logs as activity_core_logs
import rein_aharness.worker.logs as rein_aharness_logs
from e2e_kit.db import Db
from e2e_kit.git import make_repository
from e2e_kit.stack import new_token
from ops_demo.stack import (
    ActivityCoreConfig,
    WorkerConfig,
    activity_core_migrate,
    activity_core_serve,
    rein_worker,
)
from ops_devsupport.processes import ManagedProcess, Supervisor, console_script, wait_until

# -- the schema ---------------------------------------------------------------------------

_TS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


def _timestamp(value: object) -> bool:
    return (
        isinstance(value, str)
        and _TS.fullmatch(value) is not None
        and datetime.fromisoformat(value).utcoffset() is not None
    )


def _text(value: object) -> bool:
    return isinstance(value, str) and value != ""


# The keys the formatters write themselves, and what their values are. `run_id`,
# `worker_id` and `request_id` are written when known; any other key is an `extra` field
# of the record: any JSON value but null.
SCHEMA: dict[str, Callable[[object], bool]] = {
    "ts": _timestamp,
    "level": lambda value: value in _LEVELS,
    "logger": _text,
    "message": lambda value: isinstance(value, str),
    "exc_type": lambda value: isinstance(value, str) and _NAME.fullmatch(value) is not None,
    "traceback": lambda value: (
        isinstance(value, str) and value.startswith("Traceback (most recent call last):\n")
    ),
    "run_id": _text,
    "worker_id": _text,
    "request_id": _text,
}
FIRST_KEYS = ("ts", "level", "logger", "message")
RESERVED_KEYS = (*FIRST_KEYS, "exc_type", "traceback")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"a key repeated: {keys}"
    return dict(pairs)


def _no_constant(name: str) -> None:
    raise AssertionError(f"{name} is not JSON")


def parse_line(raw: str) -> dict[str, Any]:
    """One log line, checked against the schema; the event it describes."""
    assert raw.isascii(), f"not ASCII: {raw!r}"
    assert raw.isprintable(), f"a control character not escaped: {raw!r}"
    # strict parsing refuses a raw control character inside a string as well
    line = json.loads(raw, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    assert isinstance(line, dict), raw
    assert tuple(line)[:4] == FIRST_KEYS, raw
    for key, valid in SCHEMA.items():
        if key in line:
            assert valid(line[key]), f"{key}={line[key]!r} in {raw}"
    assert ("exc_type" in line) == ("traceback" in line), raw
    assert None not in line.values(), f"a null field: {raw}"
    return line


def parse_output(process: ManagedProcess) -> list[dict[str, Any]]:
    """Every line the process wrote since its latest start, each checked."""
    text = process.output()
    assert text.endswith("\n"), f"{process.name} wrote no whole lines: {text[-200:]!r}"
    return [parse_line(raw) for raw in text[:-1].split("\n")]


# -- the two formatters, on the same records ---------------------------------------------


def _exception() -> Any:
    try:
        raise KeyError("boom\nsecond line")
    except KeyError:
        return sys.exc_info()


RECORDS: dict[str, dict[str, Any]] = {
    "plain": {},
    "context keys": {"extra": {"run_id": "r-1", "worker_id": "w-1", "request_id": "q-1"}},
    "other extra fields": {"extra": {"attempt": 2, "labels": ["a", "b"], "ok": True}},
    "unknown fields are left out": {"extra": {"run_id": None, "code": None}},
    "reserved keys are never overridden": {
        "extra": {"ts": "x", "level": "x", "logger": "x", "exc_type": "x", "traceback": "x"}
    },
    "private and uvicorn's coloured copies are left out": {
        "extra": {"_hidden": 1, "color_message": "\x1b[32mhi\x1b[0m"}
    },
    "values JSON cannot take are text": {
        "extra": {"at": datetime(2026, 1, 2, tzinfo=UTC), "ratio": float("nan"), "ids": {(1,)}}
    },
    "control characters and line separators": {
        "args": ("a\nb\r\x1b[31m\x00\x07\t\u2028\u0085é",),
        "extra": {"output_tail": "x\ny"},
    },
    "an exception": {"exc_info": True, "level": logging.ERROR},
}


def _record(case: dict[str, Any]) -> logging.LogRecord:
    args = case.get("args", ("é",))
    exc_info = _exception() if case.get("exc_info") else None
    record = logging.LogRecord(
        "ops.test", case.get("level", logging.INFO), "x.py", 1, "run %s", args, exc_info
    )
    record.created = 1_796_429_554.5675
    for key, value in case.get("extra", {}).items():
        setattr(record, key, value)
    return record


def test_both_services_reserve_the_same_keys() -> None:
    assert activity_core_logs.RESERVED_KEYS == rein_aharness_logs.RESERVED_KEYS == RESERVED_KEYS


@pytest.mark.parametrize("context", [None, {"worker_id": "w-context"}])
@pytest.mark.parametrize("case", list(RECORDS.values()), ids=list(RECORDS))
def test_both_formatters_write_the_same_line(
    case: dict[str, Any], context: dict[str, str] | None
) -> None:
    written = activity_core_logs.JsonFormatter(context).format(_record(case))
    assert rein_aharness_logs.JsonFormatter(context).format(_record(case)) == written
    line = parse_line(written)
    assert line["ts"] == "2026-12-05T00:12:34.567Z"
    expected_worker = (case.get("extra", {}).get("worker_id")) or (context or {}).get("worker_id")
    assert line.get("worker_id") == expected_worker
    if case.get("exc_info"):
        assert line["exc_type"] == "KeyError"
        assert line["traceback"].endswith("KeyError: 'boom\\nsecond line'")
    if "args" in case:
        assert line["message"] == "run " + case["args"][0]
        assert "\\u001b" in written and "\\u2028" in written and "\\n" in written


def test_extra_fields_follow_one_rule() -> None:
    line = parse_line(
        activity_core_logs.JsonFormatter().format(
            _record({"extra": {"level": "x", "code": "not_found", "_hidden": 1, "skip": None}})
        )
    )
    assert line == {
        "ts": "2026-12-05T00:12:34.567Z",
        "level": "INFO",
        "logger": "ops.test",
        "message": "run é",
        "code": "not_found",
    }


# -- the real processes -------------------------------------------------------------------

LABEL = "log-schema"
WORKER_ID = "log-schema-worker"
REQUEST_ID = "log-schema-request-1"
# What the first command prints: every kind of character a log line must escape.
SHOUT = "first\nsecond\r\x1b[31mred\x1b[0m\x07\tend"
GRANT = {
    "version": "1",
    "allowed_paths": ["docs/"],
    "commit_count": {"min": 1, "max": 1},
    "publish": False,
}


def _command_profile(profile_id: str, argv: list[str]) -> str:
    return (
        f"  - id: {profile_id}\n"
        "    version: 1.0.0\n"
        "    approach: command\n"
        f"    command: {{argv: {json.dumps(argv)}, timeout_s: 30, env_allowlist: [PATH]}}\n"
        "    sandbox_profile: profile.none-local\n"
        "    resolved_model: null\n"
        "    rein: {id: rein-aharness, version: 0.1.0}\n"
    )


def _seed_run(db: Db, definition_id: uuid.UUID, profile_ref: str) -> str:
    run_id = uuid.uuid4()
    db.execute(
        """INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo,
               title, description, labels, priority, source_type, source_id,
               triggering_event_id, harness_profile_ref, repository_grant)
           VALUES ($1, $2, $3, 'logs/schema', 'log schema', 'seeded by the test', $4::jsonb,
               'medium', 'rule', 'log-schema', $5, $6, $7::jsonb)""",
        run_id,
        definition_id,
        f"log-schema:{run_id}",
        json.dumps([LABEL]),
        f"manual:{run_id}",
        profile_ref,
        json.dumps(GRANT),
    )
    return str(run_id)


def _seed(dsn: str) -> tuple[str, str]:
    """(a run whose command shouts, a run whose command does not exist)."""
    db = Db(dsn)
    try:
        definition_id = uuid.uuid4()
        db.execute(
            """INSERT INTO activity_definitions (id, slug, title, definition, content_digest)
               VALUES ($1, $2, 'log schema', '{}'::jsonb, 'x')""",
            definition_id,
            f"log-schema-{definition_id.hex[:8]}",
        )
        return (
            _seed_run(db, definition_id, "harness.log-shout@1.0.0"),
            _seed_run(db, definition_id, "harness.log-missing@1.0.0"),
        )
    finally:
        db.close()


def _closed(worker: ManagedProcess, run_ids: tuple[str, ...]) -> bool:
    closed = set()
    for raw in worker.output().splitlines():
        if '"run closed"' in raw:
            closed.add(json.loads(raw).get("run_id"))
    return closed >= set(run_ids)


def _not_http(url: str) -> None:
    host, port = httpx.URL(url).host, httpx.URL(url).port
    assert port is not None
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"\x16\x03\x01 no HTTP at all\r\n\r\n")
        sock.recv(1024)


def _worker_config(root: Path, config: ActivityCoreConfig, url: str) -> WorkerConfig:
    """A worker of its own label, running two command profiles unconfined (the test is
    about the worker's log, not its sandbox), logging at DEBUG (the commands' output)."""
    repositories = root / "repositories"
    make_repository(repositories, "logs/schema")
    catalogue = root / "profiles.yaml"
    catalogue.write_text(
        "profiles:\n"
        + _command_profile("harness.log-shout", ["/bin/sh", "-c", 'printf %s "$0"; exit 3', SHOUT])
        + _command_profile("harness.log-missing", ["/nonexistent/log-schema-tool"]),
        encoding="utf-8",
    )
    assert config.worker_token is not None
    return WorkerConfig(
        activity_core_url=url,
        worker_id=WORKER_ID,
        worker_token=config.worker_token,
        state_dir=root / "worker",
        profiles=catalogue,
        repositories_root=repositories,
        wait_seconds=1,
        backoff_seconds=0.5,
        log_level="DEBUG",
        extra={"REIN_AHARNESS_ALLOW_UNSANDBOXED": "1"},
    )


@pytest.fixture
def config(supervisor: Supervisor, session_dsn: str) -> ActivityCoreConfig:
    built = ActivityCoreConfig(
        database_url=session_dsn,
        temporal_address="127.0.0.1:9",  # nothing here asks Temporal
        operator_token=new_token(),
        worker_token=new_token(),
        worker_id=WORKER_ID,
        extra={"ACTIVITY_CORE_LOG_LEVEL": "DEBUG"},
    )
    activity_core_migrate(supervisor, built)
    return built


def test_serve_and_worker_write_every_line_in_the_schema(
    supervisor: Supervisor, session_dsn: str, config: ActivityCoreConfig, tmp_path: Path
) -> None:
    serve, url = activity_core_serve(supervisor, config, name="log-schema-serve")
    shout, missing = _seed(session_dsn)
    worker = rein_worker(
        supervisor,
        _worker_config(tmp_path, config, url),
        name="log-schema-worker",
        labels=[LABEL],
    )
    wait_until(
        lambda: _closed(worker, (shout, missing)),
        timeout=60,
        what="the worker to close both runs",
        describe=supervisor.describe,
    )

    with httpx.Client(base_url=url, timeout=10, trust_env=False) as http:
        refused = http.post(
            f"/ops-runs/{uuid.uuid4()}/requeue",
            headers={
                "Authorization": f"Bearer {config.operator_token}",
                "X-Request-Id": REQUEST_ID,
            },
        )
        assert refused.status_code == 404, refused.text
        signed_in = http.post(
            "/ops/ui/login",
            data={"name": "operator", "token": "not-the-token", "next": "/ops/ui"},
            headers={"origin": url},
        )
        assert signed_in.status_code == 401, signed_in.text
    _not_http(url)
    assert worker.stop() == 0
    serve.stop()  # drains, then ends by SIGTERM

    served = parse_output(serve)
    worked = parse_output(worker)

    # activity-core: the worker's claims and closes, with their run and worker ids
    claimed = [line for line in served if line["message"] == "run claimed"]
    assert {line["run_id"] for line in claimed} >= {shout, missing}
    assert {line["worker_id"] for line in claimed} == {WORKER_ID}
    # the refused operator action, with the request id its caller sent
    [audit] = [line for line in served if line.get("request_id") == REQUEST_ID]
    assert (audit["level"], audit["code"]) == ("INFO", "not_found")
    # a warning of ours and one of uvicorn's, in the same schema
    assert any(
        line["level"] == "WARNING" and line["message"].startswith("ops UI sign-in failed")
        for line in served
    )
    assert any(
        line["level"] == "WARNING"
        and line["logger"] == "uvicorn.error"
        and "Invalid HTTP request" in line["message"]
        for line in served
    )

    # rein-aharness: every line says which worker wrote it
    assert {line["worker_id"] for line in worked} == {WORKER_ID}
    # the command's output, control characters and all, as one escaped value
    [finished] = [
        line for line in worked if line["message"] == "command finished" and line["run_id"] == shout
    ]
    assert finished["output_tail"] == SHOUT
    # the missing executable: an error with its traceback
    failures = [
        line
        for line in worked
        if line["message"] == "execution failed unexpectedly" and line["run_id"] == missing
    ]
    assert failures, "the worker logged no failed execution"
    for line in failures:
        assert (line["level"], line["exc_type"]) == ("ERROR", "FileNotFoundError")
        assert "/nonexistent/log-schema-tool" in line["traceback"]


def test_a_crash_at_start_is_one_line_with_its_traceback(
    supervisor: Supervisor, tmp_path: Path, config: ActivityCoreConfig
) -> None:
    # prometheus_client keeps its values under this directory, which does not exist
    env = {**config.env(), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "no-such-directory")}
    argv = [str(console_script("activity-core")), "serve", "--port", "0"]
    done = supervisor.run("log-schema-crash", argv, env=env, check=False)
    assert done.returncode == 1, done.output
    assert done.output.endswith("\n"), done.output
    [line] = [parse_line(raw) for raw in done.output[:-1].split("\n")]
    assert (line["level"], line["message"]) == ("CRITICAL", "uncaught exception"), line
    assert line["exc_type"] == "FileNotFoundError", line
    assert "no-such-directory" in line["traceback"], line


@pytest.fixture
def restored_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing"):
        monkeypatch.setattr(logging, name, getattr(logging, name))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    loggers = [logging.getLogger(name) for name in ("", "rein_aharness", "uvicorn.access")]
    saved = [(lg.handlers[:], lg.level, lg.disabled) for lg in loggers]
    yield
    for lg, (handlers, level, disabled) in zip(loggers, saved, strict=True):
        lg.handlers[:], lg.disabled = handlers, disabled
        lg.setLevel(level)


@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize(
    ("configure", "logger"),
    [
        (lambda: activity_core_logs.configure_logging("INFO"), "activity_core"),
        (lambda: rein_aharness_logs.configure_logging("INFO", worker_id="w-1"), "rein_aharness"),
    ],
    ids=["activity-core", "rein-aharness"],
)
def test_an_uncaught_exception_is_one_line_with_its_traceback(
    configure: Callable[[], None], logger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure()
    try:
        raise RuntimeError("crashed\nhere")
    except RuntimeError:
        sys.excepthook(*sys.exc_info())
    written = capsys.readouterr().err
    assert written.endswith("\n") and written.count("\n") == 1, written
    line = parse_line(written[:-1])
    assert (line["level"], line["logger"]) == ("CRITICAL", logger)
    assert line["exc_type"] == "RuntimeError"
    assert line["traceback"].endswith("RuntimeError: crashed\nhere")
