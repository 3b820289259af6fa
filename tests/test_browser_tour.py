""""Start here" in a real browser at 1400×900, from a fresh server: a learner with a finished run follows the
Overview's links to Head roles, Inside the model (Next to the end of layer 0), Predict and the logit lens; each page
ticks its step in the workspace, the ticks are there after F5 and in a new tab in Chinese. (The Features step needs
an SAE: its tick is checked in tests/test_tour.py; the SAE's training in the browser in
tests/test_browser_features.py.)"""
from __future__ import annotations

import re

import pytest
from browser_marks import BROWSER, LOAD, MAIN, SERVER_ENV, until
from playwright.sync_api import Page, expect

from bertcore.config import BertConfig, TrainConfig
from bertcore.training import runs
from bertcore.launch import service
from explorer.figures import forward_stages as FS
from explorer.parts import tour

pytestmark = BROWSER
WS = "tourBrowserWorkspace0001"
LINK = f'{MAIN} [data-testid="stPageLink-NavLink"][href*="ws="]'  # the steps' links (the others carry no ?ws=)
NEXT = ".st-key-fw_next button"


@pytest.fixture
def fresh_server(tmp_path):
    """A server of its own: the visitor's first page is the first request it ever answers."""
    from bench.harness import AppServer

    s = AppServer(tmp_path / "server.log", runs_dir=tmp_path / "runs", env=SERVER_ENV).start()
    yield s
    s.stop()


def _recorded() -> list:
    return runs.read_workspace(WS).get(tour.TOUR_KEY) or []


def _ticked(page: Page) -> int:
    """The ticked steps: Streamlit draws :material/check_box: as a ligature, the icon's name in its icon font."""
    steps = page.locator(f"{MAIN} [data-testid='stMarkdownContainer'] p").filter(has_text=re.compile(r"^\s*check_box"))
    assert steps.count() == len(tour.STEPS)
    return steps.filter(has_text=re.compile(r"^\s*check_box(?!_outline)")).count()


def _overview(page: Page, url: str, caption: str, title: str) -> None:
    page.goto(url)
    expect(page.locator(f"{MAIN} h3").filter(has_text=title).first).to_be_visible(timeout=LOAD)
    expect(page.locator(MAIN)).to_contain_text(caption)
    expect(page.locator(LINK)).to_have_count(len(tour.STEPS))


def _follow(page: Page, k: int, step: str) -> None:
    """Click step k's Open link (same tab, same session) and wait until its page recorded the step."""
    link = page.locator(LINK).nth(k)
    assert f"ws={WS}" in (link.get_attribute("href") or "")
    link.click()
    if step == "forward":  # the link opens layer 0's first stage; Next to the end of the layer ticks it
        expect(page.locator(NEXT)).to_be_visible(timeout=LOAD)
        for i in range(2, FS.IDS.index("ffn_add_norm") + 2):
            page.locator(NEXT).click()
            expect(page.locator(f"{MAIN} h4").filter(has_text=f"Stage {i} of {len(FS.IDS)}").first).to_be_visible()
    assert until(lambda: step in _recorded(), LOAD, page=page), f"{step}: not recorded ({_recorded()})"
    assert page.locator('[data-testid="stException"]').count() == 0
    page.locator('[data-testid="stSidebarNav"]').get_by_text("Overview").click()
    expect(page.locator(f"{MAIN} h3").filter(has_text="Start here").first).to_be_visible(timeout=LOAD)


def test_a_learner_follows_start_here_and_the_ticks_stay(page: Page, fresh_server, monkeypatch, tmp_path):
    monkeypatch.setenv("BERTCORE_RUNS_DIR", str(fresh_server.runs_dir))  # the server's own runs folder
    tc = TrainConfig(steps=60, batch_size=32, eval_every=30, seed=0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    run = service.train(service.RunSpec(cfg, tc, name="tour"), parent=runs.workspace_dir(WS)).run_dir
    runs.write_workspace(WS, active=f"run:{run.name}")
    page.set_viewport_size({"width": 1400, "height": 900})

    _overview(page, f"{fresh_server.url}/?ws={WS}", "1 of 6 done", "Start here")  # the finished run ticks step 1
    assert _ticked(page) == 1
    for k, step in enumerate(tour.STEP_IDS):
        if step in ("train", "feature"):
            continue
        _follow(page, k, step)
    assert sorted(_recorded()) == ["forward", "heads", "lens", "predict"]
    expect(page.locator(MAIN)).to_contain_text("5 of 6 done")

    page.reload()  # F5: a new session; the ticks come from the workspace on disk
    expect(page.locator(MAIN)).to_contain_text("5 of 6 done", timeout=LOAD)
    assert _ticked(page) == 5
    tab = page.context.new_page()  # a new tab in Chinese
    tab.set_viewport_size({"width": 1400, "height": 900})
    _overview(tab, f"{fresh_server.url}/?ws={WS}&lang=zh", "已完成 5/6", "从这里开始")
    assert _ticked(tab) == 5
    assert "lang=zh" in (tab.locator(LINK).first.get_attribute("href") or "")
    tab.screenshot(path=str(tmp_path / "start-here-zh.png"))  # to look at: pytest --basetemp
