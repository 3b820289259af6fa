"""Make the screenshots of the "Inside the model" page (assets/forward-*.png) with the browser harness.

    python scripts/forward_screenshots.py [--out assets] [--steps 600]

Trains the default model (original BERT, tiny, the built-in corpus: what "Train the default model" trains) into a
fresh workspace, starts its own headless `streamlit run app.py` on it and opens three stages in Debian's chromium at
1400x900: the softmax of layer 1 (English), the MLM head at a [MASK] (English) and the attention sublayer's
residual and LayerNorm (简体中文). Each view is scrolled to its stage. Every request outside 127.0.0.1 is aborted.
The PNGs are downscaled to 900 px wide.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlencode

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.harness import CHROMIUM, CHROMIUM_ARGS, AppServer  # noqa: E402
from scripts.screenshots import shrink  # noqa: E402

OUTSIDE = re.compile(r"^(?!(https?|wss?)://(127\.0\.0\.1|localhost)[:/]).*")
WS = "forwardShotWorkspace01234"
SHOTS = {  # file -> the page's URL parameters
    "forward-softmax.png": dict(fw_a="the cat eats the cheese in the kitchen .", fw_stage="softmax", fw_head=1,
                                fw_token=2),
    "forward-mlm.png": dict(fw_a="the cat eats the [MASK] in the kitchen .", fw_stage="mlm", fw_token=5),
    "forward-zh-layernorm.png": dict(fw_a="the cat eats the cheese in the kitchen .", fw_stage="attn_add_norm",
                                     fw_token=2, lang="zh"),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "assets"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--run", help="a run folder of the default model to show instead of training one")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    from bertcore.config import BertConfig, TrainConfig, measure_cadence
    from bertcore.training import runs
    from bertcore.launch import service

    runs_dir = Path(tempfile.mkdtemp(prefix="fw-shot-"))
    os.environ["BERTCORE_RUNS_DIR"] = str(runs_dir)
    if args.run:
        run_dir = runs.workspace_dir(WS, create=True) / Path(args.run).name
        shutil.copytree(args.run, run_dir)
    else:
        tc = TrainConfig(steps=args.steps, **measure_cadence(args.steps))
        run_dir = service.train(service.RunSpec(BertConfig(), tc, name="default model", preset="original BERT"),
                                parent=runs.workspace_dir(WS)).run_dir
    runs.write_workspace(WS, active=f"run:{run_dir.name}")
    with AppServer(runs_dir / "server.log", runs_dir=runs_dir) as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.route(OUTSIDE, lambda route: route.abort())
        page.set_default_timeout(180_000)
        for name, q in SHOTS.items():
            page.goto(f"{server.url}/forward?{urlencode({'ws': WS, **q})}")
            page.locator(".st-key-fw_next").wait_for()
            page.locator('[data-testid="stMain"] h4').first.wait_for()
            page.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stMain\"] .js-plotly-plot')]"
                                   ".every(el => el.data && el.data[0]) && "
                                   "document.querySelectorAll('[data-testid=\"stMain\"] .js-plotly-plot').length >= 2")
            page.wait_for_timeout(3000)
            page.evaluate("() => document.querySelector('[data-testid=\"stMain\"] h4').scrollIntoView()")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out / name))
            shrink(out / name)
            print(f"wrote {out / name} ({(out / name).stat().st_size // 1024} KB)")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
