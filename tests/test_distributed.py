"""Data-parallel training from shards: 2 gloo processes on 127.0.0.1 take the same steps as 1 process on the
same global batch, and gradient accumulation does too (losses to 1e-4). Dropout is off: each process draws its
own dropout masks, which is the one thing a distributed run cannot share with a single process."""
import math

import pytest
import torch

from bench.experiments.scale import train_worker
from bertcore.data.corpus import builtin_corpus
from bertcore.data.shards import prepare
from bertcore.errors import ConfigError
from bertcore.training import distributed
from bertcore.training.device import Runtime, check_precision, resolve_device

MODEL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
STEPS = 20


def train_kw(batch_size):
    return dict(steps=STEPS, batch_size=batch_size, lr=3e-3, warmup_steps=2, max_seq_len=32, eval_every=0,
                snapshot_every=0, eval_size=16, seed=3)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    pairs = builtin_corpus(seed=5, n_pairs=600).pairs
    docs = ["\n".join(f"{a} {b}" for a, b in pairs[k:k + 4]) for k in range(0, len(pairs), 4)]
    (tmp / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    prepare(tmp / "corpus.txt", tmp / "data", vocab_size=300, quiet=True)
    return str(tmp / "data")


def _close(a, b, tol=1e-4):
    assert len(a) == len(b) == STEPS
    for k, (x, y) in enumerate(zip(a, b)):
        assert math.isfinite(x) and abs(x - y) <= tol, f"step {k + 1}: {x} vs {y}"


def test_two_gloo_processes_match_one_process_on_the_same_global_batch(data_dir):
    one = train_worker(0, 1, data_dir, MODEL, train_kw(8))
    two = distributed.spawn_local(train_worker, 2, args=(data_dir, MODEL, train_kw(4)))
    for r in two:  # every rank logs the global losses
        _close(r["mlm_loss"], one["mlm_loss"])
        _close(r["nsp_loss"], one["nsp_loss"])
    assert one["mlm_loss"][-1] < one["mlm_loss"][0] - 0.2  # it learned something: the test can fail


def test_gradient_accumulation_matches_one_big_batch(data_dir):
    one = train_worker(0, 1, data_dir, MODEL, train_kw(8))
    acc = train_worker(0, 1, data_dir, MODEL, train_kw(4), grad_accum=2)
    _close(acc["mlm_loss"], one["mlm_loss"])
    _close(acc["nsp_loss"], one["nsp_loss"])
    half = train_worker(0, 1, data_dir, MODEL, train_kw(4))  # a different (smaller) global batch differs
    assert max(abs(h - o) for h, o in zip(half["mlm_loss"], one["mlm_loss"])) > 1e-2


def test_device_and_precision_checks():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda:0" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="use one of"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="--device cpu"):
            resolve_device("cuda")
    with pytest.raises(ConfigError):
        check_precision("fp16", "cpu")
    with pytest.raises(ConfigError):
        Runtime(grad_accum=0)
    rt = Runtime(precision="bf16")
    with rt.autocast():
        y = torch.nn.functional.linear(torch.randn(2, 3), torch.randn(4, 3))
    assert y.dtype == torch.bfloat16
