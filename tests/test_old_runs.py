"""Run directories written before today's layout still open, resume and fine-tune.

Two older layouts are rebuilt here from what those versions wrote:
* a run directory from before replay (no ``steps/`` folder, run.json without "kind", the preset under its old
  name "original BERT (tiny)"): what main wrote until the training-record refactor;
* a checkpoint directory from before run directories existed (config.json, model.safetensors, vocab.txt,
  history.csv, bundle.json; no run.json, no resume state).
"""
from __future__ import annotations

import json
import shutil

import pytest

from bertcore.cli import main
from bertcore.config import BertConfig, TrainConfig
from bertcore.errors import InputError
from bertcore.io.checkpoint import ModelBundle, load_checkpoint, save_checkpoint
from bertcore.io.steps import STEPS_DIR, list_steps, load_step
from bertcore.training import runs
from bertcore.launch import service
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import StopSignal

SMALL = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
             max_position_embeddings=48)


def _stopped_run(tmp_path):
    stop = StopSignal()
    tc = TrainConfig(steps=12, batch_size=8, eval_every=4, eval_size=16, snapshot_every=4, warmup_steps=2, seed=2)
    spec = service.RunSpec(BertConfig(**SMALL), tc, corpus="builtin:2", preset="original BERT", name="old")
    return service.train(spec, tmp_path / "run", stop=stop,
                         callbacks=Callbacks(step=lambda ev: stop.request() if ev.trainer.step_count == 6 else None)).run_dir


def test_a_run_from_before_replay_opens_resumes_and_finetunes(tmp_path, capsys):
    d = _stopped_run(tmp_path)
    shutil.rmtree(d / STEPS_DIR)  # the layout before replay
    meta = runs.read_run_json(d)
    meta.pop("kind")
    meta["preset"] = "original BERT (tiny)"
    runs.write_run_json(d, meta)

    info = runs.read_run(d)
    assert (info.status, info.steps_done, info.resumable, info.damaged) == ("stopped", 6, True, None)
    assert info.kind == "pretraining" and list_steps(d) == []
    assert load_step(d).model is not None  # the replay slider offers the final weights alone
    with pytest.raises(InputError, match="trained before steps were saved"):
        load_step(d, 4)
    assert main(["fill-mask", str(d), "the cow [MASK] hay .", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["masks"]) == 1

    res = service.resume(d)
    assert res.status == "finished" and res.trainer.step_count == 12
    assert list_steps(d) == [6, 8, 12]  # steps saved from the resume on (its start, then every evaluation)
    assert list(load_checkpoint(d).history.step) == list(range(1, 13))

    assert main(["finetune", "--from", str(d), "--task", "same_topic", "--steps", "3", "--labels", "16",
                 "--out", str(tmp_path / "ft"), "--json"]) == 0
    assert runs.read_run(tmp_path / "ft").kind == "finetune"


def test_a_checkpoint_from_before_run_directories_opens_and_finetunes(tmp_path, capsys):
    run = load_checkpoint(_stopped_run(tmp_path))
    old = tmp_path / "old-checkpoint"
    save_checkpoint(ModelBundle(model=run.model, tokenizer=run.tokenizer, history=run.history, name="old"), old)
    assert not (old / runs.RUN_FILE).exists() and not (old / STEPS_DIR).exists()

    b = load_checkpoint(old)  # what the sidebar's "Open a local folder" does
    assert b.history is not None and list(b.history.step) == list(range(1, 7))
    assert list_steps(old) == [] and load_step(old).model is not None
    assert main(["inspect", str(old), "the cow eats hay .", "--json"]) == 0
    capsys.readouterr()
    with pytest.raises(InputError, match="run.json"):
        service.resume(old)
    assert main(["finetune", "--from", str(old), "--task", "same_topic", "--steps", "3", "--labels", "16",
                 "--out", str(tmp_path / "ft"), "--json"]) == 0
    assert runs.read_run(tmp_path / "ft").status == "finished"
