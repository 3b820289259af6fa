"""A step without a host read (bertcore.training.guard, the GPU's way, run here on the CPU with defer_rows=True):
the trainer reads the numbers once per GOOD_COPY_EVERY steps, the curve is the one read at once, and a NaN or a
diverged loss ends training with the same message, weights and rows as when every step is read."""
import math
import os

import numpy as np
import pytest
import torch

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.training.callbacks import Callbacks
from bertcore.training.guard import GOOD_COPY_EVERY
from bertcore.training.history import PendingRow
from bertcore.training.trainer import Trainer

HOT_FILES = ("trainer.py", "guard.py", "loop.py", "history.py")  # bertcore/training: the step's own code


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus(seed=0, n_pairs=300)


def tiny():
    return BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=64)


def tc(**kw):
    return TrainConfig(**{**dict(steps=30, batch_size=8, eval_every=0, eval_size=16, snapshot_every=0,
                                 max_seq_len=32, warmup_steps=2, seed=2, num_threads=1), **kw})


def frame(t):
    return t.history.frame().drop(columns=["tokens_per_s"]).to_numpy()


@pytest.fixture()
def host_reads(monkeypatch):
    """Counts tensor -> Python conversions (item, tolist, float, int, bool) made by the step's own code."""
    counter = {"n": 0}
    here = os.sep + os.path.join("bertcore", "training") + os.sep

    def counting(name):
        real = getattr(torch.Tensor, name)

        def f(self, *a, **kw):
            caller = __import__("sys")._getframe(1).f_code.co_filename
            if here in caller and caller.endswith(HOT_FILES):
                counter["n"] += 1
            return real(self, *a, **kw)

        monkeypatch.setattr(torch.Tensor, name, f)

    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        counting(name)
    return counter


def test_deferred_steps_read_once_per_ten_and_keep_the_curve(corpus, host_reads):
    at_once = Trainer(tiny(), tc(), corpus)
    for _ in range(30):  # step() alone, as below (run() would set the thread count)
        at_once.step()
    t = Trainer(tiny(), tc(), corpus, defer_rows=True)
    reads_per_step = []
    for _ in range(30):
        before = host_reads["n"]
        row = t.step()
        reads_per_step.append(host_reads["n"] - before)
        assert isinstance(row, PendingRow) == (t.step_count % GOOD_COPY_EVERY != 1 and t.step_count != 30)
    read_at = [s for s, n in enumerate(reads_per_step, 1) if n]
    assert read_at == [1, 11, 21, 30]  # before the good copies of steps 1, 11, 21, and at the end (evaluation)
    assert t._guard.reads == 4
    np.testing.assert_array_equal(frame(t), frame(at_once))
    for p, q in zip(t.model.parameters(), at_once.model.parameters()):
        assert torch.equal(p, q)


def test_a_pending_row_reads_when_asked_and_run_flushes(corpus):
    t = Trainer(tiny(), tc(), corpus, defer_rows=True)
    t.step()  # step 1 is read (the first good copy)
    row = t.step()
    assert isinstance(row, PendingRow) and row["step"] == 2 and len(t.history) == 1 and t._guard.reads == 1
    assert math.isfinite(row["mlm_loss"]) and len(t.history) == 2 and t._guard.reads == 2
    assert dict(row) == t.history.last()
    stopper = Callbacks(step=lambda ev: ev.trainer.stop() if ev.trainer.step_count == 7 else None)
    t.callbacks = stopper
    t.run()  # stops after step 7, mid-window: its rows reach the history, then the final evaluation
    assert list(t.history.frame().step) == list(range(1, 8))
    assert math.isfinite(t.history.last()["eval_mlm_loss"]) and not t._guard.pending


def poison_from(t, step: int) -> None:
    """From optimizer step ``step`` on, every loss is NaN."""
    real = t.model.forward

    def poisoned(*a, **kw):
        out = real(*a, **kw)
        if t.step_count >= step - 1:
            out.mlm_loss = out.mlm_loss * float("nan")
        return out

    t.model.forward = poisoned


@pytest.mark.parametrize("bad_step", [7, 11])
def test_nan_mid_window_ends_as_if_read_at_once(corpus, bad_step):
    runs = {}
    for deferred in (False, True):
        t = Trainer(tiny(), tc(), corpus, defer_rows=deferred)
        poison_from(t, bad_step)
        t.run()
        runs[deferred] = t
    a, b = runs[False], runs[True]
    assert a.error == b.error and f"loss became NaN at step {bad_step}" in b.error
    assert f"(after step {bad_step - 1})" in b.error
    assert a.step_count == b.step_count == bad_step - 1 and b.done
    assert len(b.history) == bad_step  # the bad step's row; the steps run after it on the device are dropped
    np.testing.assert_array_equal(frame(a), frame(b))
    for p, q in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(p, q)  # the updates after the bad step were skipped on the device
    for sa, sb in zip(a.optimizer.state.values(), b.optimizer.state.values()):
        assert torch.equal(sa["exp_avg"], sb["exp_avg"]) and float(sa["step"]) == float(sb["step"])


def test_divergence_ends_as_if_read_at_once(corpus):
    runs = {}
    for deferred in (False, True):
        t = Trainer(tiny(), tc(steps=50, lr=10.0, warmup_steps=0), corpus, defer_rows=deferred)
        t.run()
        runs[deferred] = t
    a, b = runs[False], runs[True]
    assert b.error and a.error == b.error and "lower lr" in b.error and a.step_count == b.step_count < 50
    np.testing.assert_array_equal(frame(a), frame(b))
    for p, q in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(p, q) and torch.isfinite(p).all()
