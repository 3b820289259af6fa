"""Issue 14: fine-tuning runs on the training service's route (hooks, StopSignal, run.json lifecycle, one place that
creates run directories), the comparison's two FinetuneSpecs keep both models on the same batches, dropout masks and
classifier init, and the label sweep is a fine-tune study run by the one study runner (library, CLI --sweep, the
background StudyRun and its study folder)."""
import json
import math
import os
import time

import pytest

from bertcore.cli import main
from bertcore.config import BertConfig
from bertcore.data.tasks import Task, get_task
from bertcore.errors import InputError
from bertcore.finetune import route as fr
from bertcore.finetune import sweep as fsw
from bertcore.finetune.models import scratch_twin
from bertcore.finetune.tuner import FinetuneConfig, FineTuner
from bertcore.io.checkpoint import builtin_tokenizer
from bertcore.model.bert import init_model
from bertcore.model.classification import BertForSequenceClassification
from bertcore.training import runs
from bertcore.launch import service
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import StopSignal, open_run_dir

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64)


def _task(name="coherence", n_held=48):
    t = get_task(name)
    return Task(t.name, t.description, t.labels, t.pair, t.train, t.held_out[:n_held])


def _pretrained(seed=5):
    tok = builtin_tokenizer()
    return init_model(BertConfig(vocab_size=tok.vocab_size, **SMALL), seed), tok


def test_finetune_goes_through_the_service_with_hooks_and_run_json(tmp_path):
    task = _task()
    pre, tok = _pretrained()
    seen = {"start": 0, "steps": [], "evals": [], "checkpoints": [], "end": []}

    def on_checkpoint(ev):
        on_disk = json.loads((ev.run_dir / runs.RUN_FILE).read_text())  # run.json is written before the event
        seen["checkpoints"].append((ev.meta["status"], ev.meta["steps_done"], on_disk["status"], on_disk["pid"]))

    listen = Callbacks(start=lambda ev: seen.__setitem__("start", seen["start"] + 1),
                       step=lambda ev: seen["steps"].append(ev.row["step"]),
                       eval=lambda ev: seen["evals"].append(ev.row["step"]), checkpoint=on_checkpoint,
                       end=lambda ev: seen["end"].append(ev.meta["status"]))
    tuner = FineTuner(BertForSequenceClassification.from_pretraining(pre, 2, task.labels, 0), tok, task,
                      FinetuneConfig(steps=6, batch_size=8, labels=16, eval_every=2), callbacks=listen)
    res = fr.finetune(tuner, parent=tmp_path, source="test")
    assert res.status == "finished" and res.reason is None and res.run_dir.parent == tmp_path
    assert seen["start"] == 1 and seen["steps"] == [1, 2, 3, 4, 5, 6] and seen["evals"] == [2, 4, 6]
    assert seen["end"] == ["finished"]
    # step 0, the evaluations at steps 2 and 4 (6 is the end), then the final write
    assert [c[:3] for c in seen["checkpoints"]] == [("running", 0, "running"), ("running", 2, "running"),
                                                    ("running", 4, "running"), ("finished", 6, "finished")]
    assert all(c[3] == os.getpid() for c in seen["checkpoints"])
    info = runs.read_run(res.run_dir)
    assert info.status == "finished" and info.kind == "finetune" and info.loadable
    assert info.metrics == {"eval_accuracy": pytest.approx(tuner.eval_accuracy)}
    assert [r.id for r in runs.list_runs(tmp_path)] == [res.run_dir.name]
    # atomic writes leave no temp files (.lock: the run's lock file, bertcore.training.locks)
    assert not [p for p in res.run_dir.iterdir() if p.name.startswith(".") and p.name != ".lock"]
    with pytest.raises(InputError, match="already finished"):
        service.resume(res.run_dir)


def test_stop_signal_stops_a_finetune_with_its_weights(tmp_path):
    task = _task()
    pre, tok = _pretrained()
    stop = StopSignal()
    listen = Callbacks(step=lambda ev: stop.request("enough") if ev.row["step"] == 4 else None)
    tuner = FineTuner(BertForSequenceClassification.from_pretraining(pre, 2, task.labels, 0), tok, task,
                      FinetuneConfig(steps=1000, batch_size=8, labels=16, eval_every=0), callbacks=listen)
    res = fr.finetune(tuner, tmp_path / "ft", stop=stop)
    assert res.status == "stopped" and res.reason == "enough at step 4"
    info = runs.read_run(tmp_path / "ft")
    assert info.status == "stopped" and info.steps_done == 4 and info.loadable and not info.resumable
    assert not math.isnan(tuner.eval_accuracy)  # the kept weights were evaluated (finalize)


def test_open_run_dir_refuses_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(InputError, match="is a file"):
        open_run_dir(f, None, "x")


