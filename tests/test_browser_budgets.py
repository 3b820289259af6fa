"""No browser test depends on this machine's speed (docs/TESTING.md): how long a browser test waits is set in one
place (bench/harness/__init__.py's LOAD, UPDATE and TRAIN, applied in conftest.py), never Playwright's 5 s default ``expect``
timeout, a number written in a test or a fixed sleep. Reads the sources; needs no browser."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from bench.harness import LOAD, TRAIN, UPDATE

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SETS_BUDGETS = ("set_default_timeout", "set_default_navigation_timeout", "set_options")
SLEEPS = ("wait_for_timeout", "sleep")


def browser_sources() -> list[Path]:
    """The browser tests, their shared helpers and the bench modules they drive a page with (bench.harness, where the
    budgets are set and the app server starts and stops, and bench.harness.nginx, the proxy in front of servers, aside)."""
    tests = sorted(TESTS.glob("test_browser*.py"))
    bench = {m for p in tests for m in re.findall(r"^from (bench(?:\.\w+)+) import", p.read_text(encoding="utf-8"), re.M)}
    bench -= {"bench.harness", "bench.harness.nginx"}
    return tests + [TESTS / "browser_marks.py"] + sorted(REPO / (m.replace(".", "/") + ".py") for m in bench)


def _is_number(node: ast.AST) -> bool:
    """A number or arithmetic on numbers only (``3 * 60_000``): a timeout that names no budget."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _is_number(node.left) and _is_number(node.right)
    if isinstance(node, ast.UnaryOp):
        return _is_number(node.operand)
    return False


def wait_problems(source: str, name: str = "<source>", may_sleep: bool = False) -> list[str]:
    """Each wait in ``source`` that does not take its time from the budgets: a timeout written as a number, a fixed
    sleep (``may_sleep``: the one polling helper, ``browser_marks.until``), a page or ``expect`` default set outside
    conftest.py, or a module's own ``LOAD``/``UPDATE``/``TRAIN``."""
    out = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            for kw in node.keywords:
                if kw.arg == "timeout" and _is_number(kw.value):
                    out.append(f"{where}: {called}(timeout={ast.unparse(kw.value)}): name a budget (LOAD, UPDATE, "
                               f"TRAIN) instead of a number")
            if called in SETS_BUDGETS:
                out.append(f"{where}: {called}(...): the budgets are applied in one place (conftest.py, "
                           f"bench.harness.apply_budgets)")
            if called in SLEEPS and not may_sleep:
                out.append(f"{where}: {called}(...): a fixed sleep races the app; wait for what it should show "
                           f"(expect, wait_for_function, browser_marks.until)")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in ("LOAD", "UPDATE", "TRAIN"):
                    out.append(f"{where}: {t.id} = ...: a budget of its own; import it from browser_marks")
    return out


def test_expect_waits_the_update_budget_not_playwrights_default():
    # conftest.py has run: an expect without a timeout of its own waits UPDATE (Playwright's default is 5 s)
    assert expect._timeout == UPDATE, f"expect's default timeout is {expect._timeout} ms, not UPDATE ({UPDATE} ms)"
    assert 5_000 < UPDATE <= LOAD <= TRAIN


def test_the_checker_finds_each_kind_of_problem():
    bad = '''
LOAD = 120_000
def test_x(page):
    page.set_default_timeout(LOAD)
    expect(page.locator("h1")).to_be_visible(timeout=30_000)
    page.wait_for_selector("h1", timeout=3 * 60_000)
    page.wait_for_timeout(1500)
    time.sleep(2)
'''
    found = wait_problems(bad)
    assert len(found) == 6, found
    for what in ("LOAD = ...", "set_default_timeout", "timeout=30000", "timeout=3 * 60000", "wait_for_timeout",
                 "sleep"):
        assert any(what in f for f in found), (what, found)
    good = '''
def test_x(page):
    expect(page.locator("h1")).to_be_visible(timeout=LOAD)
    expect(page.locator("h2")).to_be_visible()
    until(lambda: page.locator("h3").count(), timeout=TRAIN, page=page)
    subprocess.run(["true"], timeout=LOAD / 1000)
'''
    assert wait_problems(good) == []


def test_browser_sources_cover_the_tests_and_the_bench_they_drive():
    names = {p.name for p in browser_sources()}
    assert {"test_browser.py", "test_browser_errors.py", "browser_marks.py", "zh_walk.py", "zh_upload.py"} <= names
    assert all(p.is_file() for p in browser_sources())


@pytest.mark.parametrize("path", browser_sources(), ids=lambda p: p.name)
def test_every_browser_wait_takes_its_time_from_the_budgets(path):
    problems = wait_problems(path.read_text(encoding="utf-8"), path.name, may_sleep=path.name == "browser_marks.py")
    assert not problems, "\n".join(problems)
