"""Trainer (BERT §3.1 MLM + §3.2 NSP pretraining loop): determinism, concurrency, NaN handling, history."""
import math
import threading

import numpy as np
import pandas as pd
import pytest
import torch

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.io.checkpoint import AttentionSnapshot
from bertcore.training.callbacks import Callbacks
from bertcore.training.history import PRETRAINING_COLUMNS
from bertcore.training.trainer import Trainer
from bertcore.analysis.records import TrainingRecords

LOSS_COLS = ["mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "lr",
             "eval_mlm_loss", "eval_nsp_loss", "eval_mlm_acc", "eval_nsp_acc"]


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus(seed=0, n_pairs=800)


def tiny(**kw):
    return BertConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2, **kw)


def tc(**kw):
    base = dict(steps=20, batch_size=8, eval_every=10, eval_size=32, snapshot_every=10, warmup_steps=3,
                max_seq_len=32, num_threads=1)
    base.update(kw)
    return TrainConfig(**base)


def test_same_seed_same_history_and_different_seed_differs(corpus):
    a = Trainer(tiny(), tc(), corpus)
    a.run()
    b = Trainer(tiny(), tc(), corpus)
    b.run()
    pd.testing.assert_frame_equal(a.history.frame()[LOSS_COLS], b.history.frame()[LOSS_COLS])
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(pa, pb)
    c = Trainer(tiny(), tc(seed=1), corpus)
    c.run()
    assert not np.allclose(a.history.frame()["mlm_loss"], c.history.frame()["mlm_loss"])


def test_concurrent_trainers_match_solo_runs(corpus):
    """Two sessions training at once: no crosstalk through the global RNG (dropout uses a private generator)."""
    solo = {}
    for seed in (3, 4):
        t = Trainer(tiny(), tc(seed=seed), corpus)
        t.run()
        solo[seed] = t.history.frame()[LOSS_COLS]
    torch.manual_seed(123)
    before = torch.get_rng_state()
    trainers = {seed: Trainer(tiny(), tc(seed=seed), corpus) for seed in (3, 4)}
    threads = [threading.Thread(target=t.run) for t in trainers.values()]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for seed, t in trainers.items():
        pd.testing.assert_frame_equal(t.history.frame()[LOSS_COLS], solo[seed])
    assert torch.equal(torch.get_rng_state(), before), "the trainer must not consume the global torch RNG"


def test_history_columns_eval_rows_and_snapshots(corpus):
    rows, evals = [], []
    t = Trainer(tiny(), tc(steps=25), corpus,
                callbacks=Callbacks(step=lambda ev: rows.append(ev.row), eval=lambda ev: evals.append(ev.row["step"])))
    rec = TrainingRecords.attach(t)
    t.run()
    h = t.history.frame()
    assert list(h.columns) == list(PRETRAINING_COLUMNS)
    assert h["step"].tolist() == list(range(1, 26)) and len(rows) == 25 and evals == [10, 20, 25]
    assert t.done and t.error is None and t.step_count == 25
    evaluated = h.dropna(subset=["eval_mlm_loss"])["step"].tolist()
    assert evaluated == [10, 20, 25]  # every eval_every steps and at the final step
    for c in ("eval_nsp_loss", "eval_mlm_acc", "eval_nsp_acc"):
        assert h.loc[h.step.isin(evaluated), c].notna().all()
        assert h.loc[~h.step.isin(evaluated), c].isna().all()
    assert ((h.mlm_acc >= 0) & (h.mlm_acc <= 1)).all() and ((h.nsp_acc >= 0) & (h.nsp_acc <= 1)).all()
    assert (h.tokens_per_s > 0).all()
    # warmup then linear decay
    assert h.lr.iloc[0] < h.lr.iloc[2] and h.lr.iloc[-1] < h.lr.iloc[5]
    assert h.lr.max() == pytest.approx(t.config.lr)
    assert 0 < t.unigram_baseline < 1
    assert [s.step for s in rec.snapshots] == [0, 10, 20, 25]
    L, H = t.model_config.num_hidden_layers, t.model_config.num_attention_heads
    T = len(rec.probe_tokens)
    assert rec.probe_tokens[0] == "[CLS]" and rec.probe_tokens[-1] == "[SEP]"
    for s in rec.snapshots:
        assert isinstance(s, AttentionSnapshot)
        assert s.attentions.shape == (L, H, T, T) and s.attentions.dtype == np.float32
        np.testing.assert_allclose(s.attentions.sum(-1), 1.0, atol=1e-5)
    assert not np.allclose(rec.snapshots[0].attentions, rec.snapshots[-1].attentions)
    assert t.history.frame() is t.history.frame()  # cached between steps
    assert t.model.training  # evaluation/snapshots restore train mode