def test_two_specs_equal_two_separate_finetunes(tmp_path):
    """The comparison's guarantee: the FinetuneSpecs of its two runs (init pretrained / random) are the fine-tunes of
    the pretrained model and of its random-init twin, with the same labelled examples, batches and classifier."""
    from bertcore.finetune.spec import FinetuneSpec
    from bertcore.io.checkpoint import ModelBundle, save_checkpoint

    task = get_task("same_topic")
    pre, tok = _pretrained()
    save_checkpoint(ModelBundle(model=pre, tokenizer=tok, history=None, name="small", source="test"), tmp_path / "src")
    cfg = FinetuneConfig(steps=5, batch_size=8, labels=16, eval_every=5)
    specs = {init: FinetuneSpec(str(tmp_path / "src"), "same_topic", cfg, init).tuner()
             for init in ("pretrained", "random")}
    alone_pre = BertForSequenceClassification.from_pretraining(pre, 2, task.labels, cfg.seed)
    alone = {"pretrained": alone_pre, "random": scratch_twin(alone_pre, cfg.seed)}
    for init, m in alone.items():
        h = FineTuner(m, tok, task, cfg).run()
        assert h.equals(specs[init].run()), init
    assert specs["pretrained"].examples == specs["random"].examples
    assert not specs["pretrained"].history.frame().equals(specs["random"].history.frame())  # other weights
    back = FinetuneSpec.from_json(FinetuneSpec(str(tmp_path / "src"), "same_topic", cfg, "random").to_json())
    assert back.init == "random" and back.config == cfg and back.start == str(tmp_path / "src")
    with pytest.raises(InputError, match="init="):
        FinetuneSpec(str(tmp_path / "src"), "same_topic", cfg, "scratch")

    # the device a study runs on (finetune --sweep --device ...) reaches every fine-tune: the runner's specs carry
    # it, the job folder's "runtime" gives it back to the training process's specs, and their tuners train there
    from bertcore.launch import study as S
    from bertcore.launch import worker
    from bertcore.lab.studies import finetune_study
    from bertcore.training.device import Runtime

    rt = Runtime("cpu", "fp32", deterministic=True)  # told apart from the default Runtime()
    plan = S.plan(finetune_study(str(tmp_path / "src"), "m", "same_topic", cfg.to_dict()), tmp_path / "st", seeds=1)
    jobs = S.specs(plan, plan.cells, None, runtime=rt)
    assert [j.runtime for j in jobs] == [rt, rt] and [j.init for j in jobs] == ["pretrained", "random"]
    child = [worker.spec_from_json(j.to_json(), tmp_path, rt) for j in jobs]
    assert all(c.runtime is rt and c.tuner().runtime is rt for c in child)
    assert FinetuneSpec.from_json(jobs[0].to_json()).tuner().runtime == Runtime()


# ------------------------------------------------------------------ the label sweep
def test_parse_points():
    assert fsw.parse_points("16, 64,256,all") == [16, 64, 256, 0]
    assert fsw.parse_points("8,8,ALL,0") == [8, 0]
    for bad in ("16,x", "", "-3", "1.5"):
        with pytest.raises(InputError, match="--sweep"):
            fsw.parse_points(bad)


def _checkpoint(tmp_path):
    from bertcore.io.checkpoint import ModelBundle, save_checkpoint

    pre, tok = _pretrained()
    save_checkpoint(ModelBundle(model=pre, tokenizer=tok, history=None, name="small", source="test"), tmp_path / "src")
    return str(tmp_path / "src")


def _sweep_study(src, points, steps=3):
    from bertcore.lab.studies import finetune_study

    return finetune_study(src, "small", "same_topic", fsw.sweep_config({"batch_size": 8}, steps), points=points)


def test_sweep_points_are_the_final_accuracies_of_each_fine_tune(tmp_path):
    """Through the runner (two lanes): each point is both fine-tunes at that label count, evaluated once at the end,
    exactly as each is alone; seeded; a stopped sweep has no unfinished point."""
    from bertcore.finetune.spec import FinetuneSpec
    from bertcore.launch import study as S

    src = _checkpoint(tmp_path)
    study = _sweep_study(src, [8, 0])
    assert [v.name for v in study.variants] == ["from pretrained weights, 8 labels", "from random init weights, 8 labels",
                                                "from pretrained weights, all labels",
                                                "from random init weights, all labels"]
    data = S.run(S.plan(study, tmp_path / "sweep", seeds=1), lanes=2, in_process=True)
    got = fsw.sweep_points(data)
    assert data["status"] == "finished" and [p["labels"] for p in got] == [8, 0] and [p["steps"] for p in got] == [3, 3]
    assert got[0]["labels_used"] == 8 and got[1]["labels_used"] == len(get_task("same_topic").train)
    assert fsw.planned_points(data) == [8, 0]
    for p in got:
        for init, key in (("pretrained", "pretrained"), ("random", "random_init")):
            cfg = FinetuneConfig(steps=3, batch_size=8, labels=p["labels"], eval_every=0)
            tuner = FinetuneSpec(src, "same_topic", cfg, init).tuner()
            tuner.run()
            assert p[key] == pytest.approx(tuner.eval_accuracy, abs=1e-6)  # evaluation.json keeps 6 digits
            assert len(tuner.history.frame().eval_accuracy.dropna()) == 1 and 0 <= p[key] <= 1
    again = S.run(S.plan(study, tmp_path / "again", seeds=1), lanes=2, in_process=True)
    assert fsw.sweep_points(again) == got  # seeded
    stop = StopSignal()
    stop.request("no")
    none = S.run(S.plan(study, tmp_path / "stopped", seeds=1), lanes=2, in_process=True, stop=stop)
    assert none["status"] == "stopped" and fsw.sweep_points(none) == []
    table = fsw.sweep_table(got).splitlines()
    assert table[0].split() == ["labels", "pretrained", "random", "init", "points"]
    assert table[1].split()[:3] == ["8", f"{got[0]['pretrained']:.3f}", f"{got[0]['random_init']:.3f}"]


