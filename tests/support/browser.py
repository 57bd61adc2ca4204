"""Browser-test helpers: a live app under waitress and headless Debian Chromium.

    with LiveServer(create_app(wh, now=...)) as server, chromium() as driver:
        driver.get(server.url)

Missing Chromium/chromedriver skips the test, unless GPULENS_REQUIRE_INTEGRATION=1
(CI), where it fails. Screenshots land in ``test-output/screenshots`` (a CI artifact).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("GPULENS_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("GPULENS_CHROMEDRIVER", "/usr/bin/chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"
CHROME_ARGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--window-size=1440,1200", "--force-device-scale-factor=1",
)


def integration_required() -> bool:
    """True when missing browsers must fail the run instead of skipping (CI)."""
    return os.environ.get("GPULENS_REQUIRE_INTEGRATION") == "1"


def require_browser() -> None:
    """Skip (or fail, under GPULENS_REQUIRE_INTEGRATION=1) without Chromium + driver."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    if missing:
        reason = (
            f"browser test needs {', '.join(missing)}; on Debian: "
            "apt-get install chromium chromium-driver"
        )
        if integration_required():
            pytest.fail(reason + " (GPULENS_REQUIRE_INTEGRATION=1)")
        pytest.skip(reason)


class LiveServer:
    """A WSGI app served by waitress on 127.0.0.1 and a free port, in a thread."""

    def __init__(self, app, *, threads: int = 4):
        import waitress

        wsgi = getattr(app, "server", app)  # a Dash app or a plain WSGI app
        self.server = waitress.create_server(wsgi, host="127.0.0.1", port=0, threads=threads)
        self.url = f"http://127.0.0.1:{self.server.effective_port}/"
        self.thread = threading.Thread(target=self.server.run, name="live-server", daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the listener and every open connection; the loop then ends."""
        from waitress import wasyncore

        self.server.close()
        wasyncore.close_all(getattr(self.server, "_map", None))
        self.thread.join(timeout=10)


@contextmanager
def chromium(*, width: int = 1440, height: int = 1200):
    """A headless Chromium WebDriver with a fresh profile and browser console logging."""
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="gpulens-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in CHROME_ARGS:
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.set_window_size(width, height)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver) -> list[dict]:
    """Browser console entries at SEVERE level since the last call."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def wait_until(predicate, *, timeout_s: float = 15, what: str = "condition"):
    """Poll ``predicate()`` until it returns a truthy value; return it or fail."""
    deadline = time.monotonic() + timeout_s
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the page may still be rendering
            last_exc = exc
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what} (last error: {last_exc})")


def shown(driver, css: str, *, what: str | None = None):
    """The element matching ``css`` once it is in the page and displayed.

    Dash loads some components (dropdowns, date pickers, tables) from their own script
    chunks, so a page whose graph has drawn may not have drawn its dropdowns yet.
    """
    return wait_until(lambda: [e for e in driver.find_elements("css selector", css)
                               if e.is_displayed()], what=what or css)[0]


def text_of(driver, element_id: str) -> str:
    """The visible text of the element with ``element_id``."""
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id).text


def graph_figure(driver, graph_id: str) -> dict | None:
    """``{"data": ..., "layout": ...}`` as plotly drew it in the dcc.Graph ``graph_id``."""
    return driver.execute_script(
        "const el = document.querySelector(`#${arguments[0]} .js-plotly-plot`);"
        "return el && el.layout ? {data: el.data, layout: el.layout} : null;",
        graph_id,
    )


def save_screenshot(driver, name: str) -> Path:
    """Save a PNG of the page to ``test-output/screenshots/<name>.png``; return its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
