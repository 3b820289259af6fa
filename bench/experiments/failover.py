"""``python -m bench.experiments.failover [--rounds N] [--click-after S] [--json]``: how long a student's tab is without its
server when the replica it is on dies (docs/REPLICAS.md).

Two app processes share one runs folder behind deploy/nginx-class.conf (``bench.harness.nginx``). Each round a fresh
chromium tab (its sticky cookie on replica A) opens Overview, waits until it is drawn, then A is killed with
SIGKILL; ``--click-after`` seconds later the tab clicks Predict. Measured from the kill: ``drawn_s``, until the
Predict page's text input is drawn (served by B, in the tab's own workspace: ``same_workspace``). A is started
again between rounds. Medians over ``--rounds``. Numbers go to docs/BENCH.md; nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from bench.harness import CHROMIUM, CHROMIUM_ARGS, AppServer
from bench.harness.nginx import Nginx

MAIN = '[data-testid="stMain"]'


def _ws(url: str) -> str | None:
    return parse_qs(urlparse(url).query).get("ws", [None])[0]


def measure(rounds: int = 3, click_after: float = 0.5) -> dict:
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="bx-failover-"))
    runs_dir = work / "runs"
    a = AppServer(work / "a.log", runs_dir=runs_dir).start()
    b = AppServer(work / "b.log", runs_dir=runs_dir).start()
    proxy = Nginx([a.port, b.port], work / "nginx").start()
    cookie = next(f"c{i}" for i in range(500) if proxy.upstream_for(f"c{i}").endswith(f":{a.port}"))
    out = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for _ in range(rounds):
                ctx = browser.new_context()
                ctx.add_cookies([{"name": "bx_backend", "value": cookie, "url": proxy.url}])
                page = ctx.new_page()
                page.set_default_timeout(300_000)
                page.goto(proxy.url + "/")
                page.locator(MAIN).get_by_text("How BERT pretrains").wait_for()
                page.wait_for_timeout(2000)  # the session settles (its cookie iframe, the sidebar)
                ws = _ws(page.url)
                t0 = time.perf_counter()
                a.kill()
                page.wait_for_timeout(click_after * 1000)
                page.locator('[data-testid="stSidebarNav"]').get_by_text("Predict").click()
                page.locator(f"{MAIN} textarea, {MAIN} input[type=text]").first.wait_for()
                drawn = time.perf_counter() - t0
                out.append({"drawn_s": round(drawn, 2), "same_workspace": _ws(page.url) == ws})
                ctx.close()
                a = AppServer(work / "a.log", port=a.port, runs_dir=runs_dir).start()
            browser.close()
    finally:
        proxy.stop()
        a.stop()
        b.stop()
    return {"rounds": out, "click_after_s": click_after,
            "drawn_s_median": round(statistics.median(r["drawn_s"] for r in out), 2),
            "same_workspace": sum(r["same_workspace"] for r in out)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--click-after", type=float, default=0.5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = measure(args.rounds, args.click_after)
    print(json.dumps(res) if args.json else
          f"tab drawn again {res['drawn_s_median']} s after the kill (median of {len(res['rounds'])}: "
          f"{[r['drawn_s'] for r in res['rounds']]}), in its own workspace {res['same_workspace']} of "
          f"{len(res['rounds'])} times")
    return 0


if __name__ == "__main__":
    sys.exit(main())
