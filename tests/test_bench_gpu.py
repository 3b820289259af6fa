"""`python -m bench.gpu --quick` (issue 43's GPU bench) on a CPU, so the bench never rots between GPU sessions:
every section runs on the tiny model and its JSON holds sane numbers. No timing is asserted (CI machines vary);
what is asserted is arithmetic that holds on any machine: the FLOP count, ratios of the numbers printed, and that
two runs with one seed give identical histories on a CPU."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
TINY = (2000, 64, 2, 4, 256, 48, 32)  # bench.gpu.steps.QUICK_SHAPES["tiny"]


def _run(args, tmp: Path, timeout=900):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = tmp / "gpu.json"
    p = subprocess.run([sys.executable, "-m", "bench.gpu", *args, "--out", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    return p, (json.loads(out.read_text()) if out.is_file() else None)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    p, r = _run(["--quick", "--device", "cpu"], tmp_path_factory.mktemp("bench_gpu"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return r, p.stdout


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_every_section_ran(quick):
    r, _ = quick
    assert r["quick"] is True and r["machine"]["device"] == "cpu"
    for s in ("peak", "steps", "loop", "app", "determinism"):
        assert s in r and "error" not in r[s], (s, r.get(s))
        assert r[s]["seconds"] >= 0
    assert all({"target", "value", "met"} <= set(t) for t in r["targets"])
    assert r["peak"]["bf16"]["n"] == 512 and _positive(r["peak"]["bf16"]["tflops"])
    assert _positive(r["peak"]["fp32"]["tflops"])


def test_step_table(quick):
    r, stdout = quick
    rows = r["steps"]["rows"]
    assert [(c["shape"], c["precision"]) for c in rows] == [("tiny", "fp32"), ("tiny", "bf16")]
    V, D, L, H, F, T, B = TINY
    for c in rows:
        assert (c["vocab"], c["hidden"], c["layers"], c["heads"], c["ffn"], c["seq"], c["batch"]) == TINY
        for k in ("bertcore_steps_s", "hf_steps_s", "ratio", "bertcore_useful_tflops", "hf_useful_tflops"):
            assert _positive(c[k]), (c["precision"], k, c[k])
        assert c["ratio"] == pytest.approx(c["bertcore_steps_s"] / c["hf_steps_s"], rel=1e-9)
        assert c["steps"]["bertcore"] == c["steps"]["transformers"] > 0  # equal step counts for both
        # the textbook count, written out here: per layer 2BT(4D^2 + 2DF) + 4BT^2 D; MLM head on the masked
        # positions 2M(D^2 + DV); pooler + NSP 2B(D^2 + 2D); a training step is 3x the forward
        M = c["masked_per_batch"]
        assert 0.1 * B * T < M < 0.2 * B * T  # BERT §3.1: 15% of the tokens
        fwd = L * (2 * B * T * (4 * D * D + 2 * D * F) + 4 * B * T * T * D) + 2 * M * (D * D + D * V) \
            + 2 * B * (D * D + 2 * D)
        assert c["useful_tflop_per_step"] * 1e12 == pytest.approx(3 * fwd, rel=1e-9)
        assert c["bertcore_useful_tflops"] == pytest.approx(c["useful_tflop_per_step"] * c["bertcore_steps_s"])
        assert c["bertcore_bf16_peak_frac"] == pytest.approx(c["bertcore_useful_tflops"] / r["peak"]["bf16"]["tflops"])
        assert c["bertcore_peak_mib"] is None and c["hf_peak_mib"] is None  # torch counts no peak on a CPU
    assert "| tiny (2000, 64, 2, 4, 256, 48, 32) | fp32 |" in stdout
    assert "| tiny (2000, 64, 2, 4, 256, 48, 32) | bf16 |" in stdout


def test_loop_vs_step(quick):
    r, stdout = quick
    (c,) = r["loop"]["rows"]
    assert c["shape"] == "tiny" and c["precision"] == "fp32" and c["vocab"] == 2000
    assert c["loop_steps"] == 24 and c["loop_timed_steps"] == 24 - 1 - 4  # first 4 and the last left out
    assert _positive(c["loop_steps_s"]) and _positive(c["step_steps_s"])
    assert c["ratio"] == pytest.approx(c["loop_steps_s"] / c["step_steps_s"])
    assert 0 < c["real_tokens_per_batch"] <= 48 * 32
    assert "| loop: shape |" in stdout


def test_default_app_run(quick):
    r, stdout = quick
    a = r["app"]
    assert a["status"] == "finished" and a["steps"] == 20
    assert a["trained_on"] == "cpu, fp32" == a["asked_runtime"]
    assert a["evaluations"] == 2  # measure_cadence(20): every 10 steps
    assert 0 < a["train_seconds"] < a["wall_s"]
    assert 0 < a["eval_mlm_acc"] <= 1
    assert "default app run: 20 steps on cpu, fp32" in stdout


def test_determinism_on_a_cpu(quick):
    r, stdout = quick
    d = r["determinism"]
    for pair in ("default", "deterministic"):
        # on a CPU the same seed gives the same curve, with or without deterministic kernels
        assert d[pair]["identical"] is True and d[pair]["max_abs_diff"] == 0.0, (pair, d[pair])
        a, b = d[pair]["final_mlm_loss"]
        assert a == b and math.isfinite(a)
    assert d["default"]["torch_deterministic"] is False
    assert math.isfinite(d["deterministic_cost"])
    assert "determinism, default: two runs identical" in stdout


def test_a_failing_section_is_reported_and_the_rest_runs(tmp_path, monkeypatch):
    from bench import gpu

    def broken(ctx):
        raise RuntimeError("planted failure")

    monkeypatch.setitem(gpu.RUNNERS, "app", broken)
    threads = torch.get_num_threads()
    rc = gpu.main(["--quick", "--device", "cpu", "--sections", "app,peak", "--out", str(tmp_path / "r.json")])
    r = json.loads((tmp_path / "r.json").read_text())
    assert rc == 1
    assert r["app"]["error"] == "RuntimeError: planted failure"
    assert _positive(r["peak"]["bf16"]["tflops"])  # the section after it still ran
    assert torch.get_num_threads() == threads  # main gives the process its thread count back
    assert "BERTCORE_MAX_MODEL_MB" not in os.environ or os.environ["BERTCORE_MAX_MODEL_MB"] != gpu.BIG_BUDGET_MB


def test_bad_arguments_say_what_to_do(capsys):
    from bench import gpu

    assert gpu.main(["--sections", "peak,nope"]) == 2
    assert "error: unknown section 'nope'" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert gpu.main(["--device", "cuda"]) == 2
        assert "torch sees no CUDA GPU" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_check.sh runs it there)")
def test_quick_on_a_gpu(tmp_path):
    p, r = _run(["--quick", "--device", "cuda", "--sections", "peak,steps"], tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert r["machine"]["device"] == "cuda:0" and r["machine"]["gpu"]
    for c in r["steps"]["rows"]:
        assert _positive(c["bertcore_steps_s"]) and _positive(c["hf_steps_s"])
        assert _positive(c["bertcore_peak_mib"]) and _positive(c["hf_peak_mib"])
