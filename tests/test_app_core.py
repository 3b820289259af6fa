"""App core: navigation, Train/Overview/Compare pages, the background runner, figure builders, safe uploads."""
from __future__ import annotations

import io
import json
import math
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import TRAINING_END

from bertcore.launch.service import RunSpec
from conftest import TRAINING_RUNS as RUNS  # stopped after each test by conftest

from explorer.figures import train as ft
from explorer.launch import training_run, training_slots
from explorer.session import uploads

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


@pytest.fixture(scope="module")
def small():
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.tokenization import WordTokenizer

    corpus = builtin_corpus(seed=0, n_pairs=600)
    tok = WordTokenizer.build(corpus.texts())
    bcfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                      num_hidden_layers=2)

    def tcfg(steps=30, **kw):
        return TrainConfig(**{**dict(steps=steps, batch_size=8, eval_every=10, eval_size=32, snapshot_every=10,
                                     max_seq_len=32), **kw})

    return corpus, tok, bcfg, tcfg


def _run(small, steps=30, abandon_after=None, **kw):
    corpus, tok, bcfg, tcfg = small
    r = training_run.TrainingRun([RunSpec(bcfg, tcfg(steps, **kw), corpus=corpus, tokenizer=tok, name="test")],
                                 abandon_after=abandon_after)
    RUNS.append(r)
    return r


def _wait_steps(run, n, timeout=120):
    """Poll (a heartbeat, as the page's fragment) until ``run`` has trained ``n`` steps."""
    t0 = time.time()
    while run.snapshot().total_done < n and run.running and time.time() - t0 < timeout:
        time.sleep(0.02)


def _steps_done(run) -> int:
    """Steps trained so far, read without a heartbeat (``snapshot()`` would count as the page polling)."""
    return sum(len(h) for h in run.histories)


def _figs(at):
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def _no_exception(at):
    assert not at.exception, [e.value for e in at.exception]


@pytest.fixture(scope="module")
def trained_run(small):
    r = _run(small, steps=30)
    r.start()
    while r.running:
        r.snapshot()
        time.sleep(0.05)
    return r


# ------------------------------------------------------------------ app
def test_app_and_core_pages_render_untrained():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=60).run()
    _no_exception(at)
    assert any("untrained" in m.value.lower() for m in at.sidebar.markdown)
    for page, title in [("app_pages/train.py", "Train"), ("app_pages/overview.py", "BERT"), ("app_pages/compare.py", "Compare")]:
        at.switch_page(page).run()
        _no_exception(at)
        assert title in at.title[0].value
    at.switch_page("app_pages/overview.py").run()
    figs = _figs(at)
    assert figs and any("Encoder" in a.get("text", "") for a in figs[0]["layout"]["annotations"])


def test_invalid_config_is_explained_before_start():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("app_pages/train.py").run()
    at.number_input(key="train_original BERT_tiny_D").set_value(30).run()  # 30 % 4 heads != 0
    _no_exception(at)
    assert any("divisible" in e.value for e in at.error)
    assert at.button(key="train_start").disabled


def test_pages_render_with_trained_model(trained_run):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["bx_run"] = trained_run
    at.run()
    _no_exception(at)
    assert at.sidebar.markdown[0].value == "**Active model:** test"  # the run's name (run.json)
    hist = trained_run.snapshot().histories[0]
    assert len(hist) == 30
    at.switch_page("app_pages/train.py").run()
    _no_exception(at)
    # the live panel (explorer.livechart) carries the history; tests/test_train_page.py checks it in detail
    panel = [e for e in at.get("component_instance") if "livechart" in e.proto.component_name]
    assert len(json.loads(panel[0].proto.json_args)["train"]) == len(hist)
    at.switch_page("app_pages/overview.py").run()
    _no_exception(at)
    for page in ("app_pages/compare.py",):
        at.switch_page(page).run()
        _no_exception(at)


