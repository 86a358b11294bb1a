"""The ops UI in a real browser: the app under uvicorn on a free localhost port (in a
thread with its own event loop), and Debian's chromium driven by Playwright.

Playwright's own browser download is not available here; .ci/run installs Debian's
chromium, which the suite requires (a missing browser fails the tests, it does not skip
them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from ac_testkit import settings_env
from ac_threaded_uvicorn import uvicorn_in_a_thread
from activity_core.http.app import create_app
from activity_core.settings import load_settings

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[3] / "tests" / "artifacts"


@contextmanager
def served(db_dsn: str, **env: Any) -> Iterator[str]:
    """The app (settings_env plus `env`) at http://127.0.0.1:<port>."""
    app = create_app(load_settings(**settings_env(**env)), dsn=db_dsn)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", ws="none", http="h11")
    with uvicorn_in_a_thread(config) as port:
        yield f"http://127.0.0.1:{port}"


@asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    """A headless Debian chromium (playwright.async_api.Browser)."""
    from playwright.async_api import async_playwright

    assert CHROMIUM.exists(), "Debian's chromium is not installed (.ci/run installs it)"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


async def sign_in(page: Any, base: str, name: str, token: str, path: str = "/ops/ui/") -> None:
    """Open `path`, be sent to the sign-in form, sign in, and land back on `path`."""
    await page.goto(base + path)
    assert "/ops/ui/login" in page.url
    await page.fill("#name", name)
    await page.fill("#token", token)
    await page.click("form[action='/ops/ui/login'] button[type=submit]")
    await page.wait_for_url(base + path)
