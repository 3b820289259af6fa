"""A shared server lets no one in where they don't belong, in chromium (explorer.session.folder_access, explorer.session.share_links).

A server on 0.0.0.0 with BERTCORE_RUNS_DIR and no BERTCORE_OPEN_ROOTS offers no folder box at all. With
BERTCORE_OPEN_ROOTS=<tmp>/srv/models: another workspace's run path, /etc, /root, /proc/self and a missing path
each get the same message and leave the active model unchanged; a model below the root opens, one outside does not.
A read-only link, opened in a fresh browser, shows its run on every page and offers no delete, rename or training;
once its owner revokes it, it opens nothing.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser_marks import BROWSER, LOAD, SERVER_ENV, SIDEBAR, apply_budgets, wait_idle
from playwright.sync_api import Page, expect

from explorer.session import folder_access, share_links
from tiny_runs import model_folder, workspace_run

pytestmark = [*BROWSER, pytest.mark.long]  # a minute and more: started first (conftest.py)

ROOT = Path(__file__).resolve().parents[1]
OWNER = "owner-workspace-0001xyz"
UNTRAINED = "Active model: fresh untrained (shared)"


def _url_paths() -> list[str]:
    """The url_path of every page app.py registers (read as text: app.py is a script)."""
    return re.findall(r'^\s+\("\w+\.py", "(\w+)"', (ROOT / "app.py").read_text(encoding="utf-8"), re.M)


def _active(page: Page) -> str:
    box = page.locator(f'{SIDEBAR} [data-testid="stMarkdownContainer"]').filter(has_text="Active model:").first
    return box.inner_text().strip()


def _open(page: Page, path: str) -> str:
    """Type ``path`` into the folder box, press Open; the sidebar's message."""
    box = page.locator(".st-key-sb_hf_path input")
    box.fill(path)
    box.press("Enter")
    expect(page.locator(f'{SIDEBAR} [data-testid="stAlertContainer"]')).to_have_count(0)  # the last answer went
    wait_idle(page)
    page.locator(".st-key-sb_hf_import button").click()
    alert = page.locator(f'{SIDEBAR} [data-testid="stAlertContainer"]').last
    expect(alert).to_be_visible(timeout=LOAD)
    text = alert.inner_text()
    wait_idle(page)
    return text


def _fresh(browser) -> Page:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    apply_budgets(ctx)
    return ctx.new_page()


@pytest.mark.timeout(1800)  # two server starts and every page twice, on a shared 2-core machine
def test_folders_and_read_only_links_on_a_server_that_listens_everywhere(browser, tmp_path, monkeypatch):
    from bench.harness import AppServer

    runs_dir = tmp_path / "runs"
    monkeypatch.setenv("BERTCORE_RUNS_DIR", str(runs_dir))
    monkeypatch.delenv(folder_access.ROOTS_ENV, raising=False)
    models = tmp_path / "srv" / "models"
    model_folder(models / "course-model")
    model_folder(tmp_path / "elsewhere" / "teacher-model")
    other_run = workspace_run(OWNER, "shared run")

    # 1. every interface, no roots: no folder box at all
    with AppServer(tmp_path / "open.log", runs_dir=runs_dir, env=SERVER_ENV, address="0.0.0.0") as server:
        page = _fresh(browser)
        page.goto(server.url)
        expect(page.locator(SIDEBAR)).to_contain_text(UNTRAINED, timeout=LOAD)
        expect(page.locator(SIDEBAR).get_by_text("Open a local folder")).to_have_count(0)
        expect(page.locator(".st-key-sb_hf_path")).to_have_count(0)
        page.screenshot(path=str(tmp_path / "no-folder-box.png"))
        page.context.close()

    # 2. the same with BERTCORE_OPEN_ROOTS=<tmp>/srv/models
    env = {**SERVER_ENV, folder_access.ROOTS_ENV: str(models)}
    with AppServer(tmp_path / "roots.log", runs_dir=runs_dir, env=env, address="0.0.0.0") as server:
        page = _fresh(browser)
        page.goto(server.url)
        expect(page.locator(SIDEBAR)).to_contain_text(UNTRAINED, timeout=LOAD)
        page.locator(SIDEBAR).get_by_text("Open a local folder").click()
        answers = {}
        for path in (str(other_run), "/etc", "/root", "/proc/self", str(models / "missing"),
                     str(tmp_path / "elsewhere" / "teacher-model"), f"{models}/../../elsewhere/teacher-model"):
            answers[path] = _open(page, path)
            assert _active(page) == UNTRAINED, path
        assert set(answers.values()) == {str(folder_access.REFUSED)}, answers
        page.screenshot(path=str(tmp_path / "refused.png"))
        assert _open(page, str(models / "course-model")).startswith("Opened")
        expect(page.locator(SIDEBAR)).to_contain_text("Active model: folder: course-model")
        assert _open(page, str(tmp_path / "elsewhere" / "teacher-model")) == str(folder_access.REFUSED)
        assert _active(page) == "Active model: folder: course-model"
        page.context.close()

        # the owner shares one run ...
        owner = _fresh(browser)
        owner.goto(f"{server.url}/?ws={OWNER}")
        sidebar = owner.locator(SIDEBAR)
        expect(sidebar).to_contain_text("Runs in this workspace (1)", timeout=LOAD)
        sidebar.get_by_text(re.compile(r"Runs in this workspace \(1\)")).click()
        wait_idle(owner)
        sidebar.get_by_role("button", name="Share a read-only link").click()
        code = sidebar.locator('[data-testid="stCode"] code')
        expect(code).to_contain_text("?share=")
        link = code.inner_text().strip()
        sid = link.rsplit("=", 1)[1]
        assert link.startswith(server.url) and OWNER not in link and share_links.lookup(sid) == other_run

        # ... a fresh browser opens it on every page, with no delete, rename, resume, folder box or training
        viewer = _fresh(browser)
        for url_path in _url_paths():
            viewer.goto(f"{server.url}/{url_path}?share={sid}")
            expect(viewer.locator(SIDEBAR)).to_contain_text("Active model: shared, read-only: shared run",
                                                            timeout=LOAD)
            wait_idle(viewer)
            for key in ("sb_run_delete", "sb_run_rename", "sb_run_resume", "sb_hf_path"):
                expect(viewer.locator(f".st-key-{key}")).to_have_count(0)
            assert OWNER not in viewer.content(), url_path
            if url_path == "train":
                expect(viewer.locator(".st-key-train_start button")).to_be_disabled()
                viewer.screenshot(path=str(tmp_path / "shared-train.png"))
        viewer.context.close()

        # ... revokes it, and the link opens nothing
        sidebar.get_by_role("button", name="Revoke the link").click()
        expect(sidebar).to_contain_text("it opens nothing now")
        late = _fresh(browser)
        late.goto(f"{server.url}/attention?share={sid}")
        expect(late.locator(SIDEBAR)).to_contain_text(str(share_links.DEAD), timeout=LOAD)
        expect(late.locator(SIDEBAR)).to_contain_text(UNTRAINED)
        late.screenshot(path=str(tmp_path / "revoked.png"))
        late.context.close()
        owner.context.close()
    assert share_links.lookup(sid) is None