def test_cli_sweep_prints_json_and_keeps_its_study(tmp_path, capsys):
    from bertcore.launch.study import read_study

    src = _checkpoint(tmp_path)
    out = tmp_path / "sweep"
    assert main(["finetune", "--from", src, "--task", "coherence", "--sweep", "8,16", "--steps", "2",
                 "--out", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [p["labels_used"] for p in res["points"]] == [8, 16] and res["steps"] == 2 and res["chance"] == 0.5
    assert [p["labels"] for p in res["points"]] == [8, 16]
    assert all(0 <= p[k] <= 1 for p in res["points"] for k in ("pretrained", "random_init"))
    saved = read_study(out)  # --out is the sweep's study folder
    assert saved["status"] == "finished" and saved["kind"] == "finetune" and fsw.sweep_points(saved) == res["points"]
    assert fsw.planned_points(saved) == [8, 16] and runs.read_run(out).kind == "study"
    assert main(["finetune", "--from", src, "--task", "coherence", "--sweep", "8,16", "--steps", "2"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["labels", "pretrained", "random", "init", "points"] and len(table) == 3
    assert [line.split()[:3] for line in table[1:]] == [
        [str(p["labels_used"]), f"{p['pretrained']:.3f}", f"{p['random_init']:.3f}"] for p in res["points"]]
    assert main(["finetune", "--from", "scratch", "--task", "coherence", "--sweep", "16"]) == 2
    assert "--from DIR or minilm" in capsys.readouterr().err
    assert main(["finetune", "--from", src, "--task", "coherence", "--sweep", "16,lots"]) == 2
    assert capsys.readouterr().err.startswith("error: --sweep")
    assert main(["finetune", "--from", src, "--task", "coherence", "--sweep", "8,32", "--steps", "2",
                 "--out", str(out)]) == 2  # a folder that holds another sweep: says so, touches nothing
    assert "other variants" in capsys.readouterr().err and fsw.sweep_points(read_study(out)) == res["points"]


def test_background_sweep_keeps_its_study_folder(tmp_path, monkeypatch):
    from conftest import TRAINING_RUNS

    from bertcore.launch import study as S
    from explorer.launch.study_run import StudyRun

    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "0")
    src = _checkpoint(tmp_path)
    d = tmp_path / "sweep"
    sw = StudyRun(S.plan(_sweep_study(src, [8, 16], steps=2), d, seeds=1), lanes=2, abandon_after=600)
    TRAINING_RUNS.append(sw)
    sw.start()
    t0 = time.monotonic()
    while sw.running and time.monotonic() - t0 < 120:
        sw.snapshot()
        time.sleep(0.05)
    snap = sw.snapshot()
    assert snap.status == "finished" and [p["labels_used"] for p in fsw.sweep_points(snap.data)] == [8, 16]
    on_disk = S.read_study(d)
    assert fsw.sweep_points(on_disk) == fsw.sweep_points(snap.data)
    expected = S.run(S.plan(_sweep_study(src, [8, 16], steps=2), tmp_path / "again", seeds=1), in_process=True)
    assert fsw.sweep_points(on_disk) == fsw.sweep_points(expected)
    # a "running" sweep of a process that is gone reads as stopped, its finished points kept
    (d / S.STUDY_FILE).write_text(json.dumps({**on_disk, "status": "running", "pid": 2**22 + 12345}))
    again = S.read_study(d)
    assert again["status"] == "stopped" and "interrupted" in again["reason"]
    assert fsw.sweep_points(again) == fsw.sweep_points(on_disk)
    (d / S.STUDY_FILE).write_text("{broken")
    assert S.read_study(d) is None


def test_sweep_figure_draws_the_points_on_a_log_axis():
    from explorer.figures.finetune import sweep_figure

    pts = [{"labels": 16, "labels_used": 16, "pretrained": 0.6, "random_init": 0.5},
           {"labels": 0, "labels_used": 4931, "pretrained": 0.9, "random_init": 0.52}]
    fig = sweep_figure(pts, 0.5, planned=[16, 64, 0])
    assert fig.layout.xaxis.type == "log"
    assert [list(t.x) for t in fig.data] == [[16, 4931], [16, 4931]]
    assert [list(t.y) for t in fig.data] == [[0.6, 0.9], [0.5, 0.52]]
    assert "2 of 3 points" in fig.layout.title.text
