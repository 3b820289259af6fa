"""Make the screenshots of the README and docs/PAGES.md (assets/train.png, assets/attention.png) with the browser harness.

    python scripts/screenshots.py [--out assets] [--seconds 25] [--finish]

Starts its own headless `streamlit run app.py`, opens the Train page in Debian's chromium, presses
Start with the default settings, lets the live charts run for a while (real curves, nothing staged),
then opens the Attention page with the model it trained (pressing Stop, or with --finish after all 600 steps). Every request outside 127.0.0.1 is aborted.
The PNGs are downscaled to 900 px wide.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.harness import CHROMIUM, CHROMIUM_ARGS, AppServer  # noqa: E402

OUTSIDE = re.compile(r"^(?!(https?|wss?)://(127\.0\.0\.1|localhost)[:/]).*")


def shrink(path: Path, width: int = 900) -> None:
    from PIL import Image

    img = Image.open(path)
    if img.width > width:
        img = img.resize((width, round(img.height * width / img.width)), Image.LANCZOS)
    img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "assets"))
    ap.add_argument("--seconds", type=float, default=25.0, help="how long to let the default training run")
    ap.add_argument("--finish", action="store_true", help="let the run finish instead of pressing Stop")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with AppServer() as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        blocked: list[str] = []
        page.route(OUTSIDE, lambda route: (blocked.append(route.request.url), route.abort()))

        page.goto(server.url + "/train")
        page.wait_for_selector('[data-testid="stMain"] h1', timeout=90_000)
        page.locator(".st-key-train_start button").first.click()
        page.frame_locator(".st-key-train_live iframe").first.locator("#loss.js-plotly-plot").wait_for(timeout=300_000)
        time.sleep(args.seconds)  # no scrolling: progress, charts, probe table and Stop are all in view at 1400x900
        page.screenshot(path=str(out / "train.png"))

        stop = page.locator(".st-key-train_stop button").first
        if args.finish:
            page.wait_for_selector('[data-testid="stSidebar"] :text("finished after")', timeout=900_000)
        elif stop.is_enabled():  # a long --seconds may outlast the run
            stop.click()
        page.wait_for_selector('[data-testid="stSidebar"] :text("trained here")', timeout=60_000)
        # navigate inside the app: a page load would start a new session without the trained model
        page.get_by_role("link", name="Attention").first.click()
        page.wait_for_selector(".st-key-attn_grid .js-plotly-plot", timeout=90_000)
        page.locator(".st-key-attn_grid").first.scroll_into_view_if_needed()
        page.evaluate("window.scrollBy(0, -330)")
        time.sleep(2)
        page.screenshot(path=str(out / "attention.png"))
        browser.close()
    for name in ("train.png", "attention.png"):
        shrink(out / name)
        print(f"wrote {out / name} ({(out / name).stat().st_size // 1024} KB)")
    if blocked:
        print(f"warning: aborted {len(blocked)} request(s) outside 127.0.0.1: {blocked[:3]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
