"""The Fine-tune page in chromium: upload a small checkpoint, fine-tune it and its random-init twin side by
side (a fine-tune study: two training processes of the one study runner), watch both curves grow in the live chart
(explorer.livechart: plotly.js in a component iframe, extended in place), read the summary line, classify a typed
sentence with both, find the whole curves again after F5, and run the label sweep (a study of its own, kept in the
comparison's folder) to its 4 points."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from browser_marks import BROWSER, LOAD, MAIN, SIDEBAR, TRAIN, until, wait_idle
from playwright.sync_api import Page, expect
from test_browser import assert_offline, assert_page_ok, offline_page, plot  # noqa: F401 (offline_page: a fixture)

pytestmark = [*BROWSER, pytest.mark.long]  # a minute and more: started first (conftest.py)


def _small_checkpoint_zip(tmp_path) -> Path:
    from bertcore.io.checkpoint import untrained_bundle
    from explorer.session.uploads import checkpoint_zip_bytes

    b = untrained_bundle(seed=1, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    p = tmp_path / "small-bert.zip"
    p.write_bytes(checkpoint_zip_bytes(b))
    return p


def test_finetune_side_by_side(offline_page: Page, app_server, tmp_path):  # noqa: F811 (the fixture)
    page = offline_page
    page.goto(f"{app_server.url}/train")
    expect(page.locator(".st-key-train_upload input[type=file]")).to_be_attached(timeout=LOAD)
    page.locator(".st-key-train_upload input[type=file]").set_input_files(str(_small_checkpoint_zip(tmp_path)))
    page.locator(".st-key-train_load_upload button").click()
    expect(page.locator(SIDEBAR)).to_contain_text("uploaded: small-bert.zip", timeout=LOAD)

    page.locator(f'{SIDEBAR} [data-testid="stSidebarNav"] a').filter(has_text="Fine-tune").click()
    assert_page_ok(page, "Fine-tune", ".st-key-finetune_start button", model_label="uploaded: small-bert.zip")
    # 16 labels (the first notch) and 500 steps (the last): long enough to watch the curves grow
    for name, key, value in (("labelled examples", "Home", "16"), ("steps", "End", "500")):
        s = page.locator(f'{MAIN} input[type="range"][aria-label="{name}"]')
        s.focus()
        s.press(key)
        expect(s).to_have_attribute("aria-valuetext", value)
        wait_idle(page)
    page.locator(".st-key-finetune_start button").click()
    panel = page.frame_locator(".st-key-finetune_curves iframe").first
    acc = panel.locator("#ft_acc.js-plotly-plot, #ft_acc .js-plotly-plot").first
    loss = panel.locator("#ft_loss.js-plotly-plot, #ft_loss .js-plotly-plot").first
    expect(loss).to_be_visible(timeout=LOAD)
    points = "el => (el.data || []).reduce((n, t) => n + (t.x ? t.x.length : 0), 0)"
    progress = page.locator(f'{MAIN} [data-testid="stProgress"]').first
    seen = []

    def sample_until_finished() -> bool:  # the loss chart, sampled while it trains: it must grow
        text = progress.inner_text() if progress.count() else ""
        seen.append(loss.evaluate(points))
        return "finished" in text

    until(sample_until_finished, timeout=TRAIN, page=page, every=100)
    grew = [b for a, b in zip(seen, seen[1:]) if b > a]
    # (empty while the two training processes start, then growing while both train)
    assert len(grew) >= 2 and any(0 < n < 1000 for n in seen), f"the loss chart did not grow while training: {seen}"
    expect(page.locator(MAIN)).to_contain_text(re.compile(r"Pretraining \(.*\) (bought|cost) \d+\.\d points"),
                                               timeout=LOAD)
    expect(progress).to_contain_text("finished", timeout=TRAIN)
    until(lambda: loss.evaluate(points) == 1000, page=page)  # the last rows arrive with the rerun after the end
    assert loss.evaluate(points) == 1000  # 500 steps of each model
    n_acc = acc.evaluate(points)
    assert n_acc >= 2 * 15, n_acc  # both models, evaluated every steps // 15 steps
    names = acc.evaluate("el => el.data.map(t => t.name)")
    assert names == ["from pretrained weights", "from random init weights"]
    assert "chance" in acc.inner_text()

    expect(page.locator(plot("finetune_probs")).first).to_be_visible(timeout=LOAD)
    box = page.locator(".st-key-finetune_text_a input")
    box.fill("The cows eats hay.")
    box.press("Enter")
    wait_idle(page)
    # the rerun redraws the chart: plotly may be between purge and draw (no _fullData yet), so poll for it
    probs = page.locator(plot("finetune_probs")).first
    bars = until(lambda: probs.evaluate("el => el._fullData && el._fullData.length ? el._fullData.map(t => t.x) "
                                        ": null"), page=page)
    assert bars and len(bars) == 2 and all(abs(sum(x) - 1) < 1e-4 for x in bars), bars
    page.screenshot(path=str(tmp_path / "finetune.png"), full_page=True)
    summary = page.locator(MAIN).get_by_text(re.compile(r"Pretraining \(.*\) (bought|cost)")).first.inner_text()

    # F5 is a new session: the comparison was kept in the workspace and reopens (?ft= in the address bar)
    expect(page).to_have_url(re.compile(r"[?&]ft=[\w-]+"), timeout=LOAD)
    page.reload()
    expect(page.locator(MAIN)).to_contain_text(summary, timeout=LOAD)
    expect(page.locator(f'{MAIN} [data-testid="stProgress"]').first).to_contain_text("finished", timeout=LOAD)
    panel = page.frame_locator(".st-key-finetune_curves iframe").first
    acc = panel.locator("#ft_acc.js-plotly-plot, #ft_acc .js-plotly-plot").first
    loss = panel.locator("#ft_loss.js-plotly-plot, #ft_loss .js-plotly-plot").first
    expect(loss).to_be_visible(timeout=LOAD)
    until(lambda: loss.evaluate(points) == 1000, page=page)
    assert loss.evaluate(points) == 1000 and acc.evaluate(points) == n_acc  # the whole curves again
    expect(page.locator(plot("finetune_probs")).first).to_be_visible(timeout=LOAD)
    page.screenshot(path=str(tmp_path / "finetune-after-reload.png"), full_page=True)

    # the label sweep runs in the background and draws final accuracy against the number of labels (log x)
    page.locator(".st-key-finetune_sweep_start button").click()
    sweep = page.locator(plot("finetune_sweep")).first
    expect(sweep).to_be_visible(timeout=LOAD)
    got = None

    def swept() -> bool:
        nonlocal got
        got = sweep.evaluate("el => el._fullData && el.layout.xaxis.type === 'log' ? el._fullData.map(t => t.x) "
                             ": null")
        return bool(got and len(got) == 2 and len(got[0]) == 4)

    until(swept, timeout=TRAIN, page=page, every=500)
    assert got and [len(x) for x in got] == [4, 4] and got[0][:3] == [16, 64, 256], got
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()[:2000]
    assert_offline(page)
