"""``python -m bench [--quick] [--json]``: every benchmark of the project in one run (see docs/BENCH.md).

Progress goes to stderr; stdout carries only the tables or the JSON object. No timing is asserted anywhere.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from bench import user
from bench.training import (
    CONFIGS,
    FLOPS_FORMULA,
    bench_training,
    loadavg,
    machine_info,
    matmul_peak,
    render,
    targets,
    torch,
)


PARTS = ("training", "skill", "inference", "app")  # --only: the sections of one run


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)  # progress on stderr: stdout carries only the table / JSON


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run (< 2 min): fewer steps, no app part")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--threads", type=int, default=2, help="torch threads for the training comparison (default 2)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of tiny,small,base4")
    p.add_argument("--no-app", action="store_true", help="skip the app measurements")
    p.add_argument("--only", default=",".join(PARTS), help="comma-separated subset of " + ",".join(PARTS))
    args = p.parse_args(argv)
    parts = {x.strip() for x in args.only.split(",") if x.strip()}
    if not parts or parts - set(PARTS):
        p.error(f"--only {args.only!r}: choose from {', '.join(PARTS)}")
    from bertcore.data.corpus import builtin_corpus

    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    r = {"command": "python -m bench" + (" --quick" if args.quick else ""), "quick": args.quick,
         "machine": machine_info(args.threads), "flops_formula": FLOPS_FORMULA}
    log("bench: matmul peak ...")
    peaks = [matmul_peak(args.quick)]
    corpus = builtin_corpus(n_pairs=3000) if args.quick else builtin_corpus()
    r["corpus_pairs"] = len(corpus)
    r["training"] = []
    for name in [c.strip() for c in args.configs.split(",") if c.strip()] if "training" in parts else []:
        if name not in CONFIGS:
            p.error(f"unknown config {name!r}; choose from {', '.join(CONFIGS)}")
        log(f"bench: training {name} ...")
        peaks.append(matmul_peak(args.quick))  # re-measured next to each config; the best one is the peak
        peak = max(p_["gflops"] for p_ in peaks)
        r["training"].append(bench_training(name, corpus, args.quick, peak))
    peaks.append(matmul_peak(args.quick))
    r["peak"] = {"n": peaks[0]["n"], "gflops": max(p_["gflops"] for p_ in peaks),
                 "samples": [round(p_["gflops"], 1) for p_ in peaks]}
    for c in r["training"]:  # the fractions use the best peak of the whole run (conservative)
        for k in ("bertcore", "hf"):
            c[f"{k}_peak_frac"] = c[f"{k}_gflops"] / r["peak"]["gflops"]
            c[f"{k}_useful_peak_frac"] = c[f"{k}_useful_gflops"] / r["peak"]["gflops"]

    if "skill" in parts:
        log("bench: time to skill ...")
        r["time_to_skill"] = user.bench_skill(builtin_corpus(), args.quick)
    if "inference" in parts:
        log("bench: inference ...")
        r["inference"] = user.bench_inference(corpus, args.quick)
    if "app" not in parts:
        r["app"] = {"skipped": "app part not run (--only)"}
    elif args.quick or args.no_app:
        r["app"] = {"skipped": "app part not run (" + ("--quick" if args.quick else "--no-app") + ")"}
    else:
        log("bench: app ...")
        from bench import app

        r["app"] = app.bench_app()
    r["targets"] = targets(r)
    r["machine"]["loadavg_end"] = loadavg()
    r["total_s"] = time.perf_counter() - t_start
    print(json.dumps(r, default=float) if args.json else render(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
