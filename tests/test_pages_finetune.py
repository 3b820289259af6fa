"""AppTest of the Fine-tune page (issue 14): a comparison started on the page (a fine-tune study run by the study
runner) is kept in the workspace, so a new session of the same workspace (a reload, a deep link in a new tab) shows
its curves, its summary and the class probabilities of both saved models; its label sweep is kept beside it; a saved
one can be deleted; the folder never shows up as a pretraining run."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
PAGE = "app_pages/finetune.py"


@pytest.fixture(scope="module")
def small_model():
    from bertcore.io.checkpoint import untrained_bundle
    from explorer.session.workspace import ActiveModel

    b = untrained_bundle(seed=1, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    return ActiveModel(b, "small test model", "uploaded", True)


def state_models_key() -> str:
    from explorer.session import workspace

    return workspace.MODELS_KEY


def _open(ws: str, model=None) -> AppTest:
    from explorer.session import workspace

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["ws"] = ws
    if model is not None:
        at.session_state[workspace.MODELS_KEY] = {"session:small": model}
    at.switch_page(PAGE).run()
    return at


def _wait(run, timeout: float = 300) -> None:
    """Poll ``run`` as the page's fragment does (its heartbeat: AppTest runs no fragment timers) until it ends."""
    import time

    t0 = time.monotonic()
    while run.running and time.monotonic() - t0 < timeout:
        run.snapshot()
        time.sleep(0.2)
    assert not run.running, "the study did not end"


def _text(at) -> str:
    return "\n".join(str(m.value) for m in at.markdown)


def _curves(at) -> dict:
    """The arguments of the live chart (explorer.livechart) that draws both models' curves."""
    import json

    els = [e for e in at.get("component_instance") if "livechart" in e.proto.component_name]
    assert len(els) == 1, "the Fine-tune page draws one live chart"
    return json.loads(els[0].proto.json_args)


def test_a_finetune_is_kept_and_reopens_in_a_new_session(small_model):
    from bertcore.training import runs
    from explorer.launch import training_run

    ws = runs.new_workspace_id()
    at = _open(ws, small_model)
    assert not at.exception
    at.selectbox(key="finetune_model").select("small test model").run()
    at.select_slider(key="finetune_labels").set_value(16).run()
    at.select_slider(key="finetune_steps").set_value(10).run()
    at.button(key="finetune_start").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    from bertcore.launch.study import read_study
    from explorer.launch import finetunes

    run = training_run.find_live(ws, "bx_finetune_run")
    assert run is not None
    _wait(run)
    s = run.snapshot()
    assert s.status == "finished" and s.states and set(s.states.values()) == {"scored"}
    by_label = finetunes.by_label(run, s.histories)
    assert set(by_label) == {"pretrained", "random init"}

    again = _open(ws)  # a reload: a new session with the same ?ws= finds the comparison in this process
    assert not again.exception and "Pretraining (small test model)" in _text(again)
    args = _curves(again)  # the whole curves go to the new session's chart, the accuracy chart first
    hist = {k: v.frame() for k, v in by_label.items()}
    assert args["train_start"] == 0 and [r[0] for r in args["train"]] == list(range(1, 11))
    assert [r[1] for r in args["train"]] == pytest.approx(hist["pretrained"].loss.tolist())
    assert [r[2] for r in args["evals"]] == pytest.approx(hist["random init"].eval_accuracy.dropna().tolist())
    assert [t["name"] for t in args["charts"][0]["traces"]] == ["from pretrained weights", "from random init weights"]
    assert args["baseline"] == 0.5 and args["show_probe"] is False
    again.run()  # the next rerun sends only what the browser lacks: nothing
    assert _curves(again)["train"] == [] and _curves(again)["train_start"] == 10
    training_run.register_live(ws, "bx_finetune_run", None)  # as after a server restart: only the disk is left
    fresh = _open(ws)
    assert not fresh.exception and not fresh.error, [e.value for e in fresh.error]
    assert "Pretraining (small test model)" in _text(fresh) and "16 labelled examples" in _text(fresh)
    assert f"{by_label['pretrained'].last_eval()['eval_accuracy']:.1%} from pretrained weights" in _text(fresh)
    assert "Saved in" in str([c.value for c in fresh.caption])
    saved_args = _curves(fresh)
    assert [r[1:] for r in saved_args["evals"]] == [r[1:] for r in args["evals"]]  # the same curves from disk
    sel = fresh.selectbox(key="finetune_show")
    assert len(sel.options) == 1 and "finished" in sel.options[0]
    probs = [c for c in fresh.get("plotly_chart") if "finetune_probs" in str(c.proto.id)]
    assert probs, "the saved models answer the Try-it box"
    assert not [r for r in runs.list_runs(runs.workspace_dir(ws)) if r.damaged]  # no fake 'finetunes' run
    start = read_study(run.out_dir)["base"]["start"]  # the session's model reached the training processes
    assert start == str(run.out_dir / "start") and (run.out_dir / "start" / "model.safetensors").is_file()

    # the label sweep runs in the background from the saved comparison and is kept in its folder
    from bertcore.finetune.sweep import sweep_points

    fresh.session_state[state_models_key()] = {"session:small": small_model}  # the starting model, as picked
    fresh.button(key="finetune_sweep_start").click().run()
    assert not fresh.exception and not fresh.error, [e.value for e in fresh.error]
    sweep = training_run.find_live(ws, finetunes.SWEEP_SLOT)
    assert sweep is not None
    _wait(sweep)
    assert sweep.out_dir == run.out_dir / "sweep"  # kept inside the comparison's folder, a study folder of its own
    done = read_study(sweep.out_dir)
    points = sweep_points(done)
    assert done["status"] == "finished" and [p["labels"] for p in points] == [16, 64, 256, 0]
    assert [p["labels_used"] for p in points][:3] == [16, 64, 256] and points[3]["labels_used"] > 256
    after = _open(ws)  # F5: the sweep's curves come back from its study folder
    figs = [json.loads(c.proto.spec) for c in after.get("plotly_chart") if "finetune_sweep" in str(c.proto.id)]
    assert figs and [t["y"] for t in figs[0]["data"]] == [[p["pretrained"] for p in points],
                                                         [p["random_init"] for p in points]]
    assert figs[0]["layout"]["xaxis"]["type"] == "log"
    training_run.register_live(ws, finetunes.SWEEP_SLOT, None)

    # delete it: the confirmation is needed, then it is gone from disk and from the page
    fresh.checkbox(key=f"finetune_sure_{sel.value}").check().run()
    fresh.button(key="finetune_delete").click().run()
    assert not fresh.exception
    assert not list((runs.workspace_dir(ws) / runs.FINETUNES_DIR).iterdir())
    assert not fresh.get("plotly_chart") and "Saved fine-tunes" not in str([e.label for e in fresh.expander])
    assert not [e for e in fresh.get("component_instance") if "livechart" in e.proto.component_name]


