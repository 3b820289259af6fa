"""The explorer in a real browser: `streamlit run app.py` on a free 127.0.0.1 port, driven by
pytest-playwright in Debian's headless chromium (fixtures in conftest.py).

* every page opened by deep link (the first page request of the server is a deep link), with its
  title, one key element, the shared sidebar, no exception, no "Page not found", a screenshot;
* a deep link to a page whose url_path differs from its file name, as the very first request of
  another fresh server (the multipage "legacy mode" trap);
* nothing is requested outside 127.0.0.1 (every other request is aborted and recorded);
* bertviz draws its token labels offline; live training advances and stops;
* the pretrained all-MiniLM-L6-v2 on the Attention and Positional encoding pages.
"""
from __future__ import annotations

import re
from urllib.parse import urlparse

import pytest
from browser_marks import BROWSER, LOAD, MAIN, SIDEBAR, until, wait_idle
from playwright.sync_api import Page, expect

pytestmark = BROWSER


def plot(key: str) -> str:
    """The drawn plotly chart of the st.plotly_chart with this key."""
    return f".st-key-{key} .js-plotly-plot"


# url_path (see app.py) -> (title shown by the page, one key element of its main content).
# Attention comes first: with the session server, the first page request is this deep link.
# The overview is the default page: Streamlit serves it at "/" (its url_path is not a route).
PAGES = {
    "attention": ("Attention", plot("attn_grid")),
    "": ("How BERT pretrains", plot("overview_pipeline")),
    "data_tokens": ("Data & tokens", plot("dt_len_chart")),
    "masking_nsp": ("Masking & NSP", plot("mn_mask_chart")),
    "positional_encoding": ("Positional encoding", plot("pe_table_chart")),
    "forward": ("Inside the model", plot("fw_stage_fig")),
    "train": ("Train a tiny BERT", ".st-key-train_start button"),
    "compare": ("Compare two designs", f"{MAIN} .js-plotly-plot, {MAIN} [data-testid='stButton']"),
    "predict": ("Predict", f"{MAIN} .js-plotly-plot"),
    "embeddings": ("Embeddings", plot("emb_table_fig")),
}


# ----------------------------------------------------------------------------- helpers
def _is_outside(url: str) -> bool:
    u = urlparse(url)
    if u.scheme not in ("http", "https", "ws", "wss"):
        return False  # data:, blob:, about:srcdoc never leave the machine
    return u.hostname not in ("127.0.0.1", "localhost")


@pytest.fixture
def offline_page(page: Page) -> Page:
    """The test's page, with every request outside 127.0.0.1 aborted and recorded in page.outside."""
    page.outside = []

    def abort(route):
        page.outside.append(route.request.url)
        route.abort()

    page.context.route(_is_outside, abort)
    return page


def assert_offline(page: Page) -> None:
    assert page.outside == [], f"requests left 127.0.0.1 (aborted): {page.outside}"


def assert_page_ok(page: Page, title: str, key: str, model_label: str | None = None) -> None:
    page.wait_for_selector('[data-testid="stApp"]', timeout=LOAD)
    expect(page.locator(f"{MAIN} h1").filter(has_text=title).first).to_be_visible(timeout=LOAD)
    expect(page.locator(key).first).to_be_visible(timeout=LOAD)
    wait_idle(page)
    sidebar = page.locator(SIDEBAR)
    expect(sidebar).to_contain_text("Active model:")
    if model_label:
        expect(sidebar).to_contain_text(model_label)
    expect(sidebar.locator('[data-testid="stSidebarNav"]')).to_be_visible()
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, f"{title}: exception shown: {exc.first.inner_text()[:2000]}"
    errors = page.locator(f'{MAIN} [data-testid="stAlertContentError"]')
    assert errors.count() == 0, f"{title}: error shown: {errors.all_inner_texts()}"
    assert page.get_by_text("Page not found").count() == 0, f"{title}: a 'Page not found' dialog is shown"


