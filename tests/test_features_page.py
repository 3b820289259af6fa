"""The Features page in AppTest: with no run it says what to do; on a tiny run it trains an SAE in the background
and shows the library's numbers (quality, the feature table, a feature card, steering as `steer_text` computes
it), keeps the SAE of a replayed step, reads 简体中文, and shows a damaged SAE folder as a message."""
from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from bertcore.analysis import sae_runs
from bertcore.analysis.sae_runs import SAESpec, features_of, open_sae, saes_over_training, summary, train_run_sae
from bertcore.analysis.steering import steer_text
from bertcore.config import BertConfig, TrainConfig
from bertcore.io.sae_io import CFG_FILE, hook_of
from bertcore.training import runs
from bertcore.launch import service
from explorer.launch import sae_jobs, training_slots

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
PAGE = "app_pages/features.py"
WS = "featuresPageWorkspace0123"
SMALL = dict(n_train=300, n_eval=150, steps=60)
QUERY = dict(ft_layer="1", ft_site="residual", ft_size="4", ft_kind="topk", ft_k="4")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run (2 layers, 32 wide, saved steps 0, 40, 80) with the SAE the page's QUERY names, and SAEs of it at
    two saved steps, in a runs folder of its own."""
    root = tmp_path_factory.mktemp("feature-runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("BERTCORE_RUNS_DIR", str(root))
    tc = TrainConfig(steps=80, batch_size=64, eval_every=40, eval_size=64, snapshot_every=0, warmup_steps=10, seed=0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=48)
    run = service.train(service.RunSpec(cfg, tc, name="features"), parent=runs.workspace_dir(WS)).run_dir
    d = train_run_sae(run, SAESpec(layer=1, size=4, k=4, **SMALL))
    steps = saes_over_training(run, SAESpec(layer=1, size=4, k=4, **SMALL), n=2)
    mp.undo()
    return root, run, d, steps


@pytest.fixture()
def features_page(trained, monkeypatch):
    root, run, d, steps = trained
    monkeypatch.setenv("BERTCORE_RUNS_DIR", str(root))
    runs.write_workspace(WS, active=f"run:{run.name}")

    def open_(**query) -> AppTest:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
        at.query_params["ws"] = WS
        for k, v in {**QUERY, **query}.items():
            at.query_params[k] = v
        at.switch_page(PAGE).run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return open_


def test_without_a_run_the_page_says_to_train_one(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTCORE_RUNS_DIR", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.switch_page(PAGE).run()
    assert not at.exception
    assert any("Train" in i.value and "SAE" in i.value for i in at.info)


def test_page_shows_the_libraries_numbers(features_page, trained):
    root, run, d, _ = trained
    table = features_of(d)
    f = next(ft["id"] for ft in table["features"] if ft["label"] is not None and ft["max_activation"] > 0)
    at = features_page(feature=str(f), ft_step="final")
    s = summary(d)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["variance explained"] == f"{s['variance_explained']:.1%}"
    assert metrics["L0 (active features per token)"] == f"{s['l0']:.1f}"
    assert metrics["loss recovered"] == f"{s['loss_recovered']:.1%}"
    df = at.dataframe[0].value
    assert len(df) == 128 and list(df["AUROC"].dropna()) == sorted(df["AUROC"].dropna(), reverse=True)
    assert at.subheader[0].value.startswith(f"Feature {f}: ")
    sae, cfg, _, b = open_sae(d)
    want = steer_text(b.model, b.tokenizer, sae, hook_of(cfg), f, 2.0, table["features"][f]["max_activation"],
                      "the cow [MASK] muddy .")
    after = next(t.value for t in at.dataframe[4:] if t.value.shape[1] == 2 and "probability" in t.value.columns
                 and t.value.iloc[0, 0] == want["after"][0]["top"][0][0])
    assert after.iloc[0, 1] == pytest.approx(round(want["after"][0]["top"][0][1], 4))
    assert [b.label for b in at.get("download_button")] == ["Feature table as CSV"]
    at.button(key="ft_flip_btn").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    line = next(m.value for m in at.markdown if "items that can flip" in m.value)
    assert "a random direction of the same norm flips" in line


def test_replay_slider_opens_the_sae_of_that_step(features_page, trained):
    root, run, d, steps = trained
    at = features_page(ft_step="0")
    assert json.loads((steps[0] / "training.json").read_text())["step"] == 0
    s0 = summary(steps[0])
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["variance explained"] == f"{s0['variance_explained']:.1%}"
    slider = at.select_slider(key="ft_step_box")
    assert list(slider.options) == ["0", "80", "final"]
    assert len(at.get("plotly_chart")) >= 2  # the over-training view and the histogram


def test_train_button_trains_in_the_background_then_shows_it(features_page, trained, monkeypatch):
    root, run, d, _ = trained
    real = sae_runs.train_run_sae
    monkeypatch.setattr(sae_jobs, "train_run_sae", lambda r, spec, **kw: real(r, replace(spec, **SMALL), **kw))
    at = features_page(ft_k="3")
    assert any("No SAE with these settings" in i.value for i in at.info)
    at.button(key="ft_train").click().run()
    job = sae_jobs.job_for(WS)
    assert job is not None and job.join(300)
    assert job.snapshot().status == "finished", job.snapshot().message
    at.run()
    assert not at.exception
    assert (run / "saes" / "layer1-residual-x4-k3-seed0" / CFG_FILE).is_file()
    assert "variance explained" in {m.label for m in at.metric}
    sae_jobs.forget(WS)


def test_a_full_server_shows_the_one_server_busy_message(features_page, monkeypatch):
    monkeypatch.setattr(training_slots, "max_trainings", lambda: 0)  # every training slot taken
    at = features_page(ft_k="3")
    at.button(key="ft_train").click().run()
    assert not at.exception and sae_jobs.job_for(WS) is None
    assert [e.value for e in at.error] == [
        "Server busy: 0 trainings running (the limit is 0, set by BERTCORE_MAX_TRAININGS). Try again in a minute."]


def test_chinese_page(features_page, trained):
    at = features_page(lang="zh", feature="0", ft_step="final")
    assert at.title[0].value == "特征"
    assert "解释方差比例" in {m.label for m in at.metric}
    assert at.subheader[0].value.startswith("特征 0：")


def test_a_damaged_sae_folder_is_a_message(features_page, trained, tmp_path):
    root, run, d, _ = trained
    bad = run / "saes" / "layer0-residual-x4-k4-seed0"
    bad.mkdir(parents=True, exist_ok=True)
    (bad / CFG_FILE).write_text("{broken")
    (bad / "features.json").write_text(json.dumps({"features": []}))
    at = features_page(ft_layer="0")
    assert any("not a usable SAE folder" in e.value for e in at.error)


def test_one_sae_job_per_workspace_and_a_cap_per_server(monkeypatch, tmp_path):
    gate = threading.Event()

    def work(self):
        gate.wait(30)

    monkeypatch.setattr(sae_jobs.SAEJob, "work", work)
    monkeypatch.setattr(training_slots, "max_trainings", lambda: 2)
    spec = SAESpec(layer=0)
    a = sae_jobs.start_job("wsA-0123456789abcdef", tmp_path, spec)
    with pytest.raises(sae_jobs.JobBusy, match="already training an SAE"):
        sae_jobs.start_job("wsA-0123456789abcdef", tmp_path, spec)
    b = sae_jobs.start_job("wsB-0123456789abcdef", tmp_path, spec)
    assert training_slots.running_trainings() == 2  # the server's training slots, shared with trainings
    with pytest.raises(training_slots.ServerBusy) as busy:
        sae_jobs.start_job("wsC-0123456789abcdef", tmp_path, spec)
    assert training_slots.busy_message(busy.value).startswith("Server busy: 2 trainings running (the limit is 2")
    gate.set()
    assert a.join(10) and b.join(10)
    assert training_slots.running_trainings() == 0  # each job gave its slot back at its end
    sae_jobs.start_job("wsC-0123456789abcdef", tmp_path, spec).join(10)
    for ws in ("wsA-0123456789abcdef", "wsB-0123456789abcdef", "wsC-0123456789abcdef"):
        sae_jobs.forget(ws)


def test_an_sae_job_cut_short_by_a_restart_says_so(features_page, trained):
    """The SAE job keeps its state in the run's saes/job.json; a page opened after its server stopped (no job in
    this process, the pid gone) says it was interrupted and that the finished SAEs are kept."""
    import subprocess
    import sys

    from bertcore.training.job import JOB_FILE

    root, run, d, _ = trained
    sae_jobs.forget(WS)
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    state_file = run / "saes" / JOB_FILE
    state_file.write_text(json.dumps({"kind": "SAE training", "status": "running", "pid": gone}))
    try:
        at = features_page()
        assert any("was interrupted" in i.value and "are kept" in i.value for i in at.info), [i.value for i in at.info]
        state_file.write_text(json.dumps({"kind": "SAE training", "status": "finished", "pid": gone}))
        at = features_page()
        assert not any("was interrupted" in i.value for i in at.info)
    finally:
        state_file.unlink()
