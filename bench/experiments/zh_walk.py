"""``python -m bench.experiments.zh_walk``: open every page with ``?lang=zh`` in chromium and list the visible English
sentences. The visible text of the main area and the sidebar is read with the code, formulas,
inputs and chart data left out (chart titles, axis titles, legends and annotations are read); a "sentence" is three or more English words in a row (see ``english_runs``). Model
names and the CLI's own words are allowed (``ALLOWED``). Also used by tests/test_browser_zh.py.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

PAGES = ["", "data_tokens", "masking_nsp", "positional_encoding", "forward", "train", "compare", "lab", "finetune",
         "attention", "predict", "embeddings", "probes", "lens_patching", "features"]

# The visible text, without what is not prose of the app: code, KaTeX, inputs, plotly charts, dataframes (drawn on
# a canvas), the tokens a model reads (they are data, in any language).
VISIBLE = """() => {
  const skip = 'code, pre, .katex, .katex-display, input, textarea, .js-plotly-plot, svg, canvas, iframe, ' +
               '[data-testid="stDataFrame"], [data-testid="stTable"], [data-testid="stJson"], .tok, kbd';
  const roots = [document.querySelector('[data-testid="stMain"]'), document.querySelector('[data-testid="stSidebar"]')];
  const out = [];
  for (const root of roots) {
    if (!root) continue;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    let n;
    while ((n = walker.nextNode())) {
      const el = n.parentElement;
      if (!el || el.closest(skip)) continue;
      const st = getComputedStyle(el);
      if (st.display === 'none' || st.visibility === 'hidden') continue;
      const t = n.textContent.trim();
      if (t) out.push(t);
    }
  }
  return out;
}"""

# The words plotly draws in the page's charts: titles, axis titles, legend entries, annotations (not tick labels,
# which are data: tokens, numbers).
CHART_TEXT = """() => Array.from(document.querySelectorAll(
    '[data-testid="stMain"] .js-plotly-plot .gtitle, [data-testid="stMain"] .js-plotly-plot .g-xtitle, ' +
    '[data-testid="stMain"] .js-plotly-plot .g-ytitle, [data-testid="stMain"] .js-plotly-plot .legendtext, ' +
    '[data-testid="stMain"] .js-plotly-plot .annotation-text, [data-testid="stMain"] .js-plotly-plot .cbtitle'))
  .map(el => el.textContent.trim()).filter(t => t)"""

ALLOWED = re.compile(r"all-MiniLM-L6-v2|BERT-pytorch|Annotated Transformer|original BERT|blog BertModel|"
                     r"built-in|Hewitt & Liang|Clark et al\.|Michel et al\.|Vaswani et al\.|Devlin et al\.|"
                     r"et al\.|Jain & Wallace|[A-Z][a-z]+ et al", re.I)
WORDS = re.compile(r"(?<![\w\[/.-])[A-Za-z][a-z']+(?:[ ,]+[A-Za-z][a-z']+){2,}")


def english_runs(texts: list[str]) -> list[str]:
    """Runs of three or more English words (model names and citations removed first)."""
    found = []
    for t in texts:
        t = ALLOWED.sub(" ", t)
        found += [m.group(0) for m in WORDS.finditer(t)]
    return found


def walk(url: str, page, shots: Path | None = None) -> dict[str, list[str]]:
    """Every page in ``PAGES``, read once it shows all of its first run (``bench.harness.SETTLED``)."""
    from bench.harness import LOAD, SETTLED

    result = {}
    for p in PAGES:
        page.goto(f"{url}/{p}?lang=zh")
        page.wait_for_function(SETTLED, timeout=LOAD)
        if shots is not None:
            page.screenshot(path=str(shots / f"zh-{p or 'overview'}.png"), full_page=True)
        errors = page.locator('[data-testid="stException"]').count()
        result[p or "overview"] = (english_runs(page.evaluate(VISIBLE)) + english_runs(page.evaluate(CHART_TEXT)) +
                                   (["<exception>"] * errors))
    return result


def main(argv: list[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright

    from bench.harness import CHROMIUM, CHROMIUM_ARGS, AppServer, apply_budgets

    ap = argparse.ArgumentParser(prog="python -m bench.experiments.zh_walk", description=__doc__.split("\n")[0])
    ap.add_argument("--shots", help="a folder for full-page screenshots")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    shots = Path(args.shots) if args.shots else None
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
    server = AppServer().start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            apply_budgets(page)
            result = walk(server.url, page, shots)
            browser.close()
    finally:
        server.stop()
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        for p, runs in result.items():
            print(f"{p}: {len(runs)} English run(s)")
            for r in runs[:60]:
                print(f"    {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