def test_an_uploaded_task_is_kept_with_the_comparison(small_model, tmp_path):
    """An uploaded CSV task is saved into the comparison's folder and the runs read it from there, so a reload, a
    restart and the sweep find the same task; Try it answers with its classes."""
    from bertcore.data.tasks import get_task
    from bertcore.launch.study import read_study
    from bertcore.training import runs
    from explorer.launch import finetunes, training_run

    t = get_task("coherence")
    rows = ["text,label"] + [f"{e.text_a},{t.labels[e.label]}" for e in t.train[:40] + t.held_out[:20]]
    ws = runs.new_workspace_id()
    at = _open(ws, small_model)
    at.selectbox(key="finetune_model").select("small test model").run()
    at.selectbox(key="finetune_task").select("your CSV (upload below)").run()
    at.file_uploader(key="finetune_csv").set_value(("my task.csv", "\n".join(rows).encode(), "text/csv")).run()
    at.select_slider(key="finetune_labels").set_value(16).run()
    at.select_slider(key="finetune_steps").set_value(10).run()
    at.button(key="finetune_start").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    run = training_run.find_live(ws, "bx_finetune_run")
    _wait(run)
    assert run.snapshot().status == "finished"
    task = read_study(run.out_dir)["base"]["task"]
    assert task == str(run.out_dir / "my_task.csv") and (run.out_dir / "my_task.csv").read_text() == "\n".join(rows)
    training_run.register_live(ws, "bx_finetune_run", None)  # a restart
    fresh = _open(ws)
    assert not fresh.exception and not fresh.error, [e.value for e in fresh.error]
    c = finetunes.read_comparison(run.out_dir)
    assert c.task == get_task(task).name == "my_task" and c.task_labels == sorted(t.labels) and c.has_models
    assert "16 labelled examples" in _text(fresh)
    fresh.text_input(key="finetune_text_a").set_value(t.held_out[0].text_a).run()
    probs = [json.loads(p.proto.spec) for p in fresh.get("plotly_chart") if "finetune_probs" in str(p.proto.id)]
    assert probs and [list(tr["y"]) for tr in probs[0]["data"]] == [sorted(t.labels)] * 2
    assert [sum(tr["x"]) for tr in probs[0]["data"]] == pytest.approx([1.0, 1.0])
