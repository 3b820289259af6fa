"""Issue 23 in chromium at 1400x900: the Attention page's Head roles tab draws the role map of a run's saved step
with no exception, and a link with ``?step=N`` reopens that step. Fixtures (app server, chromium) in conftest.py."""
from __future__ import annotations

import pytest
from browser_marks import BROWSER, LOAD, MAIN
from playwright.sync_api import Page, expect

from bertcore.config import BertConfig, TrainConfig
from bertcore.training import runs
from bertcore.launch import service

pytestmark = BROWSER
WS = "headRolesBrowser012345678"
ROLE_MAP = ".st-key-attn_roles_map .js-plotly-plot"


@pytest.fixture()
def run_on_server(app_server, monkeypatch):
    monkeypatch.setenv("BERTCORE_RUNS_DIR", str(app_server.runs_dir))  # the server's workspace folder
    tc = TrainConfig(steps=30, batch_size=16, eval_every=10, eval_size=32, snapshot_every=10, warmup_steps=3, seed=1)
    spec = service.RunSpec(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=48), tc, name="roles")
    r = service.train(spec, parent=runs.workspace_dir(WS))
    runs.write_workspace(WS, active=f"run:{r.run_dir.name}")
    return r.run_dir


def _open(page: Page, url: str) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(url)
    page.wait_for_selector('[data-testid="stApp"]')
    expect(page.locator(f"{MAIN} h1").filter(has_text="Attention").first).to_be_visible(timeout=LOAD)
    expect(page.locator(ROLE_MAP).first).to_be_visible(timeout=LOAD)
    expect(page.locator(ROLE_MAP).first.locator(".gtitle")).to_have_text("Head roles at step 10", timeout=LOAD)
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()[:2000]
    assert not page.locator(f"{MAIN} [data-testid='stAlert']").filter(has_text="UNEXPECTED").count()


def test_role_map_renders_and_a_step_link_reopens_it(page: Page, app_server, run_on_server, tmp_path):
    link = f"{app_server.url}/attention?ws={WS}&attn_tab=Head+roles&step=10"
    _open(page, link)
    # 2 layers x 2 heads: four cells with their role written in them, and the timeline of 4 saved steps below
    z = page.locator(ROLE_MAP).first.evaluate("el => el.calcdata[0][0].z.map(r => Array.from(r))")
    assert len(z) == 2 and all(len(row) == 2 for row in z)
    steps = page.locator(".st-key-attn_roles_timeline .js-plotly-plot").first.evaluate(
        "el => Array.from(el._fullData[1].x)")
    assert list(steps) == [0, 10, 20, 30]
    page.screenshot(path=str(tmp_path / "head-roles.png"))
    other = page.context.new_page()  # a fresh session from the same link shows step 10 again
    _open(other, page.url if "step=10" in page.url else link)
    other.close()
