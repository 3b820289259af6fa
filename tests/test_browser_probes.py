"""The Probes page in chromium at 1400x900 with a trained run active: the layer x step heat map and the line
view at the step of the link draw, with no exception. Fixtures (app server, chromium) are in conftest.py."""
from __future__ import annotations

from browser_marks import BROWSER, LOAD, MAIN
from playwright.sync_api import Page, expect

from bertcore.config import BertConfig, TrainConfig
from bertcore.training import runs
from bertcore.launch import service

pytestmark = BROWSER
WS = "probesBrowserWorkspace0123"
HEAT = ".st-key-probe_heat_fig .js-plotly-plot"
LINE = ".st-key-probe_layers_fig .js-plotly-plot"


def test_probes_page_with_a_trained_run(page: Page, app_server, monkeypatch, tmp_path):
    monkeypatch.setenv("BERTCORE_RUNS_DIR", str(app_server.runs_dir))  # the server's own runs folder
    tc = TrainConfig(steps=100, eval_every=50, seed=0)
    r = service.train(service.RunSpec(BertConfig(), tc, name="probes"), parent=runs.workspace_dir(WS))
    runs.write_workspace(WS, active=f"run:{r.run_dir.name}")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{app_server.url}/probes?ws={WS}&property=number&step=50")
    expect(page.locator(f"{MAIN} h1").filter(has_text="Probes").first).to_be_visible(timeout=LOAD)
    expect(page.locator(HEAT).first).to_be_visible(timeout=LOAD)
    expect(page.locator(LINE).first.locator(".gtitle")).to_have_text("number probes at step 50", timeout=LOAD)
    steps = page.locator(HEAT).first.evaluate("el => el.data[0].x")
    assert steps == ["0", "50", "100"], steps
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()[:2000]
    assert page.locator('[data-testid="stAlert"]').filter(has_text="went wrong").count() == 0
    page.screenshot(path=str(tmp_path / "probes.png"), full_page=True)
