"""A headless app server of our own on a free 127.0.0.1 port, for the load test's own test and checks.

``LocalServer`` runs ``python -m streamlit run app.py --server.headless=true --server.address=127.0.0.1
--server.port=P`` in the repository root and returns once ``/_stcore/health`` answers; ``stop()`` ends it
(and only it). Imports no streamlit.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from loadgen import HOST

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class LocalServer:
    """``with LocalServer(log) as srv:`` ... ``srv.port``, ``srv.pid``; bounded start-up and shut-down."""

    def __init__(self, log_path: Path | None = None, port: int | None = None, env: dict | None = None):
        self.port = port or free_port()
        self.log_path = Path(log_path) if log_path else None
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 120.0) -> LocalServer:
        cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless=true",
               f"--server.address={HOST}", f"--server.port={self.port}", "--browser.gatherUsageStats=false",
               "--server.fileWatcherType=none"]
        self._log = open(self.log_path, "w") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                                     stdout=self._log, stderr=subprocess.STDOUT)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{self.port}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"streamlit did not answer /_stcore/health within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

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

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
