"""Shared fixtures for the browser tests (tests/test_browser.py): a real `streamlit run app.py`
server on a free 127.0.0.1 port and pytest-playwright launch settings for Debian's chromium.

Nothing here runs unless a test asks for these fixtures.
"""
from __future__ import annotations

import pytest

from explorer.harness import CHROMIUM, CHROMIUM_ARGS, AppServer


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
