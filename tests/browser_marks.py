"""What every browser test module shares: its pytest marks (``pytestmark = BROWSER``), page constants, the wait
budgets (``LOAD``, ``UPDATE``, ``TRAIN``: set in bench/harness/__init__.py, applied by conftest.py) and ``until``, the one way
a test polls something an ``expect`` cannot express."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.harness import CHROMIUM, LOAD, SETTLED, TRAIN, UPDATE, apply_budgets  # noqa: F401 (for the tests)

BROWSER = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM} "
                                                           "(bash scripts/install-test-tools.sh installs it)"),
]
MAIN = '[data-testid="stMain"]'
SIDEBAR = '[data-testid="stSidebar"]'
# The browser tests' app servers: a training whose open tab polls late is not taken for one whose tab was closed. The
# page polls every second, but on a busy machine a poll can come more than the app's default 10 s late (seen with
# the suite on one shared core: a run "abandoned" at step 49 while its tab was open), so a server waits UPDATE for a
# heartbeat. test_browser_runs.py checks that a closed tab's run still stops.
SERVER_ENV = {"BERTCORE_ABANDON_SECONDS": f"{UPDATE / 1000:g}"}


def until(cond, timeout: float = UPDATE, page=None, every: float = 250):
    """Call ``cond()`` until it returns something truthy or ``timeout`` ms have passed; its last value. For what an
    ``expect`` cannot wait for (a count inside a plotly chart, a file the server writes): the test asserts on the
    value, so a timeout fails with the test's own message. With ``page``, Playwright keeps serving the page's events
    (routes, downloads) between calls."""
    deadline = time.monotonic() + timeout / 1000
    while True:
        value = cond()
        if value or time.monotonic() >= deadline:
            return value
        if page is not None:
            page.wait_for_timeout(every)
        else:
            time.sleep(every / 1000)


def wait_idle(page, timeout: float = UPDATE) -> None:
    """Best effort: wait until the page shows all of its last script run (``bench.harness.SETTLED``). A page whose
    fragment reruns every tick may not settle, so running out of time here is no failure."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(SETTLED, timeout=timeout)
    except PlaywrightTimeout:
        pass
