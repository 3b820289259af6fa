"""The Train page's result view in chromium at 1400x900: a short SOP training (ALBERT §4.6) finishes, and after F5
(a new session that finds the run on disk) the page opens on its result: the heading, the final curves named SOP,
the skills against 0.9 and the links onward in the first screen, the configuration collapsed, Start one click
away."""
from __future__ import annotations

import re

from browser_marks import BROWSER, LOAD, MAIN, TRAIN, until, wait_idle
from playwright.sync_api import Page, expect

pytestmark = BROWSER

LIVE = ".st-key-train_live iframe"
POINTS = "el => (el.data || []).reduce((n, t) => n + (t.x ? t.x.filter(v => v !== null).length : 0), 0)"


def _slider_home(page: Page, label: str, value: str) -> None:
    s = page.locator(f'{MAIN} input[type="range"][aria-label="{label}"]')
    s.focus()
    s.press("Home")
    expect(s).to_have_attribute("aria-valuetext", value)


def test_result_view_after_reload(page: Page, app_server, tmp_path):
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{app_server.url}/train")
    expect(page.locator(".st-key-train_start button")).to_be_enabled(timeout=LOAD)
    _slider_home(page, "steps", "20")
    _slider_home(page, "batch size", "4")
    sentence = page.locator(f'{MAIN} [data-testid="stRadio"]').filter(has_text="sentence task")
    sentence.get_by_text("SOP", exact=True).click()
    expect(page.locator(MAIN)).to_contain_text("ALBERT §4.6")
    wait_idle(page)
    page.locator(".st-key-train_start button").click()
    expect(page.locator(f'{MAIN} [data-testid="stProgress"]').first).to_contain_text("finished", timeout=TRAIN)
    expect(page.locator(MAIN).get_by_text(re.compile(r"^Result: original BERT, seed 0"))).to_be_visible()

    page.reload()  # F5: a new session; only the link (?ws=) and the run on disk are left
    heading = page.locator(MAIN).get_by_text(re.compile(r"^Result: original BERT, seed 0"))
    expect(heading).to_be_visible(timeout=LOAD)
    panel = page.frame_locator(LIVE).first
    loss = panel.locator("#loss .js-plotly-plot, #loss.js-plotly-plot").first
    expect(loss).to_be_visible(timeout=LOAD)
    assert until(lambda: loss.evaluate(POINTS) > 0, page=page), "no points on the result's loss chart"
    # every chart fits its own box: drawn before the page's layout settled, plotly kept a wider first width and
    # the loss chart ran under the accuracy chart (until the frontend re-fitted each chart to its box)
    fits = ("() => Array.from(document.querySelectorAll('.js-plotly-plot')).every(d => d._fullLayout && "
            "d.querySelector('.main-svg').getBoundingClientRect().width <= d.clientWidth + 1)")
    frame = next(f for f in page.frames if f.url != page.url and "livechart" in f.url)
    assert until(lambda: frame.evaluate(fits), page=page), frame.evaluate(
        "() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => [d.id, d.clientWidth, "
        "d.querySelector('.main-svg').getBoundingClientRect().width])")
    names = loss.evaluate("el => el.data.map(t => t.name)")
    assert names == ["MLM (train)", "SOP (train)", "MLM (held-out)", "SOP (held-out)"], names
    expect(panel.locator("#h_nsp")).to_have_text("P(in order)")
    # the configuration is collapsed: its label is shown, its widgets are not
    expect(page.locator(MAIN).get_by_text(re.compile("^Configuration of the next training"))).to_be_visible()
    expect(page.locator(f'{MAIN} input[type="range"][aria-label="steps"]')).to_be_hidden()
    start = page.locator(".st-key-train_start button")
    expect(start).to_be_enabled()
    expect(page.locator(MAIN)).to_contain_text(re.compile(r"Reached 0\.9|No skill reached 0\.9"))
    for title in ("Attention", "Predict", "Inside the model"):
        expect(page.locator(f'{MAIN} [data-testid="stPageLink"]').filter(has_text=title)).to_be_visible()
    wait_idle(page)
    page.screenshot(path=str(tmp_path / "train-result.png"))
    # the result, not the form, is what the first screen shows
    for what in (heading, start, page.locator(LIVE).first):
        box = what.bounding_box()
        assert box and 0 <= box["y"] < 900, f"below the fold at 1400x900: {box}"
    # the configuration opens with one click and stays open while a setting changes; Start is still one click away
    page.locator(MAIN).get_by_text(re.compile("^Configuration of the next training")).click()
    steps = page.locator(f'{MAIN} input[type="range"][aria-label="steps"]')
    expect(steps).to_be_visible()
    steps.focus()
    steps.press("ArrowRight")
    wait_idle(page)
    expect(steps).to_be_visible()
    expect(start).to_be_enabled()
    assert page.locator('[data-testid="stException"]').count() == 0
