"""Every page in 简体中文 (issue 25 part 4): with ``?lang=zh`` each page opens in chromium with no exception, and
the visible text holds no English sentence outside code, formulas, inputs, charts and model names
(``bench.experiments.zh_walk``). Texts bertcore writes (corpus descriptions, preset notes, errors) are
``bertcore.message.Message``s and shown translated. What is still English is listed here: a file format's header and
the model's own tokens. A new English sentence fails the test."""
from __future__ import annotations

from browser_marks import BROWSER
from playwright.sync_api import Page

from bench.experiments.zh_walk import PAGES, walk

pytestmark = BROWSER

FROM_BERTCORE = (  # what stays English on purpose: code and data, not UI
    "text,right,wrong",  # the CSV header a skills file must have
    "the cat eats the cheese in the kitchen",  # the tokens of the English default sentence (data, not UI)
)


def _allowed(run: str) -> bool:
    return any(a in run or run in a for a in FROM_BERTCORE)


def test_every_page_in_chinese_has_no_english_sentence(page: Page, app_server):
    page.set_viewport_size({"width": 1400, "height": 900})
    found = walk(app_server.url, page)
    assert set(found) == {p or "overview" for p in PAGES}
    left = {p: [r for r in runs if not _allowed(r)] for p, runs in found.items()}
    assert not any(left.values()), left
