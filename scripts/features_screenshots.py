"""Screenshots of the Features page at 1400x900, in English and in 简体中文, for a review.

    python scripts/features_screenshots.py RUN [--feature F] [--out DIR]

Copies RUN (a run folder with SAEs in RUN/saes/, e.g. after `python -m bertcore sae RUN --layer 1` and
`--over-training`) into a fresh workspace, starts its own headless `streamlit run app.py`, opens the Features page
with that feature and saves one PNG per screen height while scrolling: features_<lang>_<k>.png. Every request
outside 127.0.0.1 is aborted.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.harness import CHROMIUM, CHROMIUM_ARGS, AppServer  # noqa: E402

OUTSIDE = re.compile(r"^(?!(https?|wss?)://(127\.0\.0\.1|localhost)[:/]).*")
WS = "featuresShotsWorkspace0123"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--feature", type=int, default=0)
    ap.add_argument("--query", default="", help="more URL parameters, e.g. '&ft_step=300'")
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="features-shots-"))
    ws = root / "workspaces" / WS
    shutil.copytree(Path(args.run), ws / Path(args.run).name)
    (ws / "workspace.json").write_text(f'{{"active": "run:{Path(args.run).name}"}}')
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server = AppServer(root / "server.log", runs_dir=root).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.route(OUTSIDE, lambda route: route.abort())
            for lang in ("en", "zh"):
                q = f"?ws={WS}&feature={args.feature}{args.query}" + ("&lang=zh" if lang == "zh" else "")
                page.goto(server.url + "/features" + q)
                try:
                    page.wait_for_selector('.st-key-ft_any', state="attached", timeout=180_000)
                except Exception:
                    page.screenshot(path=str(out / f"features_{lang}_timeout.png"))
                    raise
                time.sleep(8)  # the last tables and charts after the text input
                main_el = page.locator('[data-testid="stMain"]')
                height = main_el.evaluate("el => el.scrollHeight")
                for k, y in enumerate(range(0, height, 850)):
                    main_el.evaluate(f"el => el.scrollTo(0, {y})")
                    time.sleep(1.5)
                    page.screenshot(path=str(out / f"features_{lang}_{k}.png"))
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"screenshots in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
