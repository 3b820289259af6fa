"""Issue 13 in chromium: clicking a head in the all-heads grid opens it in the one-head view, the link
(text, head, tab in the URL) reopens the same view, and the SVG and CSV downloads arrive.
Fixtures (app server, chromium launch settings) are in conftest.py."""
from __future__ import annotations

import re
from pathlib import Path

from browser_marks import BROWSER, LOAD, MAIN
from playwright.sync_api import Page, expect

pytestmark = BROWSER

GRID = ".st-key-attn_grid .js-plotly-plot"
HEAD = ".st-key-attn_head_fig .js-plotly-plot"


def _open_attention(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector('[data-testid="stApp"]')
    expect(page.locator(f"{MAIN} h1").filter(has_text="Attention").first).to_be_visible(timeout=LOAD)


def _no_exception(page: Page) -> None:
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()[:2000]


def test_click_a_grid_head_opens_it_and_the_link_reopens_it(page: Page, app_server, tmp_path):
    _open_attention(page, f"{app_server.url}/attention")
    expect(page.locator(GRID).first).to_be_visible(timeout=LOAD)
    # layer 2, head 3 (0-based 1, 2): one mosaic heatmap, then one overlay whose points run head by head
    g = page.locator(GRID).first.evaluate("el => el.layout.meta.grid")
    H, side = g["heads"], g["click_side"]
    assert g["layers"] >= 2 and H >= 3
    layer, head = 1, 2
    overlay = page.locator(f"{GRID} .scatterlayer .trace").first
    point = overlay.locator("path.point").nth((layer * H + head) * side * side + 5)
    point.scroll_into_view_if_needed()
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # plotly clicks what it hovers
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    expect(page.locator(HEAD).first).to_be_visible(timeout=LOAD)
    title = f"layer {layer + 1}, head {head + 1}"
    expect(page.locator(HEAD).first.locator(".gtitle")).to_have_text(title, timeout=LOAD)
    expect(page.get_by_role("tab", name="One head")).to_have_attribute("aria-selected", "true", timeout=LOAD)
    _no_exception(page)
    page.screenshot(path=str(tmp_path / "clicked-head.png"))
    # the address bar now holds the head and the tab: a fresh session from that link shows the same view
    expect(page).to_have_url(re.compile(r"attn_tab=One"), timeout=LOAD)
    link = page.url
    assert "attn_layer" in link and "attn_head" in link, link
    other = page.context.new_page()
    _open_attention(other, link)
    expect(other.locator(HEAD).first.locator(".gtitle")).to_have_text(title, timeout=LOAD)
    other.close()


def test_svg_and_csv_downloads_arrive(page: Page, app_server, tmp_path):
    _open_attention(page, f"{app_server.url}/attention?attn_tab=One+head")
    chart = page.locator(HEAD).first
    expect(chart).to_be_visible(timeout=LOAD)
    chart.hover()
    with page.expect_download() as dl:
        chart.locator('.modebar-btn[data-title^="Download plot"]').first.click()
    svg = dl.value
    assert svg.suggested_filename.endswith(".svg"), svg.suggested_filename
    body = Path(svg.path()).read_text(encoding="utf-8", errors="replace")
    assert body.lstrip().startswith("<svg") and "layer 1, head 1" in body
    with page.expect_download() as dl:
        page.get_by_role("button", name=re.compile(r"head 1 as CSV")).click()
    csv = dl.value
    assert csv.suggested_filename == "attention_layer0_head0.csv"
    lines = Path(csv.path()).read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("query,0 [CLS],1 ben") and lines[1].startswith("0 [CLS],")
    rows = [[float(v) for v in line.split(",")[1:]] for line in lines[1:]]
    assert all(abs(sum(r) - 1.0) < 1e-4 for r in rows)  # each query's weights sum to 1
    _no_exception(page)


def test_png_and_npz_downloads_arrive(page: Page, app_server, tmp_path):
    """PNG through plotly's own toImage (no server-side browser); the NPZ is built only when it is clicked."""
    import io

    import numpy as np

    _open_attention(page, f"{app_server.url}/attention?attn_tab=All+heads")
    grid = page.locator(GRID).first
    expect(grid).to_be_visible(timeout=LOAD)
    png_choice = page.locator(".st-key-attn_fig_fmt").get_by_role("radio", name="PNG")
    png_choice.click()
    expect(png_choice).to_have_attribute("aria-checked", "true", timeout=LOAD)
    page.wait_for_function(  # the chart is redrawn with the new toolbar config
        f"() => document.querySelector('{GRID}')?._context?.toImageButtonOptions?.format === 'png'", timeout=LOAD)
    page.locator(GRID).first.hover()
    with page.expect_download() as dl:
        page.locator(GRID).first.locator('.modebar-btn[data-title^="Download plot"]').first.click()
    png = dl.value
    assert png.suggested_filename.endswith(".png"), png.suggested_filename
    assert Path(png.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with page.expect_download() as dl:
        page.get_by_role("button", name=re.compile(r"All attentions \(NPZ")).click()
    npz = dl.value
    assert npz.suggested_filename == "attentions.npz"
    with np.load(io.BytesIO(Path(npz.path()).read_bytes()), allow_pickle=False) as z:
        A, tokens = z["attentions"], list(z["tokens"])
    assert A.ndim == 4 and A.shape[2] == A.shape[3] == len(tokens) and tokens[0] == "[CLS]"
    assert np.allclose(A.sum(-1), 1.0, atol=1e-4)  # every query's weights sum to 1
    _no_exception(page)