def step_counter(page: Page) -> tuple[int, int]:
    text = page.locator(f'{MAIN} [data-testid="stProgress"]').first.inner_text()
    m = re.search(r"step (\d+)/(\d+)", text)
    assert m, f"no step counter in {text!r}"
    return int(m.group(1)), int(m.group(2))


def trace_points(page: Page, selector: str) -> int:
    """Points drawn by a plotly chart: summed over its traces (decoded data in _fullData)."""
    return page.locator(selector).first.evaluate(
        "el => (el._fullData || el.data || []).reduce((n, t) => n + (t.x ? t.x.length : 0), 0)")


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("url", list(PAGES), ids=[u or "overview" for u in PAGES])
def test_page_by_deep_link(offline_page: Page, app_server, url, tmp_path):
    page = offline_page
    title, key = PAGES[url]
    page.goto(f"{app_server.url}/{url}")
    try:
        assert_page_ok(page, title, key, model_label="fresh untrained")
    finally:
        page.screenshot(path=str(tmp_path / f"{url or 'overview'}.png"))
    assert_offline(page)


def test_deep_link_is_first_request_of_fresh_server(offline_page: Page, tmp_path):
    """`/positional` runs pages/positional_encoding.py: in Streamlit's legacy v1 mode (a fresh server)
    that url does not match a file name. The page must still render inside app.py's frame, cleanly."""
    from bench.harness import AppServer

    server = AppServer(tmp_path / "server.log").start()
    try:
        page = offline_page
        page.goto(f"{server.url}/positional_encoding")
        title, key = PAGES["positional_encoding"]
        try:
            assert_page_ok(page, title, key, model_label="fresh untrained")
        finally:
            page.screenshot(path=str(tmp_path / "fresh-positional.png"))
        assert_offline(page)
    finally:
        server.stop()


def test_bertviz_draws_token_labels_offline(offline_page: Page, app_server, tmp_path):
    page = offline_page
    page.goto(f"{app_server.url}/attention")
    assert_page_ok(page, *PAGES["attention"])
    page.get_by_role("tab", name="bertviz").click()
    frame = page.frame_locator(f"{MAIN} iframe").first
    # bertviz's head view writes each token as an SVG <text>: it ran, with d3/jQuery from this server.
    expect(frame.locator("text", has_text="[CLS]").first).to_be_visible(timeout=LOAD)
    expect(frame.locator("text", has_text="library").first).to_be_visible()
    page.screenshot(path=str(tmp_path / "bertviz.png"))
    assert_offline(page)


