"""Issue 26 in chromium: on Masking & NSP the decision row's legend states the shares the sliders hold, not BERT's
80/10/10. Fixtures (app server, chromium launch settings) are in conftest.py."""
from __future__ import annotations

import re

from browser_marks import BROWSER, LOAD, MAIN, until
from playwright.sync_api import Page, expect

pytestmark = BROWSER

CHART = ".st-key-mn_mask_chart .js-plotly-plot"


def _legend(page: Page) -> list[str]:
    return page.locator(CHART).first.locator(".legendtext").all_text_contents()


def _slide(page: Page, label: str, key: str, presses: int, want: str) -> None:
    """Move a 1.67 slider (<input type=range aria-label=...>) with the arrow keys to ``want``."""
    s = page.locator(f'{MAIN} input[type="range"][aria-label="{label}"]')
    s.focus()
    for _ in range(abs(presses)):
        s.press("ArrowRight" if presses > 0 else "ArrowLeft")
    expect(s).to_have_attribute("aria-valuetext", re.compile(rf"^{re.escape(want)}0*$"))


def test_masking_legend_states_the_sliders_shares(page: Page, app_server, tmp_path):
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{app_server.url}/masking_nsp")
    page.wait_for_selector('[data-testid="stApp"]')
    expect(page.locator(f"{MAIN} h1").filter(has_text="Masking & NSP").first).to_be_visible(timeout=LOAD)
    expect(page.locator(CHART).first).to_be_visible(timeout=LOAD)
    assert {"selected → [MASK] (80%)", "selected → random token (10%)", "selected → kept as is (10%)"} <= set(
        _legend(page))
    # selection 0.15 -> 0.2 (step 0.01), [MASK] 0.8 -> 0.6 first (so the shares never pass 1), random 0.1 -> 0.3
    _slide(page, "selection rate (mlm_probability)", "mn_rate", 5, "0.2")
    _slide(page, "[MASK] share of selected", "mn_mask", -4, "0.6")
    _slide(page, "random-token share of selected", "mn_random", 4, "0.3")
    want = {"selected → [MASK] (60%)", "selected → random token (30%)", "selected → kept as is (10%)"}
    until(lambda: want <= set(_legend(page)), page=page)  # each key press reruns the page; wait for the last draw
    legend = _legend(page)
    page.locator(CHART).first.scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "masking-legend.png"))
    assert want <= set(legend), legend
    assert not any("80%" in t for t in legend), legend
    expect(page.locator(MAIN)).to_contain_text("Kept unchanged: 10% of the selected tokens")
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()[:2000]
