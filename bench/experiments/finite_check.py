"""``python -m bench.experiments.finite_check [--reps N] [--json]``: what refusing NaN/inf weights costs at load.

``load_checkpoint`` checks every weight tensor (``bertcore.io.checkpoint.nonfinite_problem``: one float32 sum
per tensor, confirmed value by value only when the sum is not finite). Two checkpoints, saved to a temp folder:
the app's default model (built-in corpus tokenizer, default BertConfig) and all-MiniLM-L6-v2 imported into a
bertcore checkpoint (22.9 M parameters, the largest model the app offers). For each: the median time of
``load_checkpoint`` (check included) and of the check alone on the loaded weights, measured interleaved in one
process, and their ratio; beside it the plain elementwise check (``torch.isfinite(v).all()`` per tensor) it
replaced. Numbers go to docs/BENCH.md ("Refusing NaN/inf weights"); nothing here is asserted.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def measure(reps: int = 15) -> dict:
    import torch

    from bertcore.io.checkpoint import (
        load_checkpoint,
        load_safetensors,
        nonfinite_problem,
        save_checkpoint,
        untrained_bundle,
    )
    from bertcore.io.hf_interop import import_hf, packaged_minilm_dir

    torch.set_num_threads(1)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = {"default": untrained_bundle()}
        if packaged_minilm_dir() is not None:
            models["minilm"] = import_hf(packaged_minilm_dir())
        for name, bundle in models.items():
            d = Path(tmp) / name
            save_checkpoint(bundle, d)
            weights = load_safetensors(d / "model.safetensors", "the weights")
            load_checkpoint(d)  # warm the file cache and the imports
            loads, checks, plain = [], [], []
            for _ in range(reps):  # interleaved: all three see the same machine load
                t0 = time.perf_counter()
                load_checkpoint(d)
                loads.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                assert nonfinite_problem(weights) is None
                checks.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                assert all(bool(torch.isfinite(v).all()) for v in weights.values())
                plain.append(time.perf_counter() - t0)
            load_ms, check_ms = statistics.median(loads) * 1e3, statistics.median(checks) * 1e3
            out[name] = {"params": sum(v.numel() for v in weights.values()),
                         "weights_mb": round((d / "model.safetensors").stat().st_size / 2**20, 2),
                         "load_checkpoint_ms": round(load_ms, 2), "isfinite_check_ms": round(check_ms, 3),
                         "check_share_of_load": round(check_ms / load_ms, 4),
                         "elementwise_isfinite_ms": round(statistics.median(plain) * 1e3, 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = measure(args.reps)
    if args.json:
        print(json.dumps(res))
    else:
        for name, r in res.items():
            print(f"{name}: {r['params']:,} parameters ({r['weights_mb']} MB): load_checkpoint "
                  f"{r['load_checkpoint_ms']} ms, isfinite check {r['isfinite_check_ms']} ms "
                  f"({100 * r['check_share_of_load']:.1f}% of the load; elementwise isfinite "
                  f"{r['elementwise_isfinite_ms']} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
