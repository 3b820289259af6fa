"""``python -m bench.experiments.browser_train``: training speed on the Train page in a real chromium vs headless.

In one go, on this machine, with the app's default configuration (built-in corpus, ``BertConfig()``,
``TrainConfig()``, 1 torch thread, ``OMP_WAIT_POLICY=PASSIVE``):

1. **headless**: a fresh process runs ``Trainer.step()`` for ``--seconds`` and reports steps/s after a warm-up;
2. **browser**: its own ``streamlit run app.py`` (bench.harness) and Debian's chromium at 1400x900 open
   ``/train`` and press Start; for ``--seconds`` the bench reads the step counter of the page's progress bar
   and polls, every 100 ms, how many points the live loss chart holds (inside the component's iframe), so it
   measures steps/s *and* how often the visible charts really changed; it also checks that progress, both
   charts, the probe table and Stop are inside the 1400x900 viewport without scrolling;
3. **headless** again, so drift in the machine's load hits both sides; the headline ratio is browser steps/s
   over the mean of the two headless blocks.

No timing is asserted: the result is printed (``--json`` for one JSON object) and copied into docs/BENCH.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import CHROMIUM, CHROMIUM_ARGS, REPO, AppServer

VIEWPORT = {"width": 1400, "height": 900}
_HEADLESS = r"""
import os, sys, time, json
import bertcore  # noqa: F401,E402 - sets OMP_WAIT_POLICY before torch is imported
import torch
torch.set_num_threads(1)
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.data.tokenization import WordTokenizer
from bertcore.analysis.skills import SkillSuite
from bertcore.training.trainer import Trainer
from bertcore.analysis.records import TrainingRecords
seconds, warm = float(sys.argv[1]), int(sys.argv[2])
corpus = builtin_corpus()
tok = WordTokenizer.build(corpus.texts())
skills = SkillSuite.for_run(corpus, tok, TrainConfig().max_seq_len)  # as the app's runs score them
tr = Trainer(BertConfig(), TrainConfig(), corpus, tokenizer=tok)
TrainingRecords.attach(tr, "default", skills)
for _ in range(warm):
    tr.step()
t0, n = time.perf_counter(), 0
while time.perf_counter() - t0 < seconds and not tr.done:
    tr.step()
    n += 1
print(json.dumps({"steps": n, "seconds": time.perf_counter() - t0}))
"""


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def headless(seconds: float, warm: int = 30) -> dict:
    """Steps/s of a headless Trainer at the app defaults (skills scored at every evaluation, as in the app) in a
    fresh process (1 thread)."""
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    out = subprocess.run([sys.executable, "-c", _HEADLESS, str(seconds), str(warm)], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["steps_per_s"] = r["steps"] / r["seconds"]
    r["load"] = _load()
    return r


_STEP_RE = re.compile(r"step (\d+)/(\d+)")
_POINTS_JS = "() => { const d = document.getElementById('loss'); return d && d.data ? d.data[0].x.length : -1; }"


def _step(page) -> int:
    """The step counter of the Train page's progress bar (-1 while it is not drawn)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        txt = page.locator('[data-testid="stMain"] [data-testid="stProgress"]').first.inner_text(timeout=2000)
    except PlaywrightTimeout:
        return -1
    m = _STEP_RE.search(txt)
    return int(m.group(1)) if m else -1


def _in_view(page, locator) -> bool:
    box = locator.bounding_box()
    return bool(box) and box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"] and box["x"] >= 0 \
        and box["x"] + box["width"] <= VIEWPORT["width"]


