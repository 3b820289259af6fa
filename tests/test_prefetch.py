"""Batches made ahead (bertcore.training.prefetch): the same curve as without, bit for bit, from the in-memory corpus
and from shards, through a resume; the thread ends on the run's end, a stop, an error and Ctrl-C."""
import threading

import numpy as np
import pytest
import torch

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.data.shards import prepare
from bertcore.data.tokenization import SPECIAL_TOKENS
from bertcore.launch import service
from bertcore.training.callbacks import Callbacks
from bertcore.training.device import Runtime
from bertcore.training.drive import StopSignal
from bertcore.training.prefetch import THREAD_NAME, Prefetcher
from bertcore.training.trainer import Trainer


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus(seed=0, n_pairs=400)


def tiny():
    return BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=64)


def tc(**kw):
    return TrainConfig(**{**dict(steps=14, batch_size=8, eval_every=5, eval_size=16, snapshot_every=0,
                                 max_seq_len=32, warmup_steps=2, seed=5, num_threads=1), **kw})


def curve(trainer) -> np.ndarray:
    return trainer.history.frame().drop(columns=["tokens_per_s"]).to_numpy()


def watch(data, method: str) -> dict:
    """Count the calls of ``data.method`` by the name of the thread that makes them."""
    real, seen = getattr(data, method), {}

    def counted(*a, **kw):
        name = threading.current_thread().name
        seen[name] = seen.get(name, 0) + 1
        return real(*a, **kw)

    setattr(data, method, counted)
    return seen


def prefetch_threads() -> list:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_prefetching_gives_the_same_curve_and_data_state(corpus):
    runs, makers = {}, {}
    for depth in (0, 3):
        t = Trainer(tiny(), tc(), corpus, runtime=Runtime(grad_accum=2), prefetch=depth)
        makers[depth] = watch(t.data, "sample_batch")
        t.run(6)  # two runs of run(): each makes its own thread
        t.run()
        runs[depth] = t
    assert makers[0] == {"MainThread": 28} and makers[3] == {THREAD_NAME: 28}  # 14 steps x 2 micro-batches
    a, b = runs[0], runs[3]
    assert len(a.history) == 14
    np.testing.assert_array_equal(curve(a), curve(b))  # NaN where both are NaN
    assert torch.equal(a._gen.get_state(), b._gen.get_state())  # the trainer's generator: where a plain run has it
    for p, q in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(p, q)
    assert not prefetch_threads()


def test_an_error_while_making_a_batch_is_raised_at_the_same_step_and_the_thread_ends(corpus):
    for depth in (0, 2):
        t = Trainer(tiny(), tc(eval_every=0), corpus, prefetch=depth)
        real, calls = t.data.sample_batch, []

        def failing(*a, real=real, calls=calls, **kw):
            calls.append(1)
            if len(calls) == 5:
                raise OSError("disk gone")
            return real(*a, **kw)

        t.data.sample_batch = failing
        with pytest.raises(OSError, match="disk gone"):
            t.run()
        assert t.step_count == 4  # the fifth step never ran, with or without the thread
        assert not prefetch_threads()


def test_stop_and_ctrl_c_end_the_thread(corpus):
    t = Trainer(tiny(), tc(steps=200, eval_every=0), corpus, prefetch=4)
    t.callbacks.on("step", lambda ev: ev.trainer.stop() if ev.trainer.step_count == 3 else None)
    t.run()
    assert t.step_count == 3 and t.done and not prefetch_threads()

    def interrupt(ev):
        if ev.trainer.step_count == 2:
            raise KeyboardInterrupt

    t = Trainer(tiny(), tc(steps=200, eval_every=0), corpus, prefetch=4,
                callbacks=Callbacks(step=interrupt))
    with pytest.raises(KeyboardInterrupt):
        t.run()
    assert t.step_count == 2 and not prefetch_threads()


def fake_batch(step: int) -> dict:
    return {"input_ids": torch.full((1, 3), step), "attention_mask": torch.tensor([[1, 1, 0]]),
            "mlm_labels": torch.tensor([[-100, step, -100]]), "nsp_labels": torch.tensor([0])}