def test_compare_trains_both_designs_as_one_study():
    """Compare designs is a small study (bertcore.launch.study): both designs train side by side from the same start
    (bertcore.launch.study.initial_model), the curves are their histories, a reload (the live run gone, as after a
    restart) finds the comparison on disk with the same curves and both attention grids, and a grid's run becomes
    the active model."""
    from streamlit.testing.v1 import AppTest

    from bertcore.launch.study import read_study
    from bertcore.training import runs

    ws = runs.new_workspace_id()
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["ws"] = ws
    at.switch_page("app_pages/compare.py").run()
    _no_exception(at)
    assert any("Same start" in m.value and "bert.encoder.LayerNorm" in m.value for m in at.info)  # post vs pre
    at.slider(key="compare_steps").set_value(20).run()
    at.button(key="compare_start").click().run()
    _no_exception(at)
    assert not at.error, [e.value for e in at.error]
    run = training_run.find_live(ws, "bx_compare_run")
    assert run is not None and run.lanes_wanted == 2
    t0 = time.monotonic()
    while run.running and time.monotonic() - t0 < 600:
        run.snapshot()  # the heartbeat (AppTest runs no fragment timers)
        time.sleep(0.2)
    s = run.snapshot()
    assert s.status == "finished" and set(s.states.values()) == {"scored"} and s.total_done == s.total_steps == 40
    assert s.labels == ["A: post", "B: pre"]
    data = read_study(run.out_dir)
    assert data["study"] == "compare-designs" and data["first_seed"] == 0 and data["steps"] == 20
    assert run.out_dir.parent == runs.workspace_dir(ws)  # a study folder of the workspace: one entry of its runs
    frames = {name: s.histories[(name, 0)].frame() for name in s.labels}
    assert all(len(f) == 20 for f in frames.values())

    def curves(app):
        figs = {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)
                for c in app.get("plotly_chart") if "compare_mlm_loss" in c.proto.id}
        (fig,) = figs.values()
        return {t["name"]: t["y"] for t in fig["data"] if t["name"].endswith("MLM loss (train)")}

    at.run()
    _no_exception(at)
    for name, f in frames.items():
        assert curves(at)[f"{name} · MLM loss (train)"] == pytest.approx(f.mlm_loss.tolist())
    training_run.register_live(ws, "bx_compare_run", None)  # a server restart: only the disk is left
    again = AppTest.from_file(APP, default_timeout=120)
    again.query_params["ws"] = ws
    again.switch_page("app_pages/compare.py").run()
    _no_exception(again)
    assert not again.error, [e.value for e in again.error]
    for name, f in frames.items():
        assert curves(again)[f"{name} · MLM loss (train)"] == pytest.approx(f.mlm_loss.tolist())
    grids = [c for c in again.get("plotly_chart") if "compare_grid_" in c.proto.id]
    assert len(grids) == 2
    again.button(key="compare_use_B: pre").click().run()
    _no_exception(again)
    assert again.sidebar.markdown[0].value == "**Active model:** compare-designs · B: pre · seed 0"


# ------------------------------------------------------------------ figures
def test_curves_figure_carries_history_numbers():
    h = pd.DataFrame({"step": [1, 2, 3], "mlm_loss": [5.0, 4.0, 3.5], "nsp_loss": [0.7, 0.69, 0.68],
                      "eval_mlm_loss": [math.nan, 4.2, math.nan], "eval_nsp_loss": [math.nan] * 3})
    fig = ft.loss_figure(h).to_plotly_json()
    by = {t["meta"]["metric"]: t for t in fig["data"]}
    assert list(by["mlm_loss"]["y"]) == [5.0, 4.0, 3.5] and list(by["mlm_loss"]["x"]) == [1, 2, 3]
    assert list(by["eval_mlm_loss"]["x"]) == [2] and list(by["eval_mlm_loss"]["y"]) == [4.2]
    assert "eval_nsp_loss" not in by  # never evaluated: no empty trace
    two = ft.curves_figure({"A": h, "B": h.assign(mlm_loss=[1.0, 2.0, 3.0])}, ["mlm_loss"]).to_plotly_json()
    assert [t["name"] for t in two["data"]] == ["A · MLM loss (train)", "B · MLM loss (train)"]
    assert list(two["data"][1]["y"]) == [1.0, 2.0, 3.0]


def test_attention_grid_shares_one_colour_scale():
    import numpy as np

    att = np.random.default_rng(0).random((2, 3, 4, 4)).astype(np.float32)
    from explorer.figures.inspect import attention_grid_figure, grid_tile

    fig = attention_grid_figure(att, ["[CLS]", "a", "a", "[SEP]"], clickable=False).to_plotly_json()
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    assert len(heat) == 1 and heat[0]["coloraxis"] == "coloraxis"  # one mosaic of all 6 heads, one scale
    from conftest import plotly_array

    assert np.allclose(grid_tile(plotly_array(heat[0]["z"]), 1, 2, 4), att[1, 2])
    assert len(set(fig["layout"]["xaxis"]["ticktext"][:4])) == 4  # duplicate tokens kept apart


def test_pipeline_figure_reflects_config():
    from bertcore.config import BertConfig
    from explorer.figures.overview import pipeline_figure

    fig = pipeline_figure(BertConfig(num_hidden_layers=3)).to_plotly_json()
    texts = " ".join(a["text"] for a in fig["layout"]["annotations"])
    assert "Encoder × 3" in texts and "MLM head" in texts and "NSP head" in texts


# ------------------------------------------------------------------ runner
@pytest.fixture(params=["process", "thread"])
def where(request, monkeypatch):
    """Both ways a training runs: its own process (the default, BERTCORE_TRAINING_PROCESS=1) and a server thread."""
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "1" if request.param == "process" else "0")
    return request.param


