"""Smoke test of `python -m bertcore bench --quick --json`: one JSON object with the expected structure and
positive, finite numbers. No timing assertions (CI machines vary); the numbers live in docs/BENCH.md."""
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


@pytest.fixture(scope="module")
def quick():
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "bertcore", "bench", "--quick", "--json"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)  # exactly one JSON object on stdout (progress goes to stderr)


def test_structure(quick):
    assert quick["quick"] is True
    for key in ("machine", "peak", "flops_formula", "training", "time_to_skill", "inference", "app", "targets"):
        assert key in quick
    assert [c["config"] for c in quick["training"]] == ["tiny", "small", "base4"]
    assert "skipped" in quick["app"]  # --quick skips the app part, with a note
    for name in ("tiny", "base4"):
        for op in ("fill_mask", "inspect_pair"):
            assert set(quick["inference"][name][op]) >= {"p50_ms", "p95_ms"}
    for k in ("bertcore", "transformers"):
        assert "time_to_skill_s" in quick["time_to_skill"][k]
    assert all({"target", "value", "met"} <= set(t) for t in quick["targets"])


def test_numbers_positive_and_finite(quick):
    assert quick["peak"]["gflops"] > 0
    for c in quick["training"]:
        for k in ("bertcore_steps_s", "hf_steps_s", "ratio", "bertcore_gflops", "hf_gflops",
                  "bertcore_peak_frac", "useful_gflop_per_step"):
            assert c[k] > 0 and math.isfinite(c[k]), (c["config"], k, c[k])
    for name in ("tiny", "base4"):
        for op in ("fill_mask", "inspect_pair"):
            v = quick["inference"][name][op]
            assert 0 < v["p50_ms"] <= v["p95_ms"] and math.isfinite(v["p95_ms"])
    sk = quick["time_to_skill"]
    assert 0 < sk["unigram_baseline"] < sk["target_acc"] < 1
    for k in ("bertcore", "transformers"):
        assert sk[k]["steps_done"] > 0
        assert 0 <= sk[k]["final_acc"] <= 1
    assert all(math.isfinite(x) and x >= 0 for x in _numbers(quick["training"]))
    mini = quick["inference"]["minilm"]
    if "skipped" not in mini:
        assert mini["load_s"] > 0 and mini["heads"] == 72 and mini["inspect_pair"]["p50_ms"] > 0


def test_flops_formula_counts_mlm_work():
    from bertcore.bench import flops_per_step
    from bertcore.config import BertConfig

    cfg = BertConfig(vocab_size=2000, hidden_size=64, intermediate_size=256)
    sel = flops_per_step(cfg, 32, 32, 150, mlm_everywhere=False)
    full = flops_per_step(cfg, 32, 32, 150, mlm_everywhere=True)
    assert full - sel == pytest.approx(3 * 2 * (32 * 32 - 150) * (64 * 64 + 64 * 2000))
