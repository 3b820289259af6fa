"""The app part of ``python -m bench``: what a user of the explorer feels.

* ``cold_start_s``: from ``streamlit run app.py`` to the first page's title drawn in headless chromium
  (the browser is launched before the clock starts).
* ``attention_rerun_ms``: server-side time of one rerun of the Attention page after a widget change,
  measured with streamlit's AppTest (the layer selectbox of the big head view switched back and forth).
* ``training_in_app_frac``: the app's background runner (``explorer.launch.training_run.TrainingRun``) with a thread
  that does what the Train page's fragment does on every poll (``snapshot()`` + the four figures serialized
  to JSON), as a share of headless ``Trainer`` steps/s on the same config (defaults, 1 thread).

It drives streamlit and chromium, so it lives in the bench package, outside the library.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cold_start() -> dict:
    if not (ROOT / "app.py").exists():
        return {"skipped": "app.py not found next to bertcore/"}
    from bench.harness import CHROMIUM

    if not Path(CHROMIUM).exists():
        return {"skipped": f"chromium not found at {CHROMIUM}"}
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"skipped": "playwright is not installed"}
    from bench.harness import CHROMIUM_ARGS, AppServer

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        server = AppServer()
        t0 = time.perf_counter()  # the clock starts at `streamlit run` (the browser is already up)
        try:
            try:
                server.start(timeout=60, poll=0.05)
            except RuntimeError as e:
                return {"skipped": f"streamlit did not start: {str(e)[:200]}"}
            health = server.healthy_after
            page.goto(server.url + "/", timeout=60_000)
            page.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
            page.wait_for_selector('[data-testid="stMain"] h1', timeout=60_000)
            first = time.perf_counter() - t0
        finally:
            browser.close()
            server.stop()
    return {"cold_start_s": first, "server_healthy_s": health}


def attention_rerun(reps: int = 8) -> dict:
    try:
        from streamlit.testing.v1 import AppTest
    except ImportError:
        return {"skipped": "streamlit is not installed"}
    cwd = os.getcwd()
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.run()
        at.switch_page("app_pages/attention.py").run()
        boxes = [s for s in at.selectbox if s.label == "Layer"]
        if not boxes or len(boxes[0].options) < 2:
            return {"skipped": "the Attention page has no Layer selectbox with two layers"}
        box_key = boxes[0].key
        ts = []
        for i in range(reps):
            box = next(s for s in at.selectbox if s.key == box_key)
            box.set_value(box.options[(i + 1) % 2] if isinstance(box.options[0], int) else (i + 1) % 2)
            t0 = time.perf_counter()
            at.run()
            ts.append((time.perf_counter() - t0) * 1e3)
        errors = [e.value for e in at.exception]
    finally:
        os.chdir(cwd)
    out = {"attention_rerun_ms_p50": statistics.median(ts), "attention_rerun_ms_max": max(ts), "reps": reps}
    if errors:
        out["errors"] = errors[:3]
    return out


def in_app_training(seconds: float = 12.0) -> dict:
    try:
        from explorer.figures import train as ft
        from bertcore.launch.service import RunSpec
        from explorer.launch import training_run
    except ImportError as e:
        return {"skipped": f"explorer is not importable: {e}"}
    import torch

    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.training.trainer import Trainer

    corpus = builtin_corpus()
    tc = TrainConfig(steps=100_000)

    def headless() -> float:
        tr = Trainer(BertConfig(), tc, corpus)
        before = torch.get_num_threads()
        torch.set_num_threads(tc.num_threads)
        try:
            for _ in range(5):
                tr.step()
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                tr.step()
                n += 1
            return n / (time.perf_counter() - t0)
        finally:
            torch.set_num_threads(before)

    def in_app() -> tuple[float, float]:
        run = training_run.TrainingRun([RunSpec(BertConfig(), tc, corpus=corpus, name="bench")], abandon_after=60).start()
        poll_ms = []
        while run.snapshot().total_done < 5:
            time.sleep(0.05)
        n0, t0 = run.snapshot().total_done, time.perf_counter()
        while time.perf_counter() - t0 < seconds:  # what the Train page's fragment does every 0.5 s
            p0 = time.perf_counter()
            s = run.snapshot()
            h = s.histories[0].frame()
            if len(h):
                for f in (ft.loss_figure(h), ft.accuracy_figure(h), ft.lr_figure(h, height=240),
                          ft.throughput_figure(h, height=240)):
                    f.to_json()
            poll_ms.append((time.perf_counter() - p0) * 1e3)
            time.sleep(max(0.0, 0.5 - (time.perf_counter() - p0)))
        n1, t1 = run.snapshot().total_done, time.perf_counter()
        run.stop()
        run.join(30)
        return (n1 - n0) / (t1 - t0), statistics.median(poll_ms) if poll_ms else float("nan")

    h1 = headless()
    app_sps, poll = in_app()
    h2 = headless()
    head = (h1 + h2) / 2
    return {"training_headless_steps_s": head, "training_in_app_steps_s": app_sps,
            "training_in_app_frac": app_sps / head, "ui_poll_work_ms_p50": poll}


def bench_app() -> dict:
    if shutil.which("streamlit") is None and not _has("streamlit"):
        return {"skipped": "streamlit is not installed"}
    out: dict = {}
    for name, f in (("cold_start", cold_start), ("attention", attention_rerun), ("training", in_app_training)):
        try:
            r = f()
        except Exception as e:  # noqa: BLE001 - report and go on with the other parts
            r = {"skipped": f"{name} failed: {type(e).__name__}: {e}"}
        for k, v in r.items():
            out[f"{name}_skipped" if k == "skipped" else k] = v
    return out




def _has(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None
