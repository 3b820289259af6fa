"""The Lab page in chromium at 1400x900 (issue 55): start a tiny custom study, reload mid-study (F5 is a new session:
the scored run and the partial table come back from ?study= and the server), let it finish, open one variant's run
and look at it on the Attention page; the same study in 简体中文 draws without an exception (its strings stay
English until the catalogue pass); the owner shares it from the sidebar and the link opens the Lab read-only in
another browser. Screenshots of each step land in the test's tmp folder."""
from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from browser_marks import BROWSER, LOAD, MAIN, SERVER_ENV, SIDEBAR, TRAIN, until, wait_idle
from playwright.sync_api import Page, expect
from test_browser import assert_offline, assert_page_ok, offline_page, plot  # noqa: F401 (offline_page: a fixture)

pytestmark = [*BROWSER, pytest.mark.long]  # a minute and more: started first (conftest.py)
PROGRESS = f'{MAIN} [data-testid="stProgress"]'


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    """A server of its own with one training slot: the study's two runs one after the other, so a reload can land
    between the first score and the end."""
    from bench.harness import AppServer

    d = tmp_path_factory.mktemp("lab-server")
    s = AppServer(d / "server.log", runs_dir=d / "runs", env={**SERVER_ENV, "BERTCORE_MAX_TRAININGS": "1"}).start()
    yield s
    s.stop()


def _no_exception(page: Page) -> None:
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()[:2000]
    unexpected = page.locator(f'{MAIN} [data-testid="stAlertContentError"]').filter(has_text="unexpected")
    assert unexpected.count() == 0, unexpected.all_inner_texts()


def _pick(page: Page, key: str, option) -> None:
    box = page.locator(f".st-key-{key}")
    box.scroll_into_view_if_needed()
    box.locator("input").click()
    page.get_by_role("option", name=option).first.click()
    wait_idle(page)


def _grid_text(page: Page, key: str) -> str:
    """The text of an st.dataframe (glide's grid draws on a canvas; its accessible table holds the cells)."""
    grid = page.locator(f".st-key-{key} table")
    expect(grid.first).to_be_attached(timeout=LOAD)
    return grid.first.inner_text()