def _last_allowed_step(r, seen: int) -> int:
    """The last step a stopped run may have trained: the step under way when the stop arrived. ``seen``: steps
    the caller saw before it asked. The run reports the step its stop request found (``stop_steps``), which is
    at least ``seen`` (the rows a caller sees trail the trainer's by up to one flush, in a thread as in a child)."""
    assert r.stop_steps[0] is not None and r.stop_steps[0] >= seen, (r.stop_steps, seen)
    return r.stop_steps[0] + 1


def test_stop_takes_effect_at_the_next_step(small, where):
    """Stop is honoured at the next step boundary: once ``stop()`` has returned, at most the step under way completes.
    Counted in steps, not seconds: a step takes ten times longer on one machine than on another."""
    r = _run(small, steps=100000)
    assert r.in_process == (where == "process")
    r.start()
    _wait_steps(r, 3)
    r.stop()
    at_stop = _steps_done(r)  # read after stop(): at least the steps done when it was called
    assert r.join(TRAINING_END), "the run did not stop"
    s = r.snapshot()
    assert s.status == "stopped" and 3 <= s.total_done <= _last_allowed_step(r, at_stop), (at_stop, s.total_done)
    assert r.results[0] is not None  # the partly trained model is kept
    assert s.histories[0].frame()["step"].tolist() == list(range(1, s.total_done + 1))  # every row, once


def test_abandoned_run_stops_itself(small, where):
    """An unpolled run stops itself once its heartbeat is ``abandon_after`` seconds old, never before; and at the step
    after its job's watcher saw the heartbeat stale (bertcore.training.job: it looks every 0.1 s; counted in steps,
    not seconds, since machines differ)."""
    r = _run(small, steps=100000, abandon_after=3600.0)  # not abandoned while the test polls, however slowly
    r.start()
    _wait_steps(r, 2)
    r.last_poll = polled = time.monotonic()  # the tab's last heartbeat: nobody polls from here on
    r.abandon_after = 1.0
    assert r.join(TRAINING_END), "an unpolled run must stop itself"
    assert r.status == "abandoned"
    assert r._finished - polled >= r.abandon_after  # it trained on until the heartbeat was abandon_after old

    r = _run(small, steps=100000, abandon_after=3600.0)
    r.start()
    _wait_steps(r, 2)
    r.last_poll -= 2 * 3600  # the heartbeat is stale now
    stale = _steps_done(r)
    assert r.join(TRAINING_END), "a run with a stale heartbeat must stop itself"
    assert r.status == "abandoned" and _steps_done(r) <= _last_allowed_step(r, stale), (stale, _steps_done(r))


def test_cap_on_concurrent_trainings(small, monkeypatch):
    monkeypatch.setenv("BERTCORE_MAX_TRAININGS", "1")
    r1 = _run(small, steps=100000)
    r1.start()
    r2 = _run(small, steps=10)
    with pytest.raises(training_slots.ServerBusy, match="Server busy: 1 training running"):
        r2.start()
    assert not r2.running
    assert r1.stop(wait=TRAINING_END)  # its end is an event: waited for, with a deadline for this machine
    assert training_slots.running_trainings() == 0
    r2.start()  # a slot is free again
    assert r2.join(TRAINING_END)


# ------------------------------------------------------------------ uploads
def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.mark.parametrize("files,match", [
    ({"../evil.json": b"{}"}, "unsafe path"),
    ({"/etc/evil.json": b"{}"}, "unsafe path"),
    ({"ok/../../evil.json": b"{}"}, "unsafe path"),
    ({"config.json": b"{}", "pytorch_model.bin": b"x"}, "pickle"),
    ({"model.pt": b"x"}, "pickle"),
    ({"weights.pkl": b"x"}, "pickle"),
])
def test_safe_extract_rejects(tmp_path, files, match):
    from bertcore.errors import CheckpointError

    with pytest.raises(CheckpointError, match=match):
        uploads.safe_extract_zip(_zip(files), tmp_path / "x")
    assert not (tmp_path / "evil.json").exists() and not (tmp_path.parent / "evil.json").exists()


def test_safe_extract_rejects_bombs_and_garbage(tmp_path):
    from bertcore.errors import CheckpointError

    bomb = _zip({"config.json": b"0" * 5_000_000})  # compresses to a few KB
    assert len(bomb) < 50_000
    with pytest.raises(CheckpointError, match="MB"):
        uploads.safe_extract_zip(bomb, tmp_path / "b", max_total=1_000_000)
    with pytest.raises(CheckpointError, match="not a readable zip"):
        uploads.safe_extract_zip(b"not a zip at all", tmp_path / "c")


def test_checkpoint_roundtrip_through_zip(trained_run, tmp_path):
    from bertcore.io.checkpoint import load_checkpoint

    bundle = trained_run.results[0]
    data = uploads.checkpoint_zip_bytes(bundle)
    root = uploads.safe_extract_zip(data, tmp_path / "ck")
    loaded = load_checkpoint(root)
    assert loaded.model.config.to_dict() == bundle.model.config.to_dict()
    assert len(loaded.history) == len(bundle.history)
