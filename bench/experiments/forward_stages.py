"""``python -m bench.experiments.forward_stages [--rounds N] [--json]``: the "Inside the model" page's time per stage in
chromium (1400x900), against the Attention page's first draw measured side by side on the same server.

Each round, in a new tab (a new session) each time:

* ``attention``: ``/attention`` opened, until its all-heads grid is drawn (the page's first draw: the model's
  forward pass, the 8-head grid, the sidebar);
* ``forward``: ``/forward?fw_a=the cat sat on the mat`` opened, then Next pressed through every stage of the
  embeddings and layer 1 (22 stages; stages 6 and 17 only say "not in this model" for the default post-norm
  model), each timed from the click until the new stage's heading is shown and its heat map is drawn.

The server is warmed first (both pages opened once: torch's import, the shared model, the corpus). Reported: the
median Attention first draw, the median and max seconds per stage, and their ratio. Numbers go to docs/BENCH.md;
nothing is asserted (tests/test_browser_forward.py checks the numbers themselves).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from urllib.parse import urlencode

from bench.harness import CHROMIUM, CHROMIUM_ARGS, AppServer

TEXT = "the cat sat on the mat"
MAIN = '[data-testid="stMain"]'
GRID = ".st-key-attn_grid .js-plotly-plot"
FIG = ".st-key-fw_stage_fig .js-plotly-plot"
DRAWN = "sel => { const el = document.querySelector(sel); return !!(el && el.data && el.data[0]); }"
META = f"() => {{ const el = document.querySelector('{FIG}'); return el && el.data && el.data[0] ? " \
       "el.layout.meta : null; }"
LOAD_MS = 180_000


def attention_first_draw(ctx, url: str) -> float:
    page = ctx.new_page()
    t0 = time.perf_counter()
    page.goto(f"{url}/attention")
    page.wait_for_function(DRAWN, arg=GRID, timeout=LOAD_MS)
    took = time.perf_counter() - t0
    page.close()
    return took


def forward_stages(ctx, url: str, ids: list[str], absent: set[str]) -> list[float]:
    """Seconds from Next to the new stage drawn, for stages 2 .. len(ids)."""
    page = ctx.new_page()
    page.goto(f"{url}/forward?{urlencode({'fw_a': TEXT})}")
    page.wait_for_function(DRAWN, arg=FIG, timeout=LOAD_MS)
    times = []
    for i in range(2, len(ids) + 1):
        t0 = time.perf_counter()
        page.locator(".st-key-fw_next button").click()
        page.locator(f"{MAIN} h4").filter(has_text=f"Stage {i} of").first.wait_for(timeout=LOAD_MS)
        if ids[i - 1] not in absent:  # the heat map of this stage (layout.meta "<stage> <layer> <head> <token>")
            page.wait_for_function(f"s => ({META})() === s", arg=f"{ids[i - 1]} 0 0 1", timeout=LOAD_MS)
        times.append(time.perf_counter() - t0)
    page.close()
    return times


def run(rounds: int) -> dict:
    from playwright.sync_api import sync_playwright

    from explorer.figures.forward_stages import IDS

    ids = IDS[:IDS.index("next_layer") + 1]
    absent = {"attn_norm_before", "ffn_norm_before"}  # the default model is post-norm
    with AppServer() as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        attention_first_draw(ctx, server.url)  # warm-up: torch, the shared model, the corpus
        forward_stages(ctx, server.url, ids[:3], absent)
        att, per = [], []
        for _ in range(rounds):  # interleaved, so both see the same machine
            att.append(attention_first_draw(ctx, server.url))
            per.append(forward_stages(ctx, server.url, ids, absent))
        browser.close()
    stage_times = [t for r in per for t in r]
    by_stage = {ids[i + 1]: round(statistics.median(r[i] for r in per), 3) for i in range(len(ids) - 1)}
    a, s = statistics.median(att), statistics.median(stage_times)
    return {"rounds": rounds, "attention_first_draw_s": round(a, 3), "attention_all_s": [round(x, 3) for x in att],
            "stage_median_s": round(s, 3), "stage_max_s": round(max(stage_times), 3),
            "stage_over_attention": round(s / a, 3), "by_stage_median_s": by_stage}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    r = run(args.rounds)
    if args.json:
        print(json.dumps(r, indent=1))
    else:
        print(f"Attention first draw: median {r['attention_first_draw_s']} s {r['attention_all_s']}")
        print(f"Inside the model, Next -> stage drawn: median {r['stage_median_s']} s, max {r['stage_max_s']} s, "
              f"{r['stage_over_attention']}x the Attention page's first draw")
        for k, v in r["by_stage_median_s"].items():
            print(f"  {k:18s} {v:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