def test_a_study_survives_a_reload_and_opens_a_run_on_attention(offline_page: Page, lab_server, tmp_path):  # noqa: F811
    page = offline_page
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{lab_server.url}/lab")
    assert_page_ok(page, "Lab", ".st-key-lab_start button")
    page.screenshot(path=str(tmp_path / "lab-form.png"), full_page=True)

    _pick(page, "lab_study_name", re.compile("custom: any switch"))
    values = page.locator(".st-key-lab_vary_values input")
    values.fill("0.15, 0.3")
    values.press("Enter")
    expect(page.locator(MAIN)).to_contain_text("mlm_probability=0.3", timeout=LOAD)
    seeds = page.locator(".st-key-lab_seeds input[type=\"range\"]")
    seeds.focus()
    seeds.press("Home")
    expect(seeds).to_have_attribute("aria-valuetext", "1")
    steps = page.locator(".st-key-lab_steps input")
    steps.fill("20")
    steps.press("Enter")
    expect(page.locator(MAIN)).to_contain_text("2 runs of 20 steps", timeout=LOAD)
    wait_idle(page)
    page.locator(".st-key-lab_start button").click()
    progress = page.locator(PROGRESS).first
    expect(progress).to_contain_text("of 2 runs scored", timeout=LOAD)
    expect(page).to_have_url(re.compile(r"[?&]study=[\w-]+"), timeout=LOAD)
    study = parse_qs(urlparse(page.url).query)["study"][0]
    expect(page.locator(".st-key-lab_stop button:visible")).to_be_visible()
    page.screenshot(path=str(tmp_path / "lab-running.png"), full_page=True)

    # F5 once the first run is scored and before the second is: a new session finds the study running
    expect(progress).to_contain_text("1 of 2 runs scored", timeout=TRAIN)
    page.reload()
    progress = page.locator(PROGRESS).first
    expect(progress).to_contain_text(re.compile(r"running: [12] of 2 runs scored"), timeout=LOAD)
    assert parse_qs(urlparse(page.url).query)["study"][0] == study
    table = _grid_text(page, "lab_table")
    assert "mlm_probability=0.15 (reference)" in table and "mlm_probability=0.3" in table
    if "running: 1 of 2" in progress.inner_text():  # the partial table: the second row has no number yet
        assert "n/a" in table and "1/1" in table and "0/1" in table, table
        page.screenshot(path=str(tmp_path / "lab-reloaded-mid-study.png"), full_page=True)
    _no_exception(page)

    expect(progress).to_contain_text("finished: 2 of 2 runs scored", timeout=TRAIN)
    table = _grid_text(page, "lab_table")
    assert "n/a" not in table.split("NSP acc")[-1].split("SOP")[0], table  # every run of MLM/NSP scored
    curves = page.locator(plot("lab_curves")).first
    expect(curves).to_be_visible(timeout=LOAD)
    names = until(lambda: curves.evaluate("el => el._fullData ? el._fullData.map(t => t.name) : null"), page=page)
    assert names and set(names) == {"mlm_probability=0.15", "mlm_probability=0.3"}, names
    assert page.locator(".st-key-lab_stop button:visible").count() == 0
    page.screenshot(path=str(tmp_path / "lab-finished.png"), full_page=True)

    # one variant's run becomes the active model; the Attention page draws it
    _pick(page, "lab_run", re.compile(r"mlm_probability=0\.3 · seed 0"))
    page.locator(".st-key-lab_open button:visible").click()  # (a button with help has a hidden twin)
    expect(page.locator(SIDEBAR)).to_contain_text("Active model: custom · mlm_probability=0.3 · seed 0",
                                                  timeout=LOAD)
    page.locator(MAIN).get_by_text("Look at it on the Attention page").click()
    assert_page_ok(page, "Attention", plot("attn_grid"), model_label="custom · mlm_probability=0.3 · seed 0")
    page.screenshot(path=str(tmp_path / "lab-run-on-attention.png"))
    _no_exception(page)

    # 简体中文: the same study draws (the Lab's strings stay English until the catalogue pass)
    ws = parse_qs(urlparse(page.url).query)["ws"][0]
    page.goto(f"{lab_server.url}/lab?ws={ws}&study={study}&lang=zh")
    expect(page.locator(f"{MAIN} h1").first).to_be_visible(timeout=LOAD)
    expect(page.locator(PROGRESS).first).to_contain_text("2", timeout=LOAD)
    expect(page.locator(plot("lab_curves")).first).to_be_visible(timeout=LOAD)
    wait_idle(page)
    _no_exception(page)
    page.screenshot(path=str(tmp_path / "lab-zh.png"), full_page=True)

    # the owner shares the study from the sidebar's run list: the link opens the Lab, read-only, in another browser
    page.goto(f"{lab_server.url}/attention?ws={ws}")
    runs_box = page.locator(f'{SIDEBAR} [data-testid="stExpander"]').filter(has_text="Runs in this workspace")
    runs_box.locator("summary").click()
    page.locator(".st-key-sb_run_share button:visible").click()
    code = page.locator(f'{SIDEBAR} [data-testid="stCode"]').first
    expect(code).to_contain_text("?share=", timeout=LOAD)
    link = code.inner_text().strip()
    assert link.startswith(f"{lab_server.url}/lab?share="), link
    other = page.context.browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        viewer = other.new_page()
        viewer.goto(link)
        expect(viewer.locator(f"{MAIN} h1").filter(has_text="Lab").first).to_be_visible(timeout=LOAD)
        expect(viewer.locator(".st-key-lab_table table").first).to_contain_text("mlm_probability=0.3", timeout=LOAD)
        expect(viewer.locator(SIDEBAR)).to_contain_text("shared, read-only: custom · mlm_probability=0.15 · seed 0")
        assert viewer.locator(".st-key-lab_start, .st-key-lab_restart, .st-key-lab_delete").count() == 0
        _no_exception(viewer)
        viewer.screenshot(path=str(tmp_path / "lab-shared.png"))
    finally:
        other.close()
    assert_offline(page)