def test_train_live_and_stop(offline_page: Page, app_server, tmp_path):
    page = offline_page
    page.goto(f"{app_server.url}/train")
    assert_page_ok(page, *PAGES["train"])
    # A long run so that Stop surely comes first: the steps slider to its maximum (1.67 sliders are
    # <input type=range aria-label=...>; the keyboard drives them).
    steps = page.locator(f'{MAIN} input[type="range"][aria-label="steps"]')
    steps.focus()
    steps.press("End")
    expect(steps).to_have_attribute("aria-valuetext", "5000")
    wait_idle(page)
    start = page.locator(".st-key-train_start button")
    expect(start).to_be_enabled()
    start.click()

    expect(page.locator(f'{MAIN} [data-testid="stProgress"]').first).to_contain_text("running", timeout=LOAD)
    # the live panel (explorer.livechart): plotly.js charts in the component's iframe, extended in place
    panel = page.frame_locator(".st-key-train_live iframe").first
    loss = panel.locator("#loss .js-plotly-plot, #loss.js-plotly-plot").first
    expect(loss).to_be_visible(timeout=LOAD)
    points = "el => (el.data || []).reduce((n, t) => n + (t.x ? t.x.length : 0), 0)"
    s1, total = step_counter(page)
    n1 = loss.evaluate(points)
    s2 = n2 = None

    def advanced() -> bool:
        nonlocal s2, n2
        s2, n2 = step_counter(page)[0], loss.evaluate(points)
        return s2 > s1 and n2 > n1

    until(advanced, page=page)
    # the unigram baseline is drawn on the accuracy chart even when it arrived after the chart was created
    acc_plot = panel.locator("#acc .js-plotly-plot, #acc.js-plotly-plot").first
    until(lambda: acc_plot.evaluate("el => (el.layout && el.layout.shapes || []).length") >= 1, page=page)
    assert "MLM unigram baseline" in acc_plot.inner_text()
    # in view without scrolling at 1400x900: progress, both charts, the probe table and Stop (once the page has
    # laid itself out again for the new width)
    page.set_viewport_size({"width": 1400, "height": 900})
    in_view = (page.locator(f'{MAIN} [data-testid="stProgress"]').first, page.locator(".st-key-train_stop button"),
               loss, panel.locator("#acc"), panel.locator("#probe table"))

    def boxes_in_view() -> list:
        boxes = [what.bounding_box() for what in in_view]
        return boxes if all(b and 0 <= b["y"] and b["y"] + b["height"] <= 900 for b in boxes) else []

    boxes = until(boxes_in_view, page=page) or [what.bounding_box() for what in in_view]
    for box in boxes:
        assert box and 0 <= box["y"] and box["y"] + box["height"] <= 900, f"not in view at 1400x900: {box}"
    assert total == 5000
    assert s2 > s1, f"the step counter did not advance: {s1} then {s2}"
    assert n2 > n1, f"the loss chart did not advance: {n1} then {n2} points"
    expect(page.locator(SIDEBAR)).to_contain_text(re.compile(r"step \d+/5000"))
    page.screenshot(path=str(tmp_path / "train-running.png"))

    page.locator(".st-key-train_stop button").click()
    expect(page.locator(f'{MAIN} [data-testid="stProgress"]').first).to_contain_text("stopped")
    s3, _ = step_counter(page)
    assert s3 < 5000
    expect(start).to_be_enabled()
    page.screenshot(path=str(tmp_path / "train-stopped.png"))
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()[:2000]
    assert_offline(page)


def test_pretrained_minilm_attention_and_positional(offline_page: Page, app_server, tmp_path):
    page = offline_page
    page.goto(f"{app_server.url}/attention")
    assert_page_ok(page, *PAGES["attention"])
    # The sidebar's model switcher: pick the packaged all-MiniLM-L6-v2.
    # (by its label: the language switch is a selectbox in the sidebar too)
    switch = page.locator(f'{SIDEBAR} [data-testid="stSelectbox"]').filter(has_text="Switch model")
    switch.scroll_into_view_if_needed()  # at the sidebar's foot its list would open below the window
    switch.locator("input").click()  # the box itself, not its label row
    page.get_by_role("option", name=re.compile("all-MiniLM-L6-v2")).first.click()
    expect(page.locator(SIDEBAR)).to_contain_text("all-MiniLM-L6-v2", timeout=LOAD)
    expect(page.locator(MAIN)).to_contain_text("6 layers × 12 heads", timeout=LOAD)
    assert_page_ok(page, *PAGES["attention"], model_label="all-MiniLM-L6-v2")
    expect(page.locator(plot("attn_grid")).first).to_be_visible()
    page.screenshot(path=str(tmp_path / "minilm-attention.png"))

    # Same session: navigate in the app (a page.goto would start a new session).
    page.locator(f'{SIDEBAR} [data-testid="stSidebarNav"] a').filter(has_text="Positional encoding").click()
    assert_page_ok(page, "Positional encoding", plot("pe_learned_chart"), model_label="all-MiniLM-L6-v2")
    # The learned table of MiniLM: 512 positions × 384 dimensions, next to sinusoidal.
    expect(page.locator(MAIN)).to_contain_text("512 × 384")
    expect(page.locator(MAIN)).to_contain_text("learned")
    page.screenshot(path=str(tmp_path / "minilm-positional.png"))
    assert_offline(page)
