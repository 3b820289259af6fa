"""CJK glyphs in chromium (issue 25 part 8): the test tools install a CJK font, so Chinese pages, tokens and the
SVG/PNG a chart exports draw real characters, not the same empty box for every one ("tofu")."""
from __future__ import annotations

from browser_marks import BROWSER, LOAD, MAIN
from playwright.sync_api import Page, expect

pytestmark = BROWSER

# Draws each character on a canvas in the page's own sans-serif stack and returns the pixel data: without a font
# that has the glyph, chromium draws one and the same box for every character.
GLYPHS = """chars => chars.map(ch => {
  const c = document.createElement("canvas"); c.width = 40; c.height = 40;
  const g = c.getContext("2d"); g.font = "32px sans-serif"; g.fillStyle = "#000"; g.fillText(ch, 2, 34);
  return Array.from(g.getImageData(0, 0, 40, 40).data).join(",");
})"""


def test_chinese_characters_draw_as_distinct_glyphs(page: Page, app_server):
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{app_server.url}/predict?lang=zh")
    expect(page.locator(MAIN)).to_contain_text("预测", timeout=LOAD)
    a, b, c = page.evaluate(GLYPHS, ["猫", "狗", "鱼"])
    assert len({a, b, c}) == 3, "CJK characters draw as identical boxes: install a CJK font (scripts/install-test-tools.sh)"
    blank = page.evaluate(GLYPHS, [" "])[0]
    assert a != blank  # and not as nothing
