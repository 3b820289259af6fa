"""Smoke test of `python -m bench --quick --json`, in two parts (`--only`): one JSON object each with the expected
structure and positive, finite numbers. No timing assertions (CI machines vary); the numbers live in docs/BENCH.md."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _numbers(x):
    if isinstance(x, bool):
        return
    if isinstance(x, (int, float)):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _numbers(v)
    elif isinstance(x, list):
        for v in x:
            yield from _numbers(v)


def _bench(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def _quick(only: str) -> dict:
    p = _bench("--quick", "--json", "--only", only)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)  # exactly one JSON object on stdout (progress goes to stderr)


@pytest.fixture(scope="module")
def quick_training():
    """The training comparison of a quick run (tiny, small, base4 against transformers, the matmul peak)."""
    return _quick("training")


@pytest.fixture(scope="module")
def quick_user():
    """The rest of a quick run: time to skill (up to the first evaluation) and inference."""
    return _quick("skill,inference")


def test_training_part(quick_training):
    q = quick_training
    assert q["quick"] is True
    for key in ("machine", "peak", "flops_formula", "training", "targets"):
        assert key in q
    assert "time_to_skill" not in q and "inference" not in q and "skipped" in q["app"]  # --only training
    assert [c["config"] for c in q["training"]] == ["tiny", "small", "base4"]
    assert q["peak"]["gflops"] > 0
    for c in q["training"]:
        for k in ("bertcore_steps_s", "hf_steps_s", "ratio", "bertcore_gflops", "hf_gflops",
                  "bertcore_peak_frac", "useful_gflop_per_step"):
            assert c[k] > 0 and math.isfinite(c[k]), (c["config"], k, c[k])
    assert all(math.isfinite(x) and x >= 0 for x in _numbers(q["training"]))
    assert [t["target"].split(":")[0] for t in q["targets"]][:3] == ["tiny", "small", "base4"]
    assert all({"target", "value", "met"} <= set(t) for t in q["targets"])


def test_skill_and_inference_parts(quick_user):
    q = quick_user
    assert q["training"] == [] and "skipped" in q["app"]
    for name in ("tiny", "base4"):
        for op in ("fill_mask", "inspect_pair"):
            v = q["inference"][name][op]
            assert set(v) >= {"p50_ms", "p95_ms"}
            assert 0 < v["p50_ms"] <= v["p95_ms"] and math.isfinite(v["p95_ms"])
    sk = q["time_to_skill"]
    assert 0 < sk["unigram_baseline"] < sk["target_acc"] < 1
    for k in ("bertcore", "transformers"):
        assert "time_to_skill_s" in sk[k]
        assert sk[k]["steps_done"] == sk["eval_every"]  # --quick: up to the first evaluation, for both
        assert 0 <= sk[k]["final_acc"] <= 1
    mini = q["inference"]["minilm"]
    if "skipped" not in mini:
        assert mini["load_s"] > 0 and mini["heads"] == 72 and mini["inspect_pair"]["p50_ms"] > 0
    assert any(t["target"].startswith("bertcore reaches 2x unigram") for t in q["targets"])


def test_only_takes_known_parts():
    p = _bench("--only", "training,nope")
    assert p.returncode == 2 and "--only 'training,nope': choose from training, skill, inference, app" in p.stderr


def test_flops_formula_counts_mlm_work():
    from bench.training import flops_per_step
    from bertcore.config import BertConfig

    cfg = BertConfig(vocab_size=2000, hidden_size=64, intermediate_size=256)
    sel = flops_per_step(cfg, 32, 32, 150, mlm_everywhere=False)
    full = flops_per_step(cfg, 32, 32, 150, mlm_everywhere=True)
    assert full - sel == pytest.approx(3 * 2 * (32 * 32 - 150) * (64 * 64 + 64 * 2000))
    pruned = flops_per_step(cfg, 32, 32, 150, mlm_everywhere=False, rows=32 * 32, slots=32)
    assert pruned == pytest.approx(sel)  # the pruned last layer on every row is the full layer


def test_loss_rows_path_equals_full_path():
    """The training path (mlm_labels given) runs the last block only at [CLS] and the selected positions;
    its losses, logits and gradients equal the full path's (forced here by output_hidden_states=True)."""
    import torch

    from bertcore.config import BertConfig
    from bertcore.model.bert import BertForPreTraining

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 120, (4, 20), generator=g)
    ids[:, 0] = 2
    am = torch.ones_like(ids)
    am[1, 12:] = 0
    ids[am == 0] = 0
    tt = torch.zeros_like(ids)
    tt[:, 10:] = 1
    labels = torch.full_like(ids, -100)
    sel = (torch.rand(4, 20, generator=g) < 0.2) & (am == 1)
    sel[:, 0] = False
    sel[3] = False  # a sequence with nothing selected
    labels[sel] = ids[sel]
    nsp = torch.tensor([0, 1, 0, 1])
    for norm in ("post", "pre"):
        torch.manual_seed(0)
        m = BertForPreTraining(BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          intermediate_size=64, max_position_embeddings=40,
                                          norm_placement=norm)).eval()
        params = list(m.parameters())
        fast = m(ids, tt, am, mlm_labels=labels, nsp_labels=nsp)
        full = m(ids, tt, am, mlm_labels=labels, nsp_labels=nsp, output_hidden_states=True)
        assert all(torch.equal(a, b) for a, b in zip(fast.mlm_positions, full.mlm_positions))
        assert torch.allclose(fast.mlm_logits, full.mlm_logits, atol=1e-5)
        assert torch.allclose(fast.nsp_logits, full.nsp_logits, atol=1e-5)
        for a, b in zip(torch.autograd.grad(fast.loss, params), torch.autograd.grad(full.loss, params)):
            assert torch.allclose(a, b, atol=1e-5)
