"""Text that operators, workers and definition files supply is display-safe wherever it
reaches a person: on the ops UI's pages and in the service's log lines, no control
character (C0, DEL, C1), lone surrogate, bidi control or other invisible formatting
character (Unicode Cf, and the line and paragraph separators) survives.

A real `serve` (real Temporal, for the pause) is given such text every way it takes it: a
cancel reason through the JSON API and through the UI's form, a pause reason, a worker's
failure error, a run title and an automation title as stored (a definition file's title
is not refused for them, and rows stored before sanitizing may hold them), a sign-in name
and a filter value that the pages echo back. Then every page that shows them, and every
line the process logged, is read. Stored text was sanitized to spaces
(ops_evidence.sanitize_error); what was stored raw shows U+FFFD where the character was
(ui/display_text.py, the templates' `finalize`). A lone surrogate never gets in at all:
JSON that escapes one is refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import unicodedata
from typing import Any

import asyncpg
import httpx

from ac_serve import serve_env, serve_process
from ac_temporal_kit import TemporalHarness, definition
from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN, SeededQueue
from ac_ui import csrf_of, login, post_form
from activity_core.logs import JsonFormatter
from activity_core.temporal.dev_server import DevServer
from ops_evidence import sanitize_error

# what a page or a log line must never carry (U+202E reverses what follows it)
NASTY = "\u202e\u2066\u200b\ufeff\u00ad\u2028\x1b[31m\x07\x85\x9b"
CANCEL_REASON = f"a{NASTY}exe.txt"
UI_CANCEL_REASON = f"ui {NASTY}reason"
PAUSE_REASON = f"vendor{NASTY}outage"
WORKER_ERROR = f"tool crashed {NASTY}badly"
RUN_TITLE = f"brief{NASTY}fdp.exe"
AUTOMATION_TITLE = f"digest{NASTY}title"
FILTER_VALUE = f"filter{NASTY}value"
SIGN_IN_NAME = f"mallory{NASTY}"

# Line breaks, tabs and carriage returns are the templates' own whitespace (and a
# traceback's lines, once a log line is decoded); every other such character is unsafe.
_LAYOUT = "\n\t\r"


def unsafe(text: str) -> list[str]:
    """The unsafe characters of `text`, by code point (independent of the service's own
    table: Unicode's categories as this Python knows them)."""
    return sorted(
        {
            f"U+{ord(ch):04X}"
            for ch in text
            if ch not in _LAYOUT and unicodedata.category(ch) in {"Cc", "Cf", "Cs", "Zl", "Zp"}
        }
    )


def strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings_in(k), *strings_in(v))]
    if isinstance(value, list):
        return [s for item in value for s in strings_in(item)]
    return []


def test_the_log_formatter_escapes_what_is_not_ascii() -> None:
    record = logging.LogRecord("activity_core", logging.INFO, "", 0, "%s", (CANCEL_REASON,), None)
    record.reason = f"{NASTY}\ud800"
    line = JsonFormatter().format(record)
    assert line.isascii() and "\n" not in line
    assert "\\u202e" in line and "\\u0085" in line and "\\ud800" in line
    assert json.loads(line)["message"] == CANCEL_REASON


