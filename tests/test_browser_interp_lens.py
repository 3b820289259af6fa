"""The Logit lens & patching page in chromium (1400x900) with a trained default-architecture model: it opens from a
link with no exception, and a new text gets its answer (the patching heat map redrawn, then the lens curve); the
seconds from Enter to the redraw after the first call are printed (-s) for docs/BENCH.md, not asserted."""
from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest
from browser_marks import BROWSER, LOAD, MAIN
from playwright.sync_api import Page, expect

from bench.harness import AppServer
from bertcore.analysis.patching import default_pairs
from bertcore.config import BertConfig, TrainConfig
from bertcore.io.checkpoint import load_checkpoint
from bertcore.training import runs
from bertcore.launch import service

pytestmark = BROWSER
WS = "lensBrowserWorkspace01234"
FIG = ".st-key-lp_fig_pos .js-plotly-plot"
CURVE = ".st-key-lp_curve_0 .js-plotly-plot"


@pytest.fixture()
def server(_runs_dir_in_tmp, tmp_path):
    """A 20-step run of the default architecture as workspace WS's active model, and a server that sees it."""
    tc = TrainConfig(steps=20, eval_every=10, eval_size=32, snapshot_every=10, warmup_steps=2, seed=0)
    r = service.train(service.RunSpec(BertConfig(), tc, name="lens"), parent=runs.workspace_dir(WS))
    runs.write_workspace(WS, active=f"run:{r.run_dir.name}")
    srv = AppServer(tmp_path / "server.log", runs_dir=_runs_dir_in_tmp).start()
    yield srv, default_pairs(load_checkpoint(r.run_dir).tokenizer)
    srv.stop()


def _no_exception(page: Page) -> None:
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()[:2000]


def _redraw_seconds(page: Page, key: str, text: str, chart: str, probe: str) -> float:
    """Type ``text`` into the input ``key``, press Enter, and time until ``probe`` (JS on the chart) changes."""
    ready = f"() => {{ const el = document.querySelector('{chart}'); return !!(el && el.data && el.data[0]); }}"
    page.wait_for_function(ready, timeout=LOAD)  # a chart streamlit is still redrawing has no data yet
    before = page.locator(chart).first.evaluate(probe)
    box = page.locator(f".st-key-{key} input").first
    box.fill(text)
    t0 = time.perf_counter()
    box.press("Enter")
    page.wait_for_function(f"b => {{ const el = document.querySelector('{chart}'); "
                           f"return el && el.data && el.data[0] && JSON.stringify(({probe})(el)) !== JSON.stringify(b); }}", arg=before,
                           timeout=LOAD)
    return time.perf_counter() - t0


def test_page_opens_and_answers_new_texts(page: Page, server):
    srv, pairs = server
    assert len(pairs) >= 3
    page.set_viewport_size({"width": 1400, "height": 900})
    (a, b, right, wrong) = pairs[0]
    q = urlencode(dict(ws=WS, lp_view="patch", lp_a=a, lp_b=b, lp_right=right, lp_wrong=wrong))
    page.goto(f"{srv.url}/lens_patching?{q}")
    expect(page.locator(f"{MAIN} h1").filter(has_text="Logit lens").first).to_be_visible(timeout=LOAD)
    expect(page.locator(FIG).first).to_be_visible(timeout=LOAD)
    _no_exception(page)
    x_probe = "el => (el.data && el.data[0]) ? el.data[0].x : null"
    first = _redraw_seconds(page, "lp_a", pairs[1][0], FIG, x_probe)
    _redraw_seconds(page, "lp_b", pairs[1][1], FIG, "el => (el.data && el.data[0]) ? el.data[0].z : null")
    patch_s = _redraw_seconds(page, "lp_a", pairs[2][0], FIG, x_probe)
    _no_exception(page)
    page.goto(f"{srv.url}/lens_patching?{urlencode(dict(ws=WS, lp_view='lens', lp_text=a, lp_word=right))}")
    expect(page.locator(CURVE).first).to_be_visible(timeout=LOAD)
    y_probe = "el => (el.data && el.data[0]) ? el.data[0].y : null"
    _redraw_seconds(page, "lp_text", pairs[1][0], CURVE, y_probe)
    lens_s = _redraw_seconds(page, "lp_text", pairs[2][0], CURVE, y_probe)
    _no_exception(page)
    print(f"\nchromium (loaded machine): patch first new text {first:.2f} s, later {patch_s:.2f} s; "
          f"lens later {lens_s:.2f} s")