def test_vocab_size_set_from_tokenizer(corpus):
    t = Trainer(tiny(vocab_size=7), tc(steps=1), corpus)
    assert t.model.config.vocab_size == t.tokenizer.vocab_size
    assert t.model.bert.embeddings.word_embeddings.weight.shape[0] == t.tokenizer.vocab_size


def test_learning_reduces_loss(corpus):
    t = Trainer(tiny(hidden_dropout_prob=0.0), tc(steps=40, lr=3e-3, batch_size=16, eval_every=0), corpus)
    t.run()
    h = t.history.frame()
    assert h.mlm_loss.iloc[-5:].mean() < h.mlm_loss.iloc[:5].mean() - 0.3


def test_stop_and_run_n(corpus):
    t = Trainer(tiny(), tc(steps=200, eval_every=0, snapshot_every=0), corpus)
    t.run(n=3)
    assert t.step_count == 3 and not t.done

    t.callbacks.on("step", lambda ev: ev.trainer.stop() if ev.trainer.step_count >= 7 else None)
    t.run()
    assert t.step_count == 7 and t.done and t.stopped and t.error is None
    assert not math.isnan(t.history.frame().eval_mlm_loss.iloc[-1])  # final evaluation on stop
    t.run()
    assert t.step_count == 7


def test_stop_from_another_thread(corpus):
    t = Trainer(tiny(), tc(steps=100_000, eval_every=0, snapshot_every=0), corpus)
    th = threading.Thread(target=t.run)
    th.start()
    while t.step_count < 2:
        th.join(0.01)
    t.stop()
    th.join(10)
    assert not th.is_alive() and t.step_count < 100_000


def test_nan_loss_stops_and_keeps_last_good_weights(corpus):
    t = Trainer(tiny(), tc(steps=30, eval_every=0), corpus)
    t.run(n=5)
    good = {k: v.clone() for k, v in t.model.state_dict().items()}
    real_forward = t.model.forward

    def poisoned(*a, **kw):
        out = real_forward(*a, **kw)
        if out.loss is not None:  # the trainer sums the weighted MLM and NSP losses: poison both paths
            out.loss = out.loss * float("nan")
            out.mlm_loss = out.mlm_loss * float("nan")
        return out

    t.model.forward = poisoned
    t.run()
    assert t.done and t.step_count == 5
    assert "NaN at step 6" in t.error and "lower lr" in t.error and "last good weights" in t.error
    for k, v in t.model.state_dict().items():
        assert torch.equal(v, good[k]), k
    assert len(t.history.frame()) == 6 and math.isnan(t.history.frame().mlm_acc.iloc[-1])
    t.step()  # stepping a finished trainer is a no-op
    assert t.step_count == 5 and len(t.history.frame()) == 6


def test_huge_lr_stops_with_message_and_finite_weights(corpus):
    t = Trainer(tiny(), tc(steps=50, lr=10.0, warmup_steps=0, eval_every=0), corpus)
    init = [p.detach().clone() for p in t.model.parameters()]
    t.run()
    assert t.done and t.error and "lower lr" in t.error
    assert t.step_count < 50
    for p, p0 in zip(t.model.parameters(), init):
        assert torch.isfinite(p).all()
        if "weights (after step 0)" in t.error:  # rolled back to the copy taken before the first update
            assert torch.equal(p, p0)
    # the kept weights give a sane loss again
    t2 = Trainer(tiny(), tc(steps=1), corpus, tokenizer=t.tokenizer, model=t.model)
    assert t2.evaluate()["eval_mlm_loss"] < t.divergence_threshold


def test_thread_count_restored(corpus):
    base = torch.get_num_threads()
    t = Trainer(tiny(), tc(steps=2, num_threads=1), corpus)
    t.run()
    assert torch.get_num_threads() == base
