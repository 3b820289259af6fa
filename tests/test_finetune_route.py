"""Issue 14: fine-tuning runs on the training service's route (hooks, StopSignal, run.json lifecycle, one place that
creates run directories), the comparison keeps both models on the same batches, dropout masks and classifier init,
and the label sweep (library, CLI --sweep, background runner and its sweep.json)."""
import json
import math
import os

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
from bertcore.jobs import service
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


def test_pair_equals_two_separate_finetunes():
    """The comparison's guarantee: stepping both models in lock-step changes nothing for either of them."""
    task = _task("same_topic")
    pre, tok = _pretrained()
    cfg = FinetuneConfig(steps=5, batch_size=8, labels=16, eval_every=5)
    pair = fr.PairTuner(pre, tok, task, cfg)
    pair.run()
    assert pair.step_count == 5 and pair.done and pair.error is None
    alone_pre = BertForSequenceClassification.from_pretraining(pre, 2, task.labels, cfg.seed)
    alone = {fr.PRETRAINED: alone_pre, fr.SCRATCH: scratch_twin(alone_pre, cfg.seed)}
    for label, m in alone.items():
        h = FineTuner(m, tok, task, cfg).run()
        assert h.equals(pair.tuners[label].history.frame()), label
    assert pair.tuners[fr.PRETRAINED].examples == pair.tuners[fr.SCRATCH].examples


# ------------------------------------------------------------------ the label sweep
def test_parse_points():
    assert fsw.parse_points("16, 64,256,all") == [16, 64, 256, 0]
    assert fsw.parse_points("8,8,ALL,0") == [8, 0]
    for bad in ("16,x", "", "-3", "1.5"):
        with pytest.raises(InputError, match="--sweep"):
            fsw.parse_points(bad)


def test_label_sweep_points_are_the_comparisons_final_accuracies():
    task = _task("same_topic")
    pre, tok = _pretrained()
    cfg = FinetuneConfig(steps=3, batch_size=8, eval_every=1)
    got = fsw.label_sweep(pre, tok, task, cfg, [8, 0])
    assert [p["labels"] for p in got] == [8, 0] and [p["steps"] for p in got] == [3, 3]
    assert got[0]["labels_used"] == 8 and got[1]["labels_used"] == len(task.train)
    for p in got:  # each point is exactly a PairTuner run at that label count, evaluated once at the end
        pair = fr.PairTuner(pre, tok, task, cfg.replace(labels=p["labels"], eval_every=0))
        pair.run()
        assert p["pretrained"] == pair.accuracy(fr.PRETRAINED) and p["random_init"] == pair.accuracy(fr.SCRATCH)
        assert len(pair.tuners[fr.PRETRAINED].history.frame().eval_accuracy.dropna()) == 1
        assert 0 <= p["pretrained"] <= 1 and 0 <= p["random_init"] <= 1
    assert got == fsw.label_sweep(pre, tok, task, cfg, [8, 0])  # seeded
    import threading

    stop = threading.Event()
    stop.set()
    assert fsw.label_sweep(pre, tok, task, cfg, [8, 0], stop=stop) == []


def test_cli_sweep_json_and_file(tmp_path, capsys):
    src = tmp_path / "src"  # a small pretraining checkpoint
    from bertcore.io.checkpoint import ModelBundle, save_checkpoint

    pre, tok = _pretrained()
    save_checkpoint(ModelBundle(model=pre, tokenizer=tok, history=None, name="small", source="test"), src)
    out = tmp_path / "sweep"
    assert main(["finetune", "--from", str(src), "--task", "coherence", "--sweep", "8,16", "--steps", "2",
                 "--out", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [p["labels_used"] for p in res["points"]] == [8, 16] and res["steps"] == 2 and res["chance"] == 0.5
    assert all(0 <= p[k] <= 1 for p in res["points"] for k in ("pretrained", "random_init"))
    saved = fsw.read_sweep(out)
    assert saved["status"] == "finished" and saved["points"] == res["points"] and saved["planned"] == [8, 16]
    assert main(["finetune", "--from", str(src), "--task", "coherence", "--sweep", "8,16", "--steps", "2"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["labels", "pretrained", "random", "init", "points"] and len(table) == 3
    assert main(["finetune", "--from", "scratch", "--task", "coherence", "--sweep", "16"]) == 2
    assert "--from DIR or minilm" in capsys.readouterr().err
    assert main(["finetune", "--from", str(src), "--task", "coherence", "--sweep", "16,lots"]) == 2
    assert capsys.readouterr().err.startswith("error: --sweep")


def test_background_sweep_keeps_sweep_json(tmp_path):
    task = _task("same_topic")
    pre, tok = _pretrained()
    sw = fsw.LabelSweep(pre, tok, task, FinetuneConfig(steps=2, batch_size=8), tmp_path, points=[8, 16],
                        source="test", abandon_after=600).start()
    assert sw.join(120)
    snap = sw.snapshot()
    assert snap["status"] == "finished" and [p["labels_used"] for p in snap["points"]] == [8, 16]
    on_disk = fsw.read_sweep(tmp_path)
    assert on_disk["points"] == snap["points"] and on_disk["chance"] == 0.5
    expected = fsw.label_sweep(pre, tok, task, FinetuneConfig(steps=2, batch_size=8), [8, 16])
    assert on_disk["points"] == expected
    # a "running" sweep of a process that is gone reads as stopped, its finished points kept
    fsw.write_sweep(tmp_path, {**on_disk, "status": "running", "pid": 2**22 + 12345})
    again = fsw.read_sweep(tmp_path)
    assert again["status"] == "stopped" and "interrupted after 2 points" in again["reason"]
    (tmp_path / fsw.SWEEP_FILE).write_text("{broken")
    assert fsw.read_sweep(tmp_path) is None


def test_sweep_figure_draws_the_points_on_a_log_axis():
    from explorer.figures.finetune import sweep_figure

    pts = [{"labels": 16, "labels_used": 16, "pretrained": 0.6, "random_init": 0.5},
           {"labels": 0, "labels_used": 4931, "pretrained": 0.9, "random_init": 0.52}]
    fig = sweep_figure(pts, 0.5, planned=[16, 64, 0])
    assert fig.layout.xaxis.type == "log"
    assert [list(t.x) for t in fig.data] == [[16, 4931], [16, 4931]]
    assert [list(t.y) for t in fig.data] == [[0.6, 0.9], [0.5, 0.52]]
    assert "2 of 3 points" in fig.layout.title.text
