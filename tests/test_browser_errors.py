"""Issue 27 in chromium: on Predict, a sentence A made only of invisible format characters (right-to-left override,
zero-width space, zero-width joiner, as pasted from a web page) shows the library's message in an st.error; there is
no "This app has encountered an error" screen, and the fill-mask section above still shows its chart.
Fixtures (app server, chromium launch settings) are in conftest.py."""
from __future__ import annotations

from browser_marks import BROWSER, LOAD, MAIN
from playwright.sync_api import Page, expect

pytestmark = BROWSER

FORMAT_ONLY = "\u202e\u200b\u200d"


def test_invisible_sentence_a_shows_the_library_message(page: Page, app_server, tmp_path):
    page.goto(f"{app_server.url}/predict")
    # the first draw (on a fresh server it imports torch and builds the model): LOAD, not an update's budget
    expect(page.locator(f"{MAIN} h1").filter(has_text="Predict").first).to_be_visible(timeout=LOAD)
    expect(page.locator('[data-testid="stMetric"]').filter(has_text="P(IsNext)").first).to_be_visible(timeout=LOAD)
    box = page.get_by_label("Sentence A")
    box.fill(FORMAT_ONLY)
    box.press("Control+Enter")  # Streamlit submits a text area on Ctrl+Enter (or on blur)
    error = page.locator(f'{MAIN} [data-testid="stAlertContentError"]').filter(has_text="sentence A is empty")
    expect(error.first).to_be_visible()
    page.screenshot(path=str(tmp_path / "predict-invisible-a.png"), full_page=True)
    assert page.get_by_text("This app has encountered an error").count() == 0
    assert page.locator('[data-testid="stException"]').count() == 0
    expect(page.locator('[data-testid="stMetric"]').filter(has_text="P(IsNext)")).to_have_count(0)
    # the rest of the page still answers: the fill-mask chart is drawn, and a new [MASK] text is predicted
    expect(page.locator(f"{MAIN} .js-plotly-plot").first).to_be_visible()
    masked = page.get_by_label("Text with one or more [MASK]")
    masked.fill("[MASK] cows eat the hay .")
    masked.press("Control+Enter")
    expect(page.locator(f"{MAIN} .gtitle").filter(has_text="[MASK] 1 (position 1)").first).to_be_visible()
    assert page.locator('[data-testid="stException"]').count() == 0
