"""The "Inside the model" page in chromium at 1400x900, in English and in 简体中文: a learner opens a link with
"the cat sat on the mat", presses Next through every stage of the default (untrained) model's embeddings and layer
0, and at each stage the heat map holds exactly the numbers ``python -m bertcore trace RUN "the cat sat on the mat"
--layer 0 --json`` prints for that model; Next at the layer's end moves on to layer 2; the slider reaches the MLM and
NSP heads; F5 and a deep link in a new tab keep the stage. The seconds from Next to the new numbers are printed (-s)
for docs/BENCH.md (bench/experiments/forward_stages.py measures them against the Attention page), not asserted."""
from __future__ import annotations

import contextlib
import io
import json
import statistics
import time
from urllib.parse import urlencode

import numpy as np
import pytest
from browser_marks import BROWSER, LOAD, MAIN, until
from conftest import plotly_array
from forward_oracle import expected
from playwright.sync_api import Page, expect

from bertcore.cli import main
from bertcore.io.checkpoint import save_checkpoint
from explorer.figures import forward_stages as FS
from explorer.session.workspace import shared_untrained_bundle

pytestmark = BROWSER
TEXT = "the cat sat on the mat"
FIG = ".st-key-fw_stage_fig .js-plotly-plot"
CHART = f"() => {{ const el = document.querySelector('{FIG}'); if (!el || !el.data || !el.data[0]) return null; " \
        "const d = el.data[0]; return {z: {dtype: d.z.dtype, bdata: d.z.bdata, shape: d.z.shape}, y: d.y, " \
        "shapes: (el.layout.shapes || []).map(s => [s.y0, s.y1]), meta: el.layout.meta}; }"
HEADING = {"en": "Stage {i} of 24", "zh": "第 {i} / 24 阶段"}
ABSENT = {"en": "normalizes after the sublayer", "zh": "在子层之后做归一化"}
WALK = FS.IDS[:FS.IDS.index("next_layer") + 1]  # the embeddings and one layer


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """`trace --json` of the app's default model (the shared untrained one, seed 0) for layers 0 and 1."""
    bundle = shared_untrained_bundle()
    run = tmp_path_factory.mktemp("default") / "ckpt"
    save_checkpoint(bundle, run)
    out = {}
    for layer in (0, 1):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["trace", str(run), TEXT, "--layer", str(layer), "--json"]) == 0
        out[layer] = json.loads(buf.getvalue())
    assert out[0]["tokens"] == ["[CLS]", "the", "cat", "[UNK]", "[UNK]", "the", "[UNK]", "[SEP]"]
    return bundle.model.config, out


def _heading(page: Page, lang: str, i: int):
    return page.locator(f"{MAIN} h4").filter(has_text=HEADING[lang].format(i=i)).first


def _numbers(page: Page, want: np.ndarray, token_row: int, meta: str, what: str) -> float:
    """Wait until the heat map of this stage (layout.meta: "<stage> <layer> <head> <token>"; two stages can hold the
    same numbers) holds ``want`` exactly (float32); return the seconds it took."""
    t0 = time.perf_counter()
    last = {}

    def shown():
        got = last["got"] = page.evaluate(CHART)
        if got is None or got["meta"] != meta:
            return False
        z = plotly_array(got["z"])
        return z.shape == want.shape and np.array_equal(z, want.astype(np.float32))

    if until(shown, LOAD, page=page, every=100):
        assert [token_row - 0.5, token_row + 0.5] in last["got"]["shapes"], what  # the chosen token's row outlined
        return time.perf_counter() - t0
    got = last.get("got")
    z = None if got is None else plotly_array(got["z"])
    assert got is not None and got["meta"] == meta, f"{what}: the heat map of {meta!r} was not drawn ({got and got['meta']})"
    raise AssertionError(f"{what}: the heat map shows {None if z is None else z.shape} values, not trace --json's "
                         f"{want.shape}" + ("" if z is None or z.shape != want.shape else
                                            f" (max difference {np.abs(z - want).max():.3g})"))


def _check(page, lang, cfg, js, stage, layer, head=0, token=1) -> float:
    i = FS.IDS.index(stage) + 1
    expect(_heading(page, lang, i)).to_be_visible(timeout=LOAD)
    want = expected(js, stage, cfg, layer, head)
    if want is None:  # a post-norm model has no LayerNorm before its sublayers: the page says so
        expect(page.locator(f"{MAIN} [data-testid='stAlert']").filter(has_text=ABSENT[lang]).first).to_be_visible()
        return 0.0
    return _numbers(page, want, token if want.shape[0] > 1 else 0, f"{stage} {layer} {head} {token}",
                    f"{lang} stage {i} {stage}")


def _no_exception(page: Page) -> None:
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()[:2000]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_learner_steps_through_every_stage(page: Page, app_server, traces, lang):
    cfg, js = traces
    page.set_viewport_size({"width": 1400, "height": 900})
    q = {"fw_a": TEXT, **({"lang": "zh"} if lang == "zh" else {})}
    page.goto(f"{app_server.url}/forward?{urlencode(q)}")
    times, clicked = [], None
    for stage in WALK:
        _check(page, lang, cfg, js[0], stage, 0)
        if clicked is not None:
            times.append(time.perf_counter() - clicked)
        assert f"fw_stage={stage}" in page.url
        _no_exception(page)
        clicked = time.perf_counter()
        page.locator(".st-key-fw_next button").click()
    # Next after the layer's last stage: layer 2 (fw_layer=1), from its first stage
    expect(_heading(page, lang, FS.IDS.index("attn_norm_before") + 1)).to_be_visible()
    assert "fw_layer=1" in page.url and "fw_stage=attn_norm_before" in page.url
    # the slider: End = the last stage (NSP), ArrowLeft = the MLM head; layer 2 is traced now
    slider = page.get_by_role("slider").first
    slider.focus()
    slider.press("End")
    _check(page, lang, cfg, js[1], "nsp", 1)
    slider.press("ArrowLeft")
    _check(page, lang, cfg, js[1], "mlm", 1)
    assert "fw_stage=mlm" in page.url
    # F5 keeps the stage (a new session: only the URL survives)
    page.reload()
    _check(page, lang, cfg, js[1], "mlm", 1)
    # a deep link in a new tab: another stage, head and token
    tab = page.context.new_page()
    tab.set_viewport_size({"width": 1400, "height": 900})
    link = {**q, "fw_stage": "scores", "fw_layer": 0, "fw_head": 1, "fw_token": 2}
    tab.goto(f"{app_server.url}/forward?{urlencode(link)}")
    _check(tab, lang, cfg, js[0], "scores", 0, head=1, token=2)
    _no_exception(tab)
    tab.close()
    _no_exception(page)
    print(f"\n{lang}: Next to the new numbers, {len(times)} stages: median {statistics.median(times):.2f} s, "
          f"max {max(times):.2f} s (chromium, loaded machine)")