def test_prefetcher_alone_order_counts_errors_and_close():
    made = []

    def make(step):
        made.append(step)
        if step == 3:
            raise ValueError("bad step 3")
        return [fake_batch(step)], None

    with Prefetcher(make, 0, 10, depth=2) as pf:
        items = [pf.get(s) for s in range(3)]
        assert [int(i.batches[0]["input_ids"][0, 0]) for i in items] == [0, 1, 2]
        assert items[1].counts == [(1.0, 1.0, 2.0)]  # masked tokens, examples, real tokens: counted on the CPU
        assert pf.get(7) is None  # out of order: the caller makes it itself
        with pytest.raises(ValueError, match="bad step 3"):
            pf.get(3)
    assert made == [0, 1, 2, 3] and not pf.alive
    slow = Prefetcher(lambda s: ([fake_batch(s)], None), 0, 10_000, depth=1)
    slow.close()  # with a full queue: the thread still ends
    assert not slow.alive


def doc_text(k: int) -> str:
    return " ".join(f"d{k} s{j} w{(k + j) % 7} w{(k * j) % 5} ." for j in range(2 + k % 5))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prefetch_shards")
    (tmp / "corpus.txt").write_text("\n\n".join(doc_text(k) for k in range(30)) + "\n", encoding="utf-8")
    words = [f"d{k}" for k in range(30)] + [f"s{j}" for j in range(7)] + [f"w{i}" for i in range(7)] + ["."]
    (tmp / "vocab.txt").write_text("\n".join(SPECIAL_TOKENS + words) + "\n", encoding="utf-8")
    prepare(tmp / "corpus.txt", tmp / "data", vocab=str(tmp / "vocab.txt"), shard_tokens=200, quiet=True)
    return tmp / "data"


AHEAD: list[dict] = []  # per run with ahead(): the threads that made its batches


def ahead(depth: int, stop_at: int | None = None, stop: StopSignal | None = None) -> Callbacks:
    """Callbacks that switch prefetching on before the run starts (a CPU trainer makes none by default)."""
    cb = Callbacks(start=lambda ev: setattr(ev.trainer.batches, "depth", depth))
    cb.on("start", lambda ev: AHEAD.append(watch(ev.trainer.data, "step_batches" if hasattr(ev.trainer.data,
                                                   "step_batches") else "sample_batch")))
    if stop_at is not None:
        cb.on("step", lambda ev: stop.request("test") if ev.trainer.step_count == stop_at else None)
    return cb


@pytest.mark.parametrize("source", ["corpus", "shards"])
def test_resume_with_prefetching_continues_the_same_curve(source, corpus, shards, tmp_path):
    bert = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=64, hidden_dropout_prob=0.1)
    t = tc(steps=12, eval_every=4, max_seq_len=40)
    src = {"corpus": corpus} if source == "corpus" else {"data": str(shards)}
    plain = service.train(service.RunSpec(bert, t, **src, name="plain", skills=False),
                          tmp_path / "plain")
    stop = StopSignal()
    part = service.train(service.RunSpec(bert, t, **src, name="part", skills=False), tmp_path / "part", stop=stop,
                         callbacks=ahead(2, 6, stop))
    assert part.status == "stopped" and part.trainer.step_count == 6 and not prefetch_threads()
    done = service.resume(tmp_path / "part", callbacks=ahead(2))
    assert done.status == "finished" and not prefetch_threads()
    # both halves made their batches ahead; the first made a few past its stop, unused (the resume file holds the
    # generator of the data trained on)
    assert list(AHEAD[0]) == [THREAD_NAME] and 6 <= AHEAD[0][THREAD_NAME] <= 9 and AHEAD[1] == {THREAD_NAME: 6}
    AHEAD.clear()
    h1, h2 = plain.trainer.history.frame(), done.trainer.history.frame()
    assert list(h1.step) == list(h2.step) == list(range(1, 13))
    for c in ("mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "lr"):
        np.testing.assert_allclose(h2[c].to_numpy(), h1[c].to_numpy(), atol=1e-6, rtol=0, err_msg=c)
