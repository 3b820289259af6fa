"""Pretraining and fine-tuning share one optimizer set-up, one step guard and one shape for their shared fields."""
from __future__ import annotations

import json
import math

import pytest
import torch

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.tasks import Task, get_task
from bertcore.errors import ConfigError
from bertcore.finetune.spec import FinetuneSpec
from bertcore.finetune.tuner import FinetuneConfig, FineTuner
from bertcore.io.checkpoint import builtin_tokenizer
from bertcore.model.bert import init_model
from bertcore.model.classification import BertForSequenceClassification
from bertcore.training.guard import nonfinite_step
from bertcore.training.optim import takes_weight_decay

SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64)


def _tuner(**cfg):
    task = get_task("coherence")
    task = Task(task.name, task.description, task.labels, task.pair, task.train, task.held_out[:32])
    tok = builtin_tokenizer()
    pre = init_model(BertConfig(vocab_size=tok.vocab_size, **SMALL), 0)
    clf = BertForSequenceClassification.from_pretraining(pre, task.num_labels, task.labels, 0)
    return FineTuner(clf, tok, task, FinetuneConfig(**{"steps": 4, "batch_size": 8, "labels": 16, **cfg}))


def test_the_fine_tuner_uses_the_shared_adamw_with_the_head_at_its_own_lr():
    ft = _tuner(lr=3e-4, head_lr=1e-2, weight_decay=0.05)
    assert ft.optimizer.defaults["fused"] is True  # the set-up bertcore.training.optim.adamw builds
    names = {id(p): n for n, p in ft.model.named_parameters()}
    seen = 0
    for g in ft.optimizer.param_groups:
        for p in g["params"]:
            name = names[id(p)]
            assert g["lr"] == (1e-2 if name.startswith("classifier.") else 3e-4), name
            assert g["weight_decay"] == (0.05 if takes_weight_decay(name, p) else 0.0), name
            seen += 1
    assert seen == sum(p.requires_grad for p in ft.model.parameters()) == len(ft._params)


def test_a_linear_probe_trains_only_the_head():
    ft = _tuner(freeze_encoder=True)
    trained = [p for g in ft.optimizer.param_groups for p in g["params"]]
    assert trained and all(g["lr"] == ft.config.head_lr for g in ft.optimizer.param_groups if g["params"])
    before = ft.model.bert.embeddings.word_embeddings.weight.detach().clone()
    ft.run(2)
    assert torch.equal(before, ft.model.bert.embeddings.word_embeddings.weight)


def test_a_nan_step_is_never_applied_and_says_it_as_pretraining_does(monkeypatch):
    ft = _tuner()
    ft.step()
    kept = [p.detach().clone() for p in ft._params]
    real = ft.model.forward

    def poisoned(*a, **k):
        out = real(*a, **k)
        out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(ft.model, "forward", poisoned)
    assert ft.step() == {} and ft.done
    assert ft.error.startswith("loss became NaN at step 2 (lr=")
    assert "the last good weights (after step 1) are kept" in ft.error
    assert all(torch.equal(a, b) for a, b in zip(kept, ft._params))
    # the pretraining guard's words for the same step, from the same function
    assert nonfinite_step(2, math.nan, 1.0, 0.001, "x") == "loss became NaN at step 2 (lr=0.001); x; the last " \
        "good weights (after step 1) are kept"
    assert nonfinite_step(2, 1.0, math.inf, 0.001, "x").startswith("gradient norm became infinite at step 2")
    assert nonfinite_step(2, 1.0, 1.0, 0.001, "x") is None


@pytest.mark.parametrize("field, value", [("lr", -1.0), ("warmup_steps", 1.5), ("weight_decay", 2.0),
                                          ("grad_clip", -1.0), ("seed", -3)])
def test_the_shared_fields_have_one_meaning_and_one_check(field, value):
    with pytest.raises(ConfigError) as a:
        TrainConfig(**{field: value})
    with pytest.raises(ConfigError) as b:
        FinetuneConfig(**{field: value})
    assert str(a.value) == str(b.value) and field in str(a.value)


def test_warmup_is_counted_in_steps_and_an_old_config_still_loads(tmp_path):
    assert FinetuneConfig(steps=150).warmup == 15  # None: 10% of the steps
    assert FinetuneConfig(steps=300).warmup == 30
    assert FinetuneConfig(steps=300, warmup_steps=7).warmup == 7
    old = {"steps": 200, "warmup_frac": 0.25, "lr": 1e-3}  # a finetune_config.json saved before the rename
    p = tmp_path / "finetune_config.json"
    p.write_text(json.dumps(old))
    cfg = FinetuneConfig.from_json(p)
    assert (cfg.warmup_steps, cfg.warmup, cfg.lr) == (50, 50, 1e-3)
    spec = FinetuneSpec.from_json({"finetune": {"start": "random", "task": "coherence", "config": old}})
    assert spec.config.warmup == 50  # a training process reads the spec the old way too
    with pytest.raises(ConfigError, match="warmup_frac"):
        FinetuneConfig.from_dict({"warmup_frac": "a lot"})
    # the schedule the tuner builds follows it: lr rises over 50 steps of 200
    ft = _tuner(steps=200, warmup_steps=50)
    lrs = [ft.scheduler.lr_lambdas[0](s) for s in (0, 49, 50, 199)]
    assert lrs == pytest.approx([1 / 50, 1.0, 150 / 150, 1 / 150])
