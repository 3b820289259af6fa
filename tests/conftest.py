"""Shared fixtures for the browser tests (tests/test_browser.py): a real `streamlit run app.py`
server on a free 127.0.0.1 port and pytest-playwright launch settings for Debian's chromium.

Nothing here runs unless a test asks for these fixtures.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    """`python -m streamlit run app.py` in the repo root, headless, bound to 127.0.0.1."""

    def __init__(self, log_path: Path, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0) -> "AppServer":
        env = dict(os.environ)  # BERTCORE_ABANDON_SECONDS etc. keep their defaults unless the caller set them
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless=true",
               "--server.address=127.0.0.1", f"--server.port={self.port}", "--browser.gatherUsageStats=false",
               "--server.fileWatcherType=none"]
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:  # /_stcore/health runs no page script: the first *page* request is still the test's
                with urllib.request.urlopen(self.url + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"streamlit did not answer /_stcore/health within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
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
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """A fresh app server for the whole browser session; the first page a test opens is a deep link."""
    server = AppServer(tmp_path_factory.mktemp("streamlit") / "server.log").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """pytest-playwright: use Debian's chromium (Playwright cannot download its own browser here)."""
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1280, "height": 900}}
