"""Issue 14: the Fine-tune page's comparison is a fine-tune study (bertcore.lab.studies.finetune_study) run by the one
study runner in the background (explorer.launch.study_run.StudyRun), and read back from its folder by
explorer.launch.finetunes: both runs side by side on the same labelled examples, batch order, dropout masks and
classifier init; histories on disk while it trains, the weights at the end, the study's status lifecycle; a damaged
or interrupted folder reads without raising; the saved models classify exactly as the same fine-tunes run alone."""
import csv
import shutil
import time

import pandas as pd
import pytest
from conftest import TRAINING_RUNS

from bertcore.config import BertConfig
from bertcore.data.tasks import get_task
from bertcore.errors import InputError
from bertcore.finetune.models import PRETRAINED, SCRATCH, classify, load_classifier, summary_line
from bertcore.finetune.spec import FinetuneSpec
from bertcore.finetune.tuner import FinetuneConfig
from bertcore.io.checkpoint import ModelBundle, builtin_tokenizer, save_checkpoint
from bertcore.launch import study as S
from bertcore.lab.studies import finetune_study
from bertcore.model.bert import init_model
from bertcore.training import runs
from explorer.launch import finetunes as F
from explorer.launch.study_run import StudyRun

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64)


@pytest.fixture()
def start(tmp_path):
    """A small pretraining checkpoint and a small pair task as a CSV (80 labelled examples, 20 held out)."""
    tok = builtin_tokenizer()
    pre = init_model(BertConfig(vocab_size=tok.vocab_size, **SMALL), 3)
    save_checkpoint(ModelBundle(model=pre, tokenizer=tok, history=None, name="small", source="test"),
                    tmp_path / "src")
    t = get_task("same_topic")
    path = tmp_path / "pairs.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text_a", "text_b", "label"])
        for e in t.train[:50] + t.held_out[:50]:
            w.writerow([e.text_a, e.text_b, t.labels[e.label]])
    return str(tmp_path / "src"), str(path)


def _comparison(start, out, steps=6, eval_every=3, abandon_after=600.0, lanes=2):
    src, task = start
    cfg = FinetuneConfig(steps=steps, batch_size=8, labels=16, eval_every=eval_every)
    plan = S.plan(finetune_study(src, "test model", task, cfg.to_dict()), out, seeds=1)
    run = StudyRun(plan, lanes, abandon_after=abandon_after)
    TRAINING_RUNS.append(run)
    return run, cfg


def _wait(run, timeout=300):
    t0 = time.monotonic()
    while run.running and time.monotonic() - t0 < timeout:
        run.snapshot()  # the heartbeat, as the page's fragment
        time.sleep(0.05)
    assert not run.running


@pytest.mark.parametrize("where", ["thread", "process"])
def test_both_runs_train_side_by_side_and_equal_the_fine_tunes_alone(start, tmp_path, monkeypatch, where):
    """The comparison's guarantee, through the runner (two lanes at once): each run is exactly the fine-tune it
    would be alone, the same labelled examples for both; and the page's live chart, summary and bars read them."""
    from explorer.figures.finetune import live_charts, probabilities_figure
    from explorer.livechart import pair_rows

    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "0" if where == "thread" else "1")
    run, cfg = _comparison(start, tmp_path / "cmp")
    assert run.in_process == (where == "thread")
    run.start()
    assert run.lanes_wanted == 2 and len(run._slots) == 2  # both runs at once
    _wait(run)
    s = run.snapshot()
    assert s.status == "finished" and s.message is None and s.step == s.steps == 6
    hists = F.by_label(run, s.histories)
    alone = {}
    for init, label in (("pretrained", PRETRAINED), ("random", SCRATCH)):
        tuner = FinetuneSpec(start[0], start[1], cfg, init).tuner()
        tuner.run()
        alone[label] = tuner
        pd.testing.assert_frame_equal(hists[label].frame(), tuner.history.frame(), check_dtype=False)
        assert list(hists[label].frame().dropna().step) == [3, 6]
    assert alone[PRETRAINED].examples == alone[SCRATCH].examples
    assert F.by_label(run, s.labels_used) == {PRETRAINED: 16, SCRATCH: 16}
    assert hists[PRETRAINED].frame().loss.iloc[0] != hists[SCRATCH].frame().loss.iloc[0]  # different weights

    rows = pair_rows({k: hists[k] for k in (PRETRAINED, SCRATCH)})  # the live chart's rows
    train, evals = rows.train(0), rows.evals(0)
    assert [r[0] for r in train] == list(range(1, 7)) and [r[0] for r in evals] == [3, 6]
    assert rows.train(4) == train[4:] and rows.evals(1) == evals[1:]  # what a later poll sends
    for i, k in enumerate((PRETRAINED, SCRATCH)):
        assert [r[1 + i] for r in train] == pytest.approx(list(hists[k].frame().loss))
        assert [r[1 + i] for r in evals] == pytest.approx(list(hists[k].frame().eval_accuracy.dropna()))
    acc_chart = live_charts([PRETRAINED, SCRATCH])[0]
    assert [(t["series"], t["col"], t["name"]) for t in acc_chart["traces"]] == [
        ("evals", 1, "from pretrained weights"), ("evals", 2, "from random init weights")]

    saved = F.read_comparison(tmp_path / "cmp")  # what a reload or a restart reads
    assert saved.status == "finished" and saved.damaged is None and saved.has_models
    assert saved.source == "test model" and saved.labels_used == 16 and saved.steps_done == 6 and saved.pair
    acc = {k: saved.accuracy(k) for k in (PRETRAINED, SCRATCH)}
    assert acc == pytest.approx({k: alone[k].eval_accuracy for k in acc})
    line = summary_line(acc[PRETRAINED], acc[SCRATCH], saved.labels_used, saved.source)
    assert f"{abs(100 * (acc[PRETRAINED] - acc[SCRATCH])):.1f} points" in line and "16 labelled" in line
    assert "(test model)" in line
    ex = get_task(start[1]).held_out[0]
    probs = {}
    for label, d in saved.run_dirs.items():  # each run is a fine-tune run directory
        info = runs.read_run(d)
        assert info.status == "finished" and info.loadable and info.kind == "finetune" and info.steps_done == 6
        model, tok, _ = load_classifier(d)
        probs[label] = classify(model, tok, ex.text_a, ex.text_b)
        assert probs[label] == pytest.approx(classify(alone[label].model, tok, ex.text_a, ex.text_b), abs=1e-6)
    bars = probabilities_figure(saved.task_labels, probs)
    assert [list(t.x) for t in bars.data] == [probs[PRETRAINED], probs[SCRATCH]]