def browser(seconds: float, warm_steps: int = 30, screenshot: str | None = None) -> dict:
    from playwright.sync_api import sync_playwright

    log = Path(tempfile.gettempdir()) / "bench-browser-train.log"
    with AppServer(log) as srv, sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = b.new_page(viewport=VIEWPORT)
            page.goto(srv.url + "/train")
            start = page.locator(".st-key-train_start button")
            start.wait_for(timeout=180_000)
            page.wait_for_timeout(1500)
            start.click()
            frame = page.frame_locator(".st-key-train_live iframe").first
            t_wait = time.perf_counter()
            while _step(page) < warm_steps:
                if time.perf_counter() - t_wait > 300:
                    raise RuntimeError("training did not reach the warm-up steps in 300 s")
                page.wait_for_timeout(250)
            iframe = page.locator(".st-key-train_live iframe").first
            handle = iframe.element_handle().content_frame()
            s0, t0 = _step(page), time.perf_counter()
            changes, last, samples = [], handle.evaluate(_POINTS_JS), 0
            while time.perf_counter() - t0 < seconds:
                page.wait_for_timeout(100)
                n = handle.evaluate(_POINTS_JS)
                samples += 1
                if n != last:
                    changes.append(time.perf_counter())
                    last = n
            s1, t1 = _step(page), time.perf_counter()
            gaps = [b_ - a for a, b_ in zip(changes, changes[1:])]
            view = {name: _in_view(page, loc) for name, loc in {
                "progress": page.locator('[data-testid="stMain"] [data-testid="stProgress"]').first,
                "stop": page.locator(".st-key-train_stop button"),
                "loss_chart": frame.locator("#loss"), "accuracy_chart": frame.locator("#acc"),
                "skills_chart": frame.locator("#skills"),
                "probe_table": frame.locator("#tablewrap")}.items()}  # its scroll box: the table itself grows
            if screenshot:
                page.screenshot(path=screenshot)
            page.locator(".st-key-train_stop button").click()
            page.wait_for_timeout(1000)
        finally:
            b.close()
    return {"steps": s1 - s0, "seconds": t1 - t0, "steps_per_s": (s1 - s0) / (t1 - t0),
            "chart_updates": len(changes), "chart_update_gap_s_median": statistics.median(gaps) if gaps else None,
            "chart_update_gap_s_max": max(gaps) if gaps else None, "polls": samples, "in_view_1400x900": view,
            "load": _load()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.browser_train", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=25.0, help="length of each measured block (default 25)")
    ap.add_argument("--screenshot", help="save a 1400x900 screenshot of the page mid-training here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    r = {"load_start": _load()}
    print("headless ...", file=sys.stderr, flush=True)
    r["headless_before"] = headless(args.seconds)
    print("browser ...", file=sys.stderr, flush=True)
    r["browser"] = browser(args.seconds, screenshot=args.screenshot)
    print("headless again ...", file=sys.stderr, flush=True)
    r["headless_after"] = headless(args.seconds)
    base = (r["headless_before"]["steps_per_s"] + r["headless_after"]["steps_per_s"]) / 2
    r["headless_steps_per_s"] = base
    r["ratio"] = r["browser"]["steps_per_s"] / base
    r["load_end"] = _load()
    if args.json:
        print(json.dumps(r))
        return 0
    bw = r["browser"]
    print(f"headless: {r['headless_before']['steps_per_s']:.2f} then {r['headless_after']['steps_per_s']:.2f} steps/s "
          f"(mean {base:.2f})")
    print(f"browser (Train page open, charts visible, chromium 1400x900): {bw['steps_per_s']:.2f} steps/s "
          f"({bw['steps']} steps in {bw['seconds']:.1f} s)")
    print(f"ratio browser / headless: {r['ratio']:.1%}")
    gap = bw["chart_update_gap_s_median"]
    print(f"live chart changed {bw['chart_updates']} times in {bw['seconds']:.0f} s (median gap "
          f"{gap if gap is None else round(gap, 2)} s, max {bw['chart_update_gap_s_max'] and round(bw['chart_update_gap_s_max'], 2)} s)")
    print(f"in view at 1400x900 without scrolling: {bw['in_view_1400x900']}")
    print(f"load average: start {r['load_start']}, end {r['load_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
