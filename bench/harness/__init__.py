"""The browser harness shared by the browser tests, the bench and scripts/screenshots.py: a headless
`streamlit run app.py` on a free 127.0.0.1 port, the launch settings for Debian's chromium
(Playwright cannot download its own browser on this kind of machine), and how long a browser test waits for the
app (``LOAD``, ``UPDATE``, ``TRAIN``; tests/conftest.py applies them to every page and every ``expect``).
Imports no streamlit."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("BERTCORE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _slowdown() -> float:
    raw = os.environ.get("BERTCORE_TEST_SLOWDOWN", "1")
    try:
        f = float(raw)
    except ValueError:
        f = float("nan")
    if not f >= 1:  # also rejects nan
        raise ValueError(f"BERTCORE_TEST_SLOWDOWN must be a number >= 1 (how many times slower this machine is), "
                         f"got {raw!r}")
    return f


# How long a browser test waits for the app, in ms (Playwright's unit). Only a failing test ever waits this long; a
# passing one goes on as soon as the page shows what it waits for. Sized for a machine 2.5x slower than a quiet
# 2-core one with the suite sharing it (docs/TESTING.md, "A slowed run"); BERTCORE_TEST_SLOWDOWN=N multiplies all
# three for an even slower machine. tests/conftest.py applies them: UPDATE to every ``expect`` and LOAD to every
# page action and navigation, unless a call names its own budget.
SLOWDOWN = _slowdown()
LOAD = round(180_000 * SLOWDOWN)  # a page's first draw in a new session (on a fresh server it imports torch)
UPDATE = round(60_000 * SLOWDOWN)  # a rerun after a click, a key or a slider; the next tick of a live chart
TRAIN = round(480_000 * SLOWDOWN)  # a training started in the browser reaching an evaluation or its end (tens of steps)


# For ``page.wait_for_function``: the page shows all of its last script run. Streamlit's last run has ended (script
# state "notRunning", which also rules out the "initial" state before the first run), no "Running…" status shows, no
# element is still a skeleton (Streamlit draws one while an element's code loads: a chart, a slider, KaTeX), and
# every plotly chart is drawn. A page with a fragment timer flips the state every tick; the wait still sees a moment
# between two ticks. After a click, wait first for something the click changes: until its rerun starts, the page
# before it is settled too.
SETTLED = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-testid="stStatusWidget"], [data-testid="stSkeleton"]')) return false;
  return Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"]'))
    .every(c => { const el = c.querySelector('.js-plotly-plot'); return !!(el && el._fullLayout); });
}"""


def apply_budgets(target) -> None:
    """Playwright's defaults for a BrowserContext or a Page: ``LOAD`` for every action and navigation (a click waits
    for its element, which may belong to a page still drawing for the first time)."""
    target.set_default_timeout(LOAD)
    target.set_default_navigation_timeout(LOAD)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    """`python -m streamlit run app.py` in the repo root, headless, bound to 127.0.0.1 (``script="serve.py"``: the
    shared server's entry, app.py behind the client gate).

    ``start()`` returns once /_stcore/health answers (that runs no page script, so the first *page*
    request is still the caller's) and records the seconds it took in ``healthy_after``."""

    def __init__(self, log_path: Path | None = None, port: int | None = None, runs_dir: Path | None = None,
                 env: dict | None = None, address: str = "127.0.0.1", script: str = "app.py"):
        self.port = port or free_port()
        self.script = script
        self.address = address  # "0.0.0.0": every interface, as a shared server (still reached on 127.0.0.1)
        # Its own BERTCORE_RUNS_DIR (a fresh temp dir unless given): runs never land in the user's data folder.
        self.runs_dir = Path(runs_dir) if runs_dir else Path(tempfile.mkdtemp(prefix="bertx-runs-"))
        self.extra_env = dict(env or {})
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen | None = None
        self.healthy_after: float | None = None
        self._log = None

    def start(self, timeout: float = LOAD / 1000, poll: float = 0.3) -> "AppServer":
        env = dict(os.environ, PYTHONUNBUFFERED="1", BERTCORE_RUNS_DIR=str(self.runs_dir), **self.extra_env)
        cmd = [sys.executable, "-m", "streamlit", "run", self.script, "--server.headless=true",
               f"--server.address={self.address}", f"--server.port={self.port}", "--browser.gatherUsageStats=false",
               "--server.fileWatcherType=none"]
        self._log = open(self.log_path, "w") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - closed in stop()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        self.healthy_after = time.perf_counter() - t0
                        return self
            except OSError:
                pass
            time.sleep(poll)
        self.stop()
        raise RuntimeError(f"streamlit did not answer /_stcore/health within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        if self.log_path is None:
            return ""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()
        self._log = None

    def kill(self) -> None:
        """SIGKILL the server (a crash: no clean-up runs), e.g. to test what survives a restart."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=15)
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()
        self._log = None

    def __enter__(self) -> "AppServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
