"""Resume (issue 10): a run stopped at step k and resumed gives the same losses as an uninterrupted run;
checkpoints written while training stay loadable through a crash; the CLI's --resume and default run folder."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.io.checkpoint import load_checkpoint
from bertcore.training import runs
from bertcore.launch import service
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import StopSignal

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--set", "hidden_size=32", "--set", "num_attention_heads=2", "--set", "intermediate_size=64",
        "--set", "batch_size=8", "--set", "eval_every=5", "--set", "eval_size=16", "--set", "max_seq_len=32",
        "--set", "snapshot_every=5", "--set", "max_position_embeddings=32"]


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus(seed=0, n_pairs=300)


def spec(corpus, steps=30, name="r", **kw):
    bert = BertConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2,
                      max_position_embeddings=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    tc = TrainConfig(**{**dict(steps=steps, batch_size=8, eval_every=5, eval_size=16, snapshot_every=5,
                               max_seq_len=32, warmup_steps=4, seed=3), **kw})
    return service.RunSpec(bert, tc, corpus=corpus, name=name)


def stop_at(k):
    stop = StopSignal()
    return stop, Callbacks(step=lambda ev: stop.request() if ev.trainer.step_count == k else None)



@pytest.mark.parametrize("k", [7, 10])  # between two evaluations, and right on one
def test_stopped_and_resumed_equals_uninterrupted(corpus, tmp_path, k):
    full = service.train(spec(corpus), tmp_path / "full")
    stop, hooks = stop_at(k)
    part = service.train(spec(corpus), callbacks=hooks, run_dir=tmp_path / "part", stop=stop)
    assert part.status == "stopped" and part.trainer.step_count == k
    info = runs.read_run(tmp_path / "part")
    assert (info.status, info.steps_done, info.total_steps, info.resumable) == ("stopped", k, 30, True)
    assert info.summary().startswith(f"stopped at step {k}/30")
    del part  # the resume reads everything from disk
    res = service.resume(tmp_path / "part")
    assert res.status == "finished"
    h1, h2 = full.trainer.history.frame(), res.trainer.history.frame()
    assert list(h1.step) == list(h2.step) == list(range(1, 31))
    for c in ("mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "lr"):
        np.testing.assert_allclose(h2[c].to_numpy(), h1[c].to_numpy(), atol=1e-5, rtol=0, err_msg=c)
    ev1, ev2 = h1.dropna(subset=["eval_mlm_loss"]), h2.dropna(subset=["eval_mlm_loss"])
    later = ev1[ev1.step > k]
    np.testing.assert_allclose(ev2.set_index("step").loc[later.step, "eval_mlm_loss"].to_numpy(),
                               later.eval_mlm_loss.to_numpy(), atol=1e-5)
    b1, b2 = load_checkpoint(tmp_path / "full"), load_checkpoint(tmp_path / "part")
    for (n, p1), p2 in zip(b1.model.state_dict().items(), b2.model.state_dict().values()):
        torch.testing.assert_close(p2, p1, atol=1e-5, rtol=0, msg=n)
    assert runs.read_run_json(tmp_path / "part")["metrics"]["eval_mlm_loss"] == pytest.approx(
        runs.read_run_json(tmp_path / "full")["metrics"]["eval_mlm_loss"], abs=1e-5)
    # the same attention snapshots, plus the one taken when it stopped
    assert [s.step for s in b2.snapshots] == sorted({s.step for s in b1.snapshots} | {k})


def test_resume_refuses_finished_failed_and_damaged(corpus, tmp_path):
    service.train(spec(corpus, steps=6), tmp_path / "done")
    with pytest.raises(ValueError, match="nothing to resume"):
        service.resume(tmp_path / "done")
    bad = service.train(spec(corpus, steps=50, lr=10.0, warmup_steps=0), tmp_path / "nan")
    assert bad.status == "failed" and "lr" in bad.reason
    assert load_checkpoint(tmp_path / "nan").model is not None  # last good weights are kept
    with pytest.raises(ValueError, match="failed"):
        service.resume(tmp_path / "nan")
    (tmp_path / "junk").mkdir()
    with pytest.raises(ValueError, match="run.json"):
        service.resume(tmp_path / "junk")


def test_checkpoint_written_while_training(corpus, tmp_path):
    seen = []

    def on_checkpoint(ev):
        hist = load_checkpoint(ev.run_dir).history
        seen.append((ev.meta["steps_done"], ev.meta["status"], 0 if hist is None else len(hist)))

    service.train(spec(corpus, steps=12), callbacks=Callbacks(checkpoint=on_checkpoint), run_dir=tmp_path / "r")
    # step 0, each evaluation (5, 10) while running, then the end: never every step
    assert [(s, st) for s, st, _ in seen] == [(0, "running"), (5, "running"), (10, "running"), (12, "finished")]
    assert [n for *_, n in seen] == [0, 5, 10, 12]


def test_a_crash_mid_write_leaves_the_previous_checkpoint_loadable(corpus, tmp_path, monkeypatch):
    import bertcore.io.checkpoint as ck

    real = os.replace
    calls = {"n": 0}

    def flaky(src, dst):
        if str(dst).endswith("model.safetensors"):
            calls["n"] += 1
            if calls["n"] == 3:  # the write after step 10: the process "dies" mid-write
                raise KeyboardInterrupt("killed")
        return real(src, dst)

    monkeypatch.setattr(ck.os, "replace", flaky)
    stop, hooks = stop_at(100)
    try:
        service.train(spec(corpus, steps=30), callbacks=hooks, run_dir=tmp_path / "r", stop=stop)
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(ck.os, "replace", real)
    b = load_checkpoint(tmp_path / "r")
    assert b.model is not None and not [p for p in (tmp_path / "r").iterdir() if p.name.endswith(".tmp")]
    info = runs.read_run(tmp_path / "r")
    assert info.damaged is None and info.status in ("stopped", "failed")


def _cli(*args, timeout=240, **popen):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "bertcore", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT, **popen)


def test_cli_sigkill_then_fill_mask_and_resume(tmp_path):
    """A training process killed with SIGKILL (like a server restart): its run lists as stopped, its last
    checkpoint answers fill-mask, and --resume finishes it."""
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "bertcore", "train", "--out", str(out), "--steps", "400",
                             "--quiet", *TINY], env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if json.loads((out / "run.json").read_text())["steps_done"] >= 10:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        assert runs.read_run(out).status == "running"  # its process is alive
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    info = runs.read_run(out)
    assert info.status == "stopped" and "interrupted" in info.reason and info.resumable, info
    p = _cli("fill-mask", out, "the [MASK] eats .", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["masks"][0]["candidates"]
    p = _cli("train", "--resume", out, "--steps", "5")
    assert p.returncode == 2 and p.stderr.startswith("error: ") and "--resume" in p.stderr
    p = _cli("train", "--resume", out, "--quiet")
    assert p.returncode == 0, p.stderr
    info = runs.read_run(out)
    assert (info.status, info.steps_done) == ("finished", 400)
    assert list(load_checkpoint(out).history.step) == list(range(1, 401))


def test_cli_resume_finishes_a_stopped_run(corpus, tmp_path, capsys):
    from bertcore.cli import main

    stop, hooks = stop_at(4)
    service.train(spec(corpus, steps=12), callbacks=hooks, run_dir=tmp_path / "r", stop=stop)
    assert main(["train", "--resume", str(tmp_path / "r"), "--quiet"]) == 0
    assert "saved checkpoint" in capsys.readouterr().out
    info = runs.read_run(tmp_path / "r")
    assert (info.status, info.steps_done) == ("finished", 12)
    assert list(load_checkpoint(tmp_path / "r").history.step) == list(range(1, 13))
    assert main(["train", "--resume", str(tmp_path / "r")]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_cli_without_out_lands_in_the_runs_dir(tmp_path, monkeypatch, capsys):
    from bertcore.cli import main

    corpus_file = tmp_path / "pairs.tsv"
    corpus_file.write_text("".join(f"{a}\t{b}\n" for a, b in builtin_corpus(seed=1, n_pairs=60).pairs))
    monkeypatch.setenv("BERTCORE_RUNS_DIR", str(tmp_path / "root"))
    assert main(["train", "--corpus", str(corpus_file), "--steps", "3", "--quiet", *TINY]) == 0
    (d,) = list((tmp_path / "root" / "runs").iterdir())
    assert str(d) in capsys.readouterr().out
    info = runs.read_run(d)
    assert (info.status, info.steps_done, info.corpus) == ("finished", 3, "pairs.tsv")
    assert (d / "corpus.tsv").read_text() == corpus_file.read_text()  # resumable without the original file
