"""``python -m bench.experiments.long_inputs [--reps N] [--json]``: the Attention page on a 512-token input.

With the packaged all-MiniLM-L6-v2 (6 layers x 12 heads, 512 positions) and a text that fills all 512 positions:

* the parts, in-process: ``inspect_pair``, attention rollout, per-head statistics, the pooled all-heads grid and
  the full 512 x 512 one-head heatmap (build + plotly JSON, with the JSON size the browser receives);
* ``page_s``: the server-side time of one Attention page run after the text changed (a new input: everything is
  recomputed), per tab, with streamlit's AppTest (app.py included). Median and max of ``--reps`` runs.
* ``browser_s``: in headless chromium, from Ctrl+Enter in sentence A to the pooled grid drawn (median of reps).

Numbers go to docs/BENCH.md ("Long inputs"); nothing here is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABS = ("All heads", "One head", "Rollout", "Per-head statistics")
SENTENCE = "the quick brown fox jumps over the lazy dog near the river bank ."


def long_text(start: int = 0, n_words: int = 600) -> str:
    """About 600 words (more than 512 tokens) starting at word ``start`` of the sentence: a different input each."""
    words = SENTENCE.split()
    return " ".join(words[(start + i) % len(words)] for i in range(n_words))


def _ms(f, reps: int) -> tuple[float, object]:
    ts, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = f()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts), out


def parts(bundle, reps: int) -> dict:
    from bertcore.analysis.explain import attention_rollout
    from bertcore.analysis.inference import inspect_pair
    from explorer.figures.attention_stats import head_stats
    from explorer.figures.inspect import attention_grid_figure, grid_cell_size, head_heatmap_figure, pooled_attention

    model, tok = bundle.model, bundle.tokenizer
    text = long_text()
    r: dict = {}
    r["inspect_ms"], insp = _ms(lambda: inspect_pair(model, tok, text, None, max_len=512), reps)
    A, toks = insp.attentions, list(insp.tokens)
    L, H, T, _ = A.shape
    r.update(tokens=T, layers=L, heads=H)
    r["rollout_ms"], _ = _ms(lambda: attention_rollout(A), reps)
    r["stats_ms"], _ = _ms(lambda: head_stats(A, toks), reps)

    def grid():
        P, labels = pooled_attention(A, toks, grid_cell_size(L, H))
        return attention_grid_figure(P, toks, labels=labels).to_json()

    r["grid_ms"], g = _ms(grid, reps)
    r["grid_json_kb"] = len(g) / 1024
    r["grid_cells_per_side"] = grid_cell_size(L, H)
    r["head_fig_ms"], h = _ms(lambda: head_heatmap_figure(A[0, 0], toks, title="layer 1, head 1").to_json(), reps)
    r["head_json_kb"] = len(h) / 1024
    return r


def page(active, reps: int) -> dict:
    from streamlit.testing.v1 import AppTest

    from explorer.session import workspace

    out: dict = {}
    for tab in TABS:
        ts, errors = [], []
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
        at.session_state[workspace.MODELS_KEY] = {active.label: active}
        at.session_state[workspace.ACTIVE_KEY] = active.label
        at.session_state["attn_tab"] = tab
        at.switch_page("app_pages/attention.py").run()
        at.toggle(key="attn_use_b").set_value(False).run()
        for i in range(reps + 1):
            at.text_area(key="attn_a").input(long_text(i))  # a new input every time: nothing cached
            t0 = time.perf_counter()
            at.run()
            if i:  # the first one warms the page's imports
                ts.append(time.perf_counter() - t0)
            errors += [e.value for e in at.exception]
        out[tab] = {"p50": statistics.median(ts), "max": max(ts)}
        if errors:
            out[tab]["errors"] = errors[:2]
    return out


def browser(reps: int) -> dict:
    from playwright.sync_api import sync_playwright

    from bench.harness import CHROMIUM, CHROMIUM_ARGS, AppServer

    if not Path(CHROMIUM).exists():
        return {"skipped": f"no chromium at {CHROMIUM}"}
    grid = ".st-key-attn_grid .js-plotly-plot"
    ts = []
    with AppServer() as server, sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            p = b.new_page(viewport={"width": 1280, "height": 900})
            p.set_default_timeout(180_000)
            p.goto(server.url + "/attention?attn_use_b=false")
            p.wait_for_selector(grid)
            p.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').first.click()
            p.get_by_role("option", name="all-MiniLM-L6-v2").first.click()
            p.wait_for_function("() => document.body.innerText.includes('6 layers × 12 heads')")
            area = p.locator(".st-key-attn_a textarea").first
            for i in range(reps + 1):
                p.wait_for_selector(grid)
                area.fill(long_text(i + 1))
                p.evaluate(f"() => {{ const el = document.querySelector('{grid}'); window._old = el && el.data; }}")
                t0 = time.perf_counter()
                area.press("Control+Enter")
                p.wait_for_function(  # a new grid (the mosaic of this input's 72 maps) is drawn
                    f"() => {{ const el = document.querySelector('{grid}'); "
                    "return el && el.data && el.data !== window._old && el._fullLayout "
                    "&& el.layout.meta && el.layout.meta.grid.heads === 12; }")
                if i:
                    ts.append(time.perf_counter() - t0)
        finally:
            b.close()
    return {"p50": statistics.median(ts), "max": max(ts), "reps": reps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.long_inputs", description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    from bertcore.io.hf_interop import import_hf, packaged_minilm_dir
    from explorer.session.workspace import ActiveModel

    d = packaged_minilm_dir()
    if d is None:
        print(json.dumps({"skipped": "all-MiniLM-L6-v2 is not installed"}))
        return 0
    bundle = import_hf(d)
    r = {"load_start": os.getloadavg()}
    print("long inputs: parts ...", file=sys.stderr)
    r["parts"] = parts(bundle, args.reps)
    print("long inputs: page (AppTest) ...", file=sys.stderr)
    r["page_s"] = page(ActiveModel(bundle, "all-MiniLM-L6-v2 (pretrained)", "pretrained", True), args.reps)
    if not args.no_browser:
        print("long inputs: chromium ...", file=sys.stderr)
        try:
            r["browser_s"] = browser(args.reps)
        except Exception as e:  # noqa: BLE001 - report it with the other numbers
            r["browser_s"] = {"skipped": f"{type(e).__name__}: {str(e)[:300]}"}
    r["load_end"] = os.getloadavg()
    if args.json:
        print(json.dumps(r, default=float))
        return 0
    p = r["parts"]
    print(f"MiniLM, {p['tokens']} tokens, {p['layers']} x {p['heads']} heads; load {r['load_start']} -> {r['load_end']}")
    for k in ("inspect_ms", "rollout_ms", "stats_ms", "grid_ms", "head_fig_ms"):
        print(f"  {k:<14} {p[k]:8.1f}")
    print(f"  grid JSON {p['grid_json_kb']:.0f} KB ({p['grid_cells_per_side']} cells per side), "
          f"one-head JSON {p['head_json_kb']:.0f} KB")
    for tab, v in r["page_s"].items():
        print(f"  page run, tab {tab!r}: p50 {v['p50']:.2f} s, max {v['max']:.2f} s")
    if "browser_s" in r:  # p50/max seconds, or why it was skipped
        print(f"  chromium, Ctrl+Enter to grid drawn: {r['browser_s']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
