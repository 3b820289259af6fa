"""Make docs/FINETUNE.md's screenshot of the Fine-tune page (assets/finetune.png) with the browser harness.

    python scripts/finetune_screenshot.py CHECKPOINT_DIR [--out assets/finetune.png] [--task same_topic]

Starts its own headless `streamlit run app.py`, uploads CHECKPOINT_DIR (e.g. the default
`python -m bertcore train --out DIR` run) as a zip on the Train page, opens the Fine-tune page, presses Start
with 64 labelled examples and waits for both models to finish (real curves, nothing staged). Every request
outside 127.0.0.1 is aborted. The PNG is downscaled to 900 px wide.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.harness import CHROMIUM, CHROMIUM_ARGS, AppServer  # noqa: E402

OUTSIDE = re.compile(r"^(?!(https?|wss?)://(127\.0\.0\.1|localhost)[:/]).*")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--out", default=str(REPO / "assets" / "finetune.png"))
    ap.add_argument("--task", default="same_topic")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from bertcore.io.checkpoint import load_checkpoint
    from explorer.session.uploads import checkpoint_zip_bytes

    tmp = Path(tempfile.mkdtemp(prefix="ft-shot-"))
    z = tmp / "default-run.zip"
    z.write_bytes(checkpoint_zip_bytes(load_checkpoint(args.checkpoint)))
    with AppServer(tmp / "server.log") as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.route(OUTSIDE, lambda route: route.abort())
        page.set_default_timeout(600_000)
        page.goto(f"{server.url}/train")
        page.locator(".st-key-train_upload input[type=file]").set_input_files(str(z))
        page.locator(".st-key-train_load_upload button").click()
        page.locator('[data-testid="stSidebar"]').get_by_text("uploaded: default-run.zip").first.wait_for()
        page.locator('[data-testid="stSidebarNav"] a').filter(has_text="Fine-tune").click()
        page.locator(".st-key-finetune_start button").wait_for()
        page.locator(".st-key-finetune_task [data-testid='stSelectbox']").click()
        page.get_by_role("option", name=args.task, exact=True).click()
        page.wait_for_timeout(2000)
        page.locator(".st-key-finetune_start button").click()
        done = page.locator('[data-testid="stProgress"]').filter(has_text=re.compile("finished|stopped|abandoned|error"))
        done.first.wait_for()
        status = done.first.inner_text()
        if "finished" in status:
            page.locator(".st-key-finetune_probs .js-plotly-plot").first.wait_for()
        else:
            print(f"note: the run ended as {status!r}", file=sys.stderr)
        page.wait_for_timeout(1500)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
        browser.close()
    from scripts.screenshots import shrink

    shrink(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