def test_history_is_on_disk_while_it_trains_and_a_stop_keeps_the_weights(start, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "0")
    d = tmp_path / "cmp"
    run, _ = _comparison(start, d, steps=100_000, eval_every=5)
    run.start()
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            run.snapshot()  # the heartbeat
            h = d / S.RUNS_DIR / "from-pretrained-weights-seed0" / "history.csv"
            if h.is_file() and len(pd.read_csv(h).eval_accuracy.dropna()) >= 2:
                break
            time.sleep(0.05)
        live = F.read_comparison(d)  # the runner marks the study active in this process: running
        assert live.status == "running" and not live.has_models
        assert live.histories[PRETRAINED].n_evals >= 2 and live.task_labels == ["different topic", "same topic"]
        with pytest.raises(InputError, match="still training"):
            runs.delete_run(d, root=tmp_path)
    finally:
        assert run.stop(wait=120)
    saved = F.read_comparison(d)
    assert saved.status == "stopped" and saved.reason == "stopped by the user" and saved.has_models
    assert 0 < saved.steps_done < 100_000
    assert saved.accuracy(PRETRAINED) is not None  # the kept weights were evaluated (finalize)
    # a fine-tune is not resumable (a minute-long run): starting the study again runs both anew
    assert [c.state for c in S.open_study(d).todo] == ["missing", "missing"]


def test_abandoned_when_nobody_polls(start, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "0")
    run, _ = _comparison(start, tmp_path / "cmp", steps=100_000, eval_every=0, abandon_after=0.5)
    run.start()
    assert run.join(120)
    assert run.snapshot().status == "abandoned"
    info = runs.read_run(tmp_path / "cmp")
    assert info.status == "stopped" and info.reason.startswith("abandoned")


def test_interrupted_and_damaged_folders_read_without_raising(start, tmp_path):
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad"
    bad.mkdir()
    runs.write_run_json(bad, {"kind": "study", "name": "x", "status": "finished", "created": "2026"})
    (bad / S.STUDY_FILE).write_text("{not json")
    found = {c.id: c for c in (F.read_comparison(tmp_path / n) for n in ("empty", "bad"))}
    assert "no run.json" in found["empty"].damaged and not found["empty"].has_models
    assert "not a fine-tune comparison" in found["bad"].damaged
    # a study whose process is gone (a server restart) reads as stopped, its curves kept
    dead = tmp_path / "dead"
    plan = S.plan(finetune_study(start[0], "m", start[1], FinetuneConfig(steps=5).to_dict()), dead, seeds=1)
    S.write_study(plan)
    meta = runs.read_run_json(dead)
    runs.write_run_json(dead, {**meta, "pid": 2**22 + 12345})
    got = F.read_comparison(dead)
    assert got.status == "stopped" and "interrupted" in got.reason and got.damaged is None and not got.has_models
    assert set(got.run_dirs) == {PRETRAINED, SCRATCH} and got.steps == 5
    pre = tmp_path / "pretraining-run"  # a whole pretraining run is no comparison
    shutil.copytree(start[0], pre)
    runs.write_run_json(pre, {"name": "z", "status": "finished", "created": "2028"})
    assert runs.read_run(pre).damaged is None and "not a fine-tune comparison" in F.read_comparison(pre).damaged


def test_disk_error_is_a_message_not_a_crash(start, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "0")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    run, _ = _comparison(start, blocker / "cmp")
    run.start()
    assert run.join(120)
    s = run.snapshot()
    assert s.status == "error" and "Not a directory" in (s.message or "") and "Traceback" not in s.message
    assert blocker.is_file()
