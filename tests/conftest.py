"""Shared fixtures: the browser tests' app server, chromium launch settings and wait budgets (tests/test_browser.py),
the clean-up of background training runs that any test started (append them to TRAINING_RUNS), and a
per-test BERTCORE_RUNS_DIR in tmp so no test writes runs outside tmp; the long tests (marks ``load`` and ``long``)
are handed out first, so that under ``-n 2`` the short ones fill the other worker instead of one long test ending
the run alone.
"""
from __future__ import annotations

import base64

import numpy as np
import pytest

from playwright.sync_api import expect

from bench.harness import CHROMIUM, CHROMIUM_ARGS, SLOWDOWN, UPDATE, AppServer, apply_budgets
from browser_marks import SERVER_ENV

# How long a browser test waits (bench/harness/__init__.py sets the budgets, for every machine; docs/TESTING.md): an
# ``expect`` with no timeout of its own waits UPDATE, never Playwright's 5 s; every page's actions and navigations
# wait LOAD (the ``context`` fixture below). tests/test_browser_budgets.py checks that no test sets its own.
expect.set_options(timeout=UPDATE)


def pytest_collection_modifyitems(items):
    """The tests of a minute and more first, in their collected order (pytest-xdist hands tests out in this order),
    then the rest as collected."""
    items.sort(key=lambda item: item.get_closest_marker("load") is None and item.get_closest_marker("long") is None)


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """A fresh app server for the whole browser session; the first page a test opens is a deep link."""
    server = AppServer(tmp_path_factory.mktemp("streamlit") / "server.log", env=SERVER_ENV).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """pytest-playwright: use Debian's chromium (Playwright cannot download its own browser here)."""
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1280, "height": 900}}


@pytest.fixture
def context(context):
    """pytest-playwright's context (and so ``page`` and every page opened in it) with the budgets' defaults."""
    apply_budgets(context)
    return context


# How long a test waits for a training's end, in s: a training's end is an event (``run.stop(wait=TRAINING_END)``,
# ``run.join(TRAINING_END)``), never a moment after a fixed sleep; a stopped one ends after its step under way and a
# checkpoint, which on a slow machine beside other work took longer than the 5 s tests once gave it. Only a hung
# training waits this out. BERTCORE_TEST_SLOWDOWN scales it, as it scales the browser budgets (docs/TESTING.md).
TRAINING_END = 120 * SLOWDOWN

# TrainingRun objects a test started (``from conftest import TRAINING_RUNS``); stopped after every test so
# no training thread outlives the test that made it.
TRAINING_RUNS: list = []


@pytest.fixture(autouse=True)
def _runs_dir_in_tmp(tmp_path, monkeypatch):
    """Every test's runs (BERTCORE_RUNS_DIR) land in its own tmp dir, never in the user's data folder.
    Subprocesses and app servers started by a test inherit it through the environment."""
    d = tmp_path / "bertcore-runs"
    monkeypatch.setenv("BERTCORE_RUNS_DIR", str(d))
    return d


@pytest.fixture(autouse=True)
def _stop_training_runs():
    yield
    for r in TRAINING_RUNS:
        r.stop()
    for r in TRAINING_RUNS:
        r.join(TRAINING_END)
    TRAINING_RUNS.clear()


def plotly_array(v, dtype=None):
    """A plotly JSON array (a plain list, or plotly 6+'s typed array {dtype, bdata, shape}) as numpy."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        if v.get("shape"):
            a = a.reshape([int(n) for n in str(v["shape"]).split(",")])
        return a
    return np.asarray(v, dtype=dtype)
