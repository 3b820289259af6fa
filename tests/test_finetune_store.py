"""Issue 14: a page fine-tune comparison is a run directory of the training service (finetune_route.compare), read
back by finetune_store: histories while it trains, the weights at the end, run.json's status lifecycle, a damaged
or interrupted folder reads without raising, and the saved models classify exactly as the models in memory did."""
import json
import os

import pandas as pd
import pytest

from bertcore.config import BertConfig
from bertcore.data.tasks import Task, get_task
from bertcore.errors import InputError
from bertcore.finetune import store as fs
from bertcore.finetune.comparison import PRETRAINED, SCRATCH, PretrainingComparison
from bertcore.finetune.models import classify
from bertcore.finetune.tuner import FinetuneConfig
from bertcore.io.checkpoint import builtin_tokenizer
from bertcore.model.bert import init_model
from bertcore.training import runs

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64)


def _task(name="same_topic", n_held=48):
    t = get_task(name)
    return Task(t.name, t.description, t.labels, t.pair, t.train, t.held_out[:n_held])


def _comparison(out_dir, steps=6, **kw):
    tok = builtin_tokenizer()
    pre = init_model(BertConfig(vocab_size=tok.vocab_size, **SMALL), 3)
    cfg = FinetuneConfig(steps=steps, batch_size=8, labels=16, eval_every=3)
    return PretrainingComparison(pre, tok, _task(), cfg, out_dir, source="test model", abandon_after=600,
                                 **kw), tok


def test_finished_comparison_is_saved_and_reloads_equal(tmp_path):
    d = tmp_path / "cmp1"
    run, tok = _comparison(d)
    run.start()
    assert run.join(120)
    s = run.snapshot()
    assert s.status == "finished" and s.message is None
    saved = fs.read_comparison(d)
    assert saved.status == "finished" and saved.damaged is None and saved.has_models
    meta = json.loads((d / runs.RUN_FILE).read_text())
    assert meta["kind"] == "finetune-comparison" and meta["task"] == "same_topic" and meta["labels_used"] == 16
    assert meta["steps_done"] == 6 and meta["source"] == "test model" and meta["status"] == "finished"
    info = runs.read_run(d)  # the same reader as every run directory
    assert info.status == "finished" and info.damaged is None and info.kind == "finetune-comparison"
    for f in ("pretrained", "random-init"):  # each model is a whole fine-tune run directory
        sub = runs.read_run(d / f)
        assert sub.status == "finished" and sub.loadable and sub.kind == "finetune" and sub.steps_done == 6
    for label in (PRETRAINED, SCRATCH):
        pd.testing.assert_frame_equal(saved.histories[label].frame(), s.histories[label].frame(), check_dtype=False)
        assert saved.accuracy(label) == pytest.approx(s.final_accuracy(label))
        key = "eval_accuracy_" + fs.FOLDERS[label].replace("-", "_")
        assert meta["metrics"][key] == pytest.approx(s.final_accuracy(label))
    models, tok2 = fs.load_models(saved)
    ex = run.task.held_out[0]
    for label in (PRETRAINED, SCRATCH):
        assert classify(models[label], tok2, ex.text_a, ex.text_b) == pytest.approx(
            classify(run.models[label], tok, ex.text_a, ex.text_b), abs=1e-6)
    assert [c.id for c in fs.list_comparisons(tmp_path)] == ["cmp1"]


def test_history_is_on_disk_while_it_trains(tmp_path):
    d = tmp_path / "cmp"
    run, _ = _comparison(d, steps=100_000)
    run.start()
    try:
        import time

        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            run.snapshot()  # the heartbeat
            h = d / "pretrained" / "history.csv"
            if h.is_file() and len(pd.read_csv(h).eval_accuracy.dropna()) >= 2:
                break
            time.sleep(0.05)
        live = fs.read_comparison(d)  # the service marks it active in this process: running
        assert live.status == "running" and not live.has_models
        assert json.loads((d / runs.RUN_FILE).read_text())["pid"] == os.getpid()
        assert live.histories[PRETRAINED].n_evals >= 2
        with pytest.raises(InputError, match="no saved weights"):
            fs.load_models(live)
        with pytest.raises(InputError, match="still training"):
            runs.delete_run(d, root=tmp_path)
    finally:
        run.stop()
        assert run.join(120)
    saved = fs.read_comparison(d)
    assert saved.status == "stopped" and saved.reason.startswith("stopped by the user at step ") and saved.has_models


def test_interrupted_and_damaged_folders_read_without_raising(tmp_path):
    """Old folders (comparison.json, from before comparisons were run directories) and new ones (run.json)."""
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / fs.COMPARISON_FILE).write_text("{not json")
    dead = tmp_path / "dead"
    dead.mkdir()
    (dead / fs.COMPARISON_FILE).write_text(json.dumps({"name": "x", "status": "running", "steps_done": 30,
                                                       "pid": 2**22 + 12345, "created": "2026"}))
    found = {c.id: c for c in fs.list_comparisons(tmp_path)}
    assert "missing" in found["empty"].damaged and "cannot be read" in found["bad"].damaged
    assert found["dead"].status == "stopped" and "interrupted at step 30" in found["dead"].reason
    assert not found["dead"].has_models
    dead2 = tmp_path / "dead2"
    dead2.mkdir()
    runs.write_run_json(dead2, {"kind": "finetune-comparison", "name": "y", "status": "running", "steps_done": 12,
                                "total_steps": 50, "pid": 2**22 + 12345, "created": "2027"})
    got = fs.read_comparison(dead2)
    assert got.status == "stopped" and "interrupted at step 12" in got.reason and got.damaged is None
    pre = tmp_path / "pretraining-run"
    pre.mkdir()
    runs.write_run_json(pre, {"name": "z", "status": "finished", "created": "2028"})
    assert "not a fine-tune comparison" in fs.read_comparison(pre).damaged


def test_disk_error_is_a_message_not_a_crash(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    run, _ = _comparison(blocker / "cmp")
    run.start()
    assert run.join(120)
    s = run.snapshot()
    assert s.status == "error" and "could not save the fine-tune" in (s.message or "")
    assert "Traceback" not in s.message and os.path.isfile(blocker)
