"""Replay on the Inspect pages (explorer.parts.replay): the step slider shows the run's model as it was after a saved
step, the step is in the URL (a link reopens it), and the numbers are those of that step's weights."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import plotly_array
from streamlit.testing.v1 import AppTest

from bertcore.analysis.inference import fill_mask, inspect_pair
from bertcore.config import BertConfig, TrainConfig
from bertcore.io.steps import list_steps, load_step
from bertcore.training import runs
from bertcore.launch import service
from explorer.figures.inspect import grid_tile

ROOT = Path(__file__).resolve().parents[1]
WS = "replayWorkspace0123456789"


@pytest.fixture()
def run_in_workspace():
    tc = TrainConfig(steps=30, batch_size=16, eval_every=10, eval_size=32, snapshot_every=10, warmup_steps=3, seed=1)
    spec = service.RunSpec(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=48), tc, name="replay")
    r = service.train(spec, parent=runs.workspace_dir(WS))
    runs.write_workspace(WS, active=f"run:{r.run_dir.name}")
    return r.run_dir


def _open(page: str, step: int | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["ws"] = WS
    if step is not None:
        at.query_params["step"] = str(step)
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _slider(at):
    return next(s for s in at.select_slider if s.label.startswith("Replay"))


def test_attention_link_with_a_step_shows_that_steps_weights(run_in_workspace):
    d = run_in_workspace
    assert list_steps(d) == [0, 10, 20, 30]
    at = _open("app_pages/attention.py", step=10)
    assert _slider(at).value == 10 and list(_slider(at).options) == ["0", "10", "20", "30"]
    assert any("after step **10** of 30" in c.value for c in at.caption)
    grid = next(c for c in (json.loads(e.proto.spec) for e in at.get("plotly_chart"))
                if c["data"] and c["data"][0].get("coloraxis") == "coloraxis")
    a = at.text_area(key="attn_a").value
    b = at.text_area(key="attn_b").value or None
    insp = inspect_pair(load_step(d, 10).model, load_step(d, 10).tokenizer, a, b, max_len=48)
    T = insp.attentions.shape[-1]
    np.testing.assert_allclose(grid_tile(plotly_array(grid["data"][0]["z"]), 1, 1, T), insp.attentions[1, 1],
                               atol=1e-5)
    final = inspect_pair(load_step(d).model, load_step(d).tokenizer, a, b, max_len=48)
    assert not np.allclose(insp.attentions, final.attentions, atol=1e-3)  # step 10 is not the final model

    _slider(at).set_value(30).run()  # the last step is the run's own checkpoint: the step leaves the URL
    assert "step" not in at.query_params and not any("after step" in c.value for c in at.caption)


def test_predict_at_step_0_is_the_untrained_start(run_in_workspace):
    d = run_in_workspace
    at = _open("app_pages/predict.py", step=0)
    assert _slider(at).value == 0
    text = at.text_area(key="pred_text").value
    want = fill_mask(load_step(d, 0).model, load_step(d, 0).tokenizer, text, top_k=5)
    shown = " ".join(str(df.value.to_csv()) for df in at.dataframe)
    assert want.masks[0].candidates[0][0] in shown


def test_a_step_that_is_not_saved_falls_back_to_the_last(run_in_workspace):
    at = _open("app_pages/embeddings.py", step=7)
    assert _slider(at).value == 30 and "step" not in at.query_params
