"""The Skills chart on the Train page in chromium (issue 23): it fills in live, one line per skill with the chance
line, while the loss and accuracy charts, the probe table and Stop stay in view at 1400x900; the first-pass
sentences appear under it."""
from __future__ import annotations

from browser_marks import BROWSER, LOAD, MAIN, TRAIN, until
from playwright.sync_api import Page, expect

pytestmark = BROWSER

POINTS = "el => (el.data || []).reduce((n, t) => n + (t.x ? t.x.filter(v => v !== null).length : 0), 0)"


def test_skills_chart_fills_in_live_and_everything_stays_in_view(page: Page, app_server, tmp_path):
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{app_server.url}/train")
    start = page.locator(".st-key-train_start button")
    expect(start).to_be_enabled(timeout=LOAD)
    start.click()
    expect(page.locator(f'{MAIN} [data-testid="stProgress"]').first).to_contain_text("running", timeout=LOAD)
    panel = page.frame_locator(".st-key-train_live iframe").first
    skills = panel.locator("#skills .js-plotly-plot, #skills.js-plotly-plot").first
    expect(skills).to_be_visible(timeout=LOAD)
    assert skills.evaluate("el => el.data.length") == 8  # one line per built-in skill
    assert "chance" in skills.inner_text()
    counts = []

    def grew_twice() -> bool:  # two evaluations arrived while the page watched
        counts.append(skills.evaluate(POINTS))
        return len(set(counts)) >= 3

    until(grew_twice, timeout=TRAIN, page=page, every=1000)
    assert len(set(counts)) >= 3, f"the Skills chart did not fill in: {counts[:3]}...{counts[-3:]}"
    loss = panel.locator("#loss")
    for what in (page.locator(".st-key-train_stop button"), loss, panel.locator("#acc"), panel.locator("#skills"),
                 panel.locator("#probe table")):
        box = what.bounding_box()
        assert box and 0 <= box["y"] and box["y"] + box["height"] <= 900, f"not in view at 1400x900: {box}"
    # the eight names sit below the plot, inside the chart's box, and leave the plot about the loss chart's height
    legend = panel.locator("#skills_box .legend")
    assert legend.locator("span").count() == 8 and "verb agreement" in legend.inner_text()
    # each name takes one or two 12 px lines whatever the font, so the plot's height does not depend on it
    heights = legend.evaluate("el => Array.from(el.querySelectorAll('span b')).map(b => b.offsetHeight)")
    assert all(11 <= h <= 25 for h in heights), heights
    chart_box, legend_box = panel.locator("#skills_box").bounding_box(), legend.bounding_box()
    assert legend_box["y"] + legend_box["height"] <= chart_box["y"] + chart_box["height"] + 1, (legend_box, chart_box)
    plot_h = skills.evaluate("el => el._fullLayout._size.h")
    loss_h = panel.locator("#loss .js-plotly-plot, #loss.js-plotly-plot").first.evaluate("el => el._fullLayout._size.h")
    assert plot_h >= 0.8 * loss_h, (plot_h, loss_h)
    page.screenshot(path=str(tmp_path / "train-skills.png"))
    expect(page.locator(MAIN)).to_contain_text("passed", timeout=LOAD)  # a first-pass sentence
    page.locator(".st-key-train_stop button").click()
    assert page.locator('[data-testid="stException"]').count() == 0