async def test_supplied_text_reaches_no_page_and_no_log_line_unsafe(
    temporal: TemporalHarness,
    temporal_server: DevServer,
    db_dsn: str,
    seeded: SeededQueue,
    db: asyncpg.Connection,
) -> None:
    spec = definition(temporal.slug, cron="30 7 * * *", timezone="UTC")
    await temporal.sync(spec.model_copy(update={"title": AUTOMATION_TITLE}))
    stored = await db.fetchval("SELECT title FROM activity_definitions WHERE slug = $1", spec.id)
    assert stored == AUTOMATION_TITLE
    to_fail, to_cancel, to_cancel_in_ui = await seeded.runs(3, title=RUN_TITLE)

    env = serve_env(
        db_dsn,
        ACTIVITY_CORE_OPERATOR_TOKEN=OPERATOR_TOKEN,
        ACTIVITY_CORE_WORKER_TOKEN=WORKER_TOKEN,
        ACTIVITY_CORE_WORKER_ID=WORKER_ID,
        ACTIVITY_CORE_ISSUE_SINK="none",
        TEMPORAL_ADDRESS=temporal_server.address,
        TEMPORAL_TASK_QUEUE=temporal.task_queue,
    )
    env["ACTIVITY_CORE_LOG_LEVEL"] = "INFO"  # every line an action writes
    operator = {"authorization": f"Bearer {OPERATOR_TOKEN}"}
    worker = {"authorization": f"Bearer {WORKER_TOKEN}"}
    pages: dict[str, str] = {}
    async with (
        serve_process(env) as (proc, url),
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as http,
    ):
        # a worker fails its run, with an error full of them
        claim = await http.post("/ops-runs/claim", json={"worker_id": WORKER_ID}, headers=worker)
        assert [r["id"] for r in claim.json()["runs"]] == [str(to_fail)], claim.text
        failed = await http.post(
            f"/ops-runs/{to_fail}/fail",
            json={"worker_id": WORKER_ID, "error": WORKER_ERROR},
            headers=worker,
        )
        assert failed.status_code == 200, failed.text
        requeued = await http.post(f"/ops-runs/{to_fail}/requeue", headers=operator)
        assert requeued.status_code == 201, requeued.text

        # an operator cancels through the JSON API and pauses the automation
        cancelled = await http.post(
            f"/ops-runs/{to_cancel}/cancel", json={"reason": CANCEL_REASON}, headers=operator
        )
        assert cancelled.status_code == 200, cancelled.text
        paused = await http.post(
            f"/ops/automations/{spec.id}/pause", json={"reason": PAUSE_REASON}, headers=operator
        )
        assert paused.status_code == 200, paused.text
        # JSON can escape a lone surrogate; such a body is refused, so none is ever stored
        surrogate = await http.post(
            f"/ops-runs/{to_cancel_in_ui}/cancel",
            content='{"reason": "a\\ud800b"}',
            headers={**operator, "content-type": "application/json"},
        )
        assert surrogate.status_code == 422, surrogate.text

        # an operator cancels through the UI's form; a sign-in name is echoed back
        origin = {"origin": url}
        refused = await login(http, "not-a-token-0123456789", SIGN_IN_NAME, headers=origin)
        assert refused.status_code == 401
        pages["failed sign-in"] = refused.text
        cookie = await signed_in_at(http, url)
        csrf = await csrf_of(http, cookie)
        form = await post_form(
            http,
            f"/ops/ui/runs/{to_cancel_in_ui}/cancel",
            {"csrf_token": csrf, "reason": UI_CANCEL_REASON},
            cookie,
            headers=origin,
        )
        assert form.status_code in (200, 303), form.text

        session = {"cookie": f"ops_session={cookie}"}
        for path in (
            "/ops/ui/",
            f"/ops/ui/automations/{spec.id}",
            "/ops/ui/runs",
            f"/ops/ui/runs/{to_fail}",
            f"/ops/ui/runs/{to_cancel}",
            f"/ops/ui/runs/{to_cancel_in_ui}",
            f"/ops/ui/runs/{requeued.json()['id']}",
            "/ops/ui/dead-letter",
            "/ops/ui/workers",
        ):
            page = await http.get(path, headers=session)
            assert page.status_code == 200, (path, page.text)
            pages[path] = page.text
        echoed = await http.get(
            "/ops/ui/runs", params={"automation": FILTER_VALUE}, headers=session
        )
        assert echoed.status_code in (200, 422), echoed.text
        pages["runs filtered"] = echoed.text

        proc.send_signal(signal.SIGTERM)
        _, log_text = await asyncio.to_thread(proc.communicate, timeout=30)

    for name, html in pages.items():
        assert unsafe(html) == [], name
    # the text is there, made harmless: what was stored sanitized shows as stored (spaces
    # where the characters were), what was stored raw shows U+FFFD in their place
    assert sanitize_error(CANCEL_REASON) in pages[f"/ops/ui/runs/{to_cancel}"]
    assert sanitize_error(UI_CANCEL_REASON) in pages[f"/ops/ui/runs/{to_cancel_in_ui}"]
    assert sanitize_error(WORKER_ERROR) in pages[f"/ops/ui/runs/{to_fail}"]
    automation = pages[f"/ops/ui/automations/{spec.id}"]
    assert sanitize_error(PAUSE_REASON) in automation
    shown = "\ufffd" * 6 + "\ufffd[31m" + "\ufffd" * 3
    assert f"digest{shown}title" in automation
    assert f"brief{shown}fdp.exe" in pages["/ops/ui/runs"]
    assert f"filter{shown}value" in pages["runs filtered"]
    assert f"mallory{shown}" in pages["failed sign-in"]

    lines = log_text.splitlines()
    logged = [json.loads(line) for line in lines]
    assert any(entry["message"] == "run cancelled by operator operator" for entry in logged)
    assert any("paused by operator" in entry["message"] for entry in logged)
    for line, entry in zip(lines, logged, strict=True):
        assert line.isascii(), line
        assert all(unsafe(text) == [] for text in strings_in(entry)), line


async def signed_in_at(http: httpx.AsyncClient, url: str) -> str:
    """Sign in from the served origin (not the in-process clients' one)."""
    response = await login(http, OPERATOR_TOKEN, "operator", headers={"origin": url})
    assert response.status_code == 303, response.text
    cookie = response.headers["set-cookie"].split(";")[0].partition("=")[2]
    assert cookie
    return cookie
