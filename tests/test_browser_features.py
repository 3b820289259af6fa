"""The Features page in chromium at 1400x900: train an SAE (the progress bar, then its quality), open a labelled
feature, steer it, press F5 (the SAE is on disk, the feature and the strength in the URL: the same card comes back),
then the same in 简体中文 with another SAE. Fixtures (app server, chromium) are in conftest.py."""
from __future__ import annotations

import json
import re

from browser_marks import BROWSER, LOAD, MAIN, TRAIN
from playwright.sync_api import Page, expect

from bertcore.config import BertConfig, TrainConfig
from bertcore.training import runs
from bertcore.launch import service

pytestmark = BROWSER
WS = "featuresBrowserWorkspace01"


def _labelled(run_dir, name: str) -> tuple[int, str]:
    table = json.loads((run_dir / "saes" / name / "features.json").read_text())
    ft = max((f for f in table["features"] if f["label"]), key=lambda f: f["auroc"])
    return ft["id"], ft["label"]


def _train(page: Page, button: str, metric: str) -> None:
    page.get_by_role("button", name=button).click()
    expect(page.locator('[data-testid="stProgress"]').first).to_be_visible(timeout=LOAD)
    expect(page.locator('[data-testid="stMetric"]').filter(has_text=metric).first).to_be_visible(timeout=TRAIN)


def _open_and_steer(page: Page, feature: int, heading: str, adds: str) -> None:
    box = page.locator(".st-key-ft_feature_box input")
    box.fill(str(feature))
    box.press("Enter")
    expect(page.locator(f"{MAIN} h3").filter(has_text=heading).first).to_be_visible(timeout=LOAD)
    slider = page.locator('.st-key-ft_strength input[type="range"]')
    slider.focus()
    slider.press("ArrowRight")  # 2.0 -> 2.5
    expect(page.locator(f"{MAIN} [data-testid='stCaptionContainer']").filter(has_text=adds).first).to_be_visible(
        timeout=LOAD)


def _no_error(page: Page) -> None:
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()[:2000]
    assert page.locator('[data-testid="stAlert"]').filter(has_text=re.compile("went wrong|出错")).count() == 0


def test_train_open_steer_reload_in_english_and_chinese(page: Page, app_server, monkeypatch, tmp_path):
    monkeypatch.setenv("BERTCORE_RUNS_DIR", str(app_server.runs_dir))  # the server's own runs folder
    tc = TrainConfig(steps=150, batch_size=128, eval_every=50, seed=0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    run = service.train(service.RunSpec(cfg, tc, name="features"), parent=runs.workspace_dir(WS)).run_dir
    runs.write_workspace(WS, active=f"run:{run.name}")
    page.set_viewport_size({"width": 1400, "height": 900})

    page.goto(f"{app_server.url}/features?ws={WS}")
    expect(page.locator(f"{MAIN} h1").filter(has_text="Features").first).to_be_visible(timeout=LOAD)
    _train(page, "Train this SAE (about 30 s)", "variance explained")
    f, label = _labelled(run, "layer1-residual-x8-k8-seed0")
    _open_and_steer(page, f, f"Feature {f}: ", "Adds 2.5 ×")
    expect(page.get_by_text("after steering").first).to_be_visible()
    _no_error(page)
    page.screenshot(path=str(tmp_path / "features_en.png"))
    page.reload()  # F5: a new session; the SAE is on disk, the feature and strength in the URL
    expect(page.locator(f"{MAIN} h3").filter(has_text=f"Feature {f}: ").first).to_be_visible(timeout=LOAD)
    expect(page.locator(f"{MAIN} [data-testid='stCaptionContainer']").filter(has_text="Adds 2.5 ×").first
           ).to_be_visible(timeout=LOAD)
    assert f"feature={f}" in page.url and "ft_strength=2.5" in page.url
    _no_error(page)

    page.goto(f"{app_server.url}/features?ws={WS}&lang=zh&ft_k=4&ft_strength=2.0")
    expect(page.locator(f"{MAIN} h1").filter(has_text="特征").first).to_be_visible(timeout=LOAD)
    _train(page, "训练这个 SAE（约 30 秒）", "解释方差比例")
    f, label = _labelled(run, "layer1-residual-x8-k4-seed0")
    _open_and_steer(page, f, f"特征 {f}：", "W_dec[")
    expect(page.get_by_text("引导之后").first).to_be_visible()
    _no_error(page)
    page.reload()
    expect(page.locator(f"{MAIN} h3").filter(has_text=f"特征 {f}：").first).to_be_visible(timeout=LOAD)
    expect(page.get_by_text("引导之后").first).to_be_visible(timeout=LOAD)
    assert "ft_k=4" in page.url and "lang=zh" in page.url
    _no_error(page)
    page.screenshot(path=str(tmp_path / "features_zh.png"))
