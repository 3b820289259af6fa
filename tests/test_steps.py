"""Replay store (bertcore.io.steps): the weights of every held-out evaluation, thinned to a cap."""
from __future__ import annotations

import pytest
import torch

from bertcore.config import BertConfig, TrainConfig
from bertcore.errors import ConfigError, InputError
from bertcore.io.steps import list_steps, load_step, save_step, step_path, thin
from bertcore.model.bert import init_model
from bertcore.training.run_corpus import run_corpus
from bertcore.launch import service
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import StopSignal


def _spec(steps=20, eval_every=5):
    bert = BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                      max_position_embeddings=64)
    tc = TrainConfig(steps=steps, batch_size=8, eval_every=eval_every, eval_size=16, snapshot_every=0, warmup_steps=2)
    return service.RunSpec(bert, tc, corpus="builtin:3", name="steps")


def test_every_evaluation_is_saved_and_step0_is_the_init(tmp_path):
    r = service.train(_spec(), tmp_path / "run")
    assert list_steps(r.run_dir) == [0, 5, 10, 15, 20]
    first = load_step(r.run_dir, 0)
    init = init_model(first.model.config, 0)  # the run's seed is 0
    for k, v in init.state_dict().items():
        assert torch.equal(first.model.state_dict()[k], v), k  # exact: steps keep the weights as they were
    last = load_step(r.run_dir, 20)
    final = load_step(r.run_dir)  # the checkpoint itself
    for k, v in final.model.state_dict().items():
        assert torch.equal(last.model.state_dict()[k], v), k
    assert last.history["step"].max() == 20 and load_step(r.run_dir, 5).history["step"].max() == 5
    with pytest.raises(InputError, match="0, 5, 10, 15, 20"):
        load_step(r.run_dir, 7)


def test_thinning_keeps_first_last_and_spread(tmp_path):
    model = init_model(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=16, max_position_embeddings=16), 0)
    for s in range(0, 110, 10):
        save_step(model, tmp_path, s, cap=6)
        assert len(list_steps(tmp_path)) <= 6
    kept = list_steps(tmp_path)
    assert kept[0] == 0 and kept[-1] == 100 and len(kept) >= 4
    assert thin(tmp_path, 3) == list_steps(tmp_path) and len(list_steps(tmp_path)) <= 3
    assert step_path(tmp_path, 0).is_file()


def test_cap_from_env_bad_value_is_a_clear_error(tmp_path, monkeypatch):
    from bertcore.io.steps import max_saved_steps

    monkeypatch.setenv("BERTCORE_MAX_SAVED_STEPS", "many")
    with pytest.raises(ConfigError, match="BERTCORE_MAX_SAVED_STEPS='many' is not a whole number"):
        max_saved_steps()
    monkeypatch.setenv("BERTCORE_MAX_SAVED_STEPS", "1")
    assert max_saved_steps() == 2


def test_resume_drops_steps_after_the_checkpoint(tmp_path):
    stop = StopSignal()
    spec = _spec()
    cb = Callbacks(step=lambda ev: stop.request() if ev.trainer.step_count >= 12 else None)
    r = service.train(spec, tmp_path / "run", stop=stop, callbacks=cb)
    assert r.status == "stopped" and list_steps(r.run_dir)[-1] == 12
    r2 = service.resume(r.run_dir)
    assert r2.status == "finished" and list_steps(r.run_dir) == [0, 5, 10, 12, 15, 20]


def test_run_corpus_rebuilds_what_the_run_trained_on(tmp_path):
    from bertcore.data.corpus import builtin_corpus

    r = service.train(_spec(steps=2, eval_every=0), tmp_path / "run")
    assert run_corpus(r.run_dir).pairs == builtin_corpus(seed=3).pairs


def test_skills_recomputed_from_a_saved_step_equal_the_ones_recorded_at_it(tmp_path, capsys):
    """One step, one number: `skills --all-steps` from the saved weights gives the run's own skills.csv rows."""
    import json

    import pandas as pd

    from bertcore.cli import main

    bert = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    tc = TrainConfig(steps=40, batch_size=32, eval_every=10, eval_size=32, snapshot_every=0)
    d = service.train(service.RunSpec(bert, tc, name="skills"), tmp_path / "run").run_dir
    assert main(["skills", str(d), "--all-steps", "--json"]) == 0
    scores = {r["step"]: r for r in json.loads(capsys.readouterr().out)["scores"]}
    recorded = pd.read_csv(d / "skills.csv")
    assert sorted(scores) == [0, 10, 20, 30, 40] == recorded["step"].tolist()
    for _, row in recorded.iterrows():
        got = scores[int(row["step"])]
        for skill in recorded.columns.drop(["step", "seconds"]):
            assert got[skill] == row[skill], (int(row["step"]), skill)
