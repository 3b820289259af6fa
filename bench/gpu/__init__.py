"""``python -m bench.gpu [--quick] [--out FILE]``: the GPU bench in one run (about 4 minutes on one H100).

1. **peak**: an 8192^3 bf16 (and fp32) ``torch.mm`` on random data, median of 10 after 3 warm-ups.
2. **steps**: bertcore's ``Trainer.step`` vs transformers' ``BertForPreTraining`` at four shapes, fp32 and bf16:
   steps/s, useful TFLOP/s as a share of the bf16 matmul peak, peak memory (``bench.gpu.steps``).
3. **loop**: ``train --data`` on prepared shards vs ``Trainer.step`` on fixed batches, BERT-mini and BERT-base.
4. **app**: the default app run (600 steps, its evaluations and skills) through ``service.train``: wall time.
5. **determinism**: two runs alike, without and with ``deterministic``: identical histories or not, and its cost.

Each section's result is printed as soon as it is done (flushed) and the JSON file is rewritten after each one; a
section that fails is recorded with its error and the others still run (exit status 1 then). ``--quick`` runs the
same sections on the tiny model with a few steps (seconds on a CPU; the suite runs it: tests/test_bench_gpu.py).
No timing is asserted anywhere; the numbers are for reading (docs/BENCH.md, "GPU bench").
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch starts its threads
from bench.gpu import report as gpu_report, runs as gpu_runs, steps as gpu_steps
from bench.gpu.report import STEP_HEADER, render, render_determinism, render_step_row, targets
from bench.training import FLOPS_FORMULA
from bertcore.training.determinism import prepare_environment
from bertcore.training.device import Runtime
from bertcore.training.flops import measured_bf16_peak

SECTIONS = gpu_report.SECTIONS
LOOP_PLAN = {"mini": (200, 20), "base": (100, 10)}  # shape: (steps of the train --data run, first steps left out)
QUICK_LOOP_PLAN = {"tiny": (24, 4)}
CHILD_TIMEOUT_S = 400  # one determinism pair in its own process
REPO = Path(__file__).resolve().parents[2]
BIG_BUDGET_MB = "1000000"  # BERT-base at batch 128 is over the app's 1 GB training budget (BERTCORE_MAX_MODEL_MB)


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def say(*a) -> None:
    print(*a, flush=True)  # partial results, as they come


def machine_info(device: torch.device) -> dict:
    import transformers

    info = {"device": str(device), "torch": torch.__version__, "cuda": torch.version.cuda,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), multiprocessors=p.multi_processor_count,
                    capability=f"{p.major}.{p.minor}")
    return info


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int) -> dict:
    """TFLOP/s of an n^3 ``torch.mm`` on random data (2 n^3 FLOPs): the median of 10 timed products."""
    g = torch.Generator(device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    for _ in range(3):
        torch.mm(a, b)
    times = []
    for _ in range(10):
        gpu_steps.sync(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        gpu_steps.sync(device)
        times.append(time.perf_counter() - t0)
    return {"n": n, "tflops": 2 * n ** 3 / statistics.median(times) / 1e12}


FLOPS_NOTE = ("FLOPs counted by bertcore.training.flops.train_flops_per_step at the batches' masked share (the terms "
              "of flops_formula's 'useful' count, as in the table of the GPU targets)")


# ----------------------------------------------------------------------------- the sections
def run_peak(ctx) -> dict:
    n = 512 if ctx.quick else 8192
    out = {"bf16": matmul_peak(ctx.device, torch.bfloat16, n), "fp32": matmul_peak(ctx.device, torch.float32, n)}
    # the library's own yardstick (best of its repeats, cached per process): measured here, before any model
    v = measured_bf16_peak(str(ctx.device))
    out["bertcore_flops_bf16_tflops"] = v / 1e12 if v else None
    return out


def run_steps(ctx) -> dict:
    corpus = ctx.corpus()
    shapes = gpu_steps.QUICK_SHAPES if ctx.quick else gpu_steps.SHAPES
    peaks = {k: v["tflops"] for k, v in ctx.r.get("peak", {}).items() if isinstance(v, dict) and "tflops" in v}
    rows = []
    say(STEP_HEADER)
    for name in [s for s in ctx.shapes if s in shapes] or list(shapes):
        batches = gpu_steps.fixed_batches(shapes[name], corpus, ctx.device)
        for precision in ctx.precisions:
            if ctx.over_budget():
                rows.append({"shape": name, "precision": precision, "skipped": "over the time budget"})
                continue
            log(f"bench.gpu: steps {name} {precision} ...")
            try:
                row = gpu_steps.measure_shape(name, shapes[name], precision, ctx.device, corpus, ctx.make_runtime,
                                              ctx.quick, batches)
                gpu_steps.add_peak_shares(row, peaks)
            except Exception as e:  # noqa: BLE001 - one row's failure (e.g. out of memory) is recorded, the rest run
                row = {"shape": name, "precision": precision, "error": f"{type(e).__name__}: {e}"}
                ctx.empty_cache()
            rows.append(row)
            say(render_step_row(row))
    ctx.notes.append(FLOPS_NOTE)
    return {"rows": rows, "flops_formula": FLOPS_FORMULA}


def _shards(ctx) -> Path:
    if ctx.shards is None:
        log("bench.gpu: preparing shards ...")
        ctx.shards = gpu_runs.prepare_shards(ctx.work / "prepared", ctx.corpus(), 2000 if ctx.quick else 30522)
    return ctx.shards


def run_loop(ctx) -> dict:
    plan = QUICK_LOOP_PLAN if ctx.quick else LOOP_PLAN
    shapes = gpu_steps.QUICK_SHAPES if ctx.quick else gpu_steps.SHAPES
    data, rows = _shards(ctx), []
    for name, (steps, skip) in plan.items():
        if ctx.over_budget():
            rows.append({"shape": name, "skipped": "over the time budget"})
            continue
        log(f"bench.gpu: loop {name} ...")
        try:
            row = gpu_runs.loop_vs_step(name, shapes[name], data, ctx.work, str(ctx.device), ctx.run_precision,
                                        ctx.make_runtime, steps, skip)
        except Exception as e:  # noqa: BLE001 - one shape's failure (e.g. out of memory) is recorded, the rest run
            rows.append({"shape": name, "error": f"{type(e).__name__}: {e}"})
            ctx.empty_cache()
            say(f"loop {name} FAILED: {rows[-1]['error']}")
            continue
        rows.append(row)
        say(f"loop {name} ({ctx.run_precision}): train --data {row['loop_steps_s']:.2f} steps/s, Trainer.step "
            f"{row['step_steps_s']:.2f} steps/s: {row['ratio']:.2f} of the step")
    return {"rows": rows}


def run_app(ctx) -> dict:
    log("bench.gpu: the default app run ...")
    return gpu_runs.default_app_run(ctx.work, 20 if ctx.quick else None)


def run_determinism(ctx) -> dict:
    shape = gpu_steps.QUICK_SHAPES["tiny"] if ctx.quick else gpu_steps.SHAPES["mini"]
    steps = 6 if ctx.quick else 100
    if ctx.pair:  # a child process: one pair of runs here
        return gpu_runs.determinism_pair(shape, _shards(ctx), ctx.work, str(ctx.device), ctx.run_precision,
                                         ctx.make_runtime, steps, ctx.pair == "deterministic")
    data, out = _shards(ctx), {"shape": list(shape), "precision": ctx.run_precision, "steps": steps}
    for pair in ("default", "deterministic"):
        log(f"bench.gpu: determinism, {pair} pair (a process of its own) ...")
        out[pair] = _child_pair(ctx, pair, data)
        say(render_determinism(pair, out[pair]))
    if "identical" in out["default"] and "identical" in out["deterministic"]:
        mean = {k: statistics.mean(out[k]["steps_s"]) for k in ("default", "deterministic")}
        out["deterministic_cost"] = 1 - mean["deterministic"] / mean["default"]  # the share of steps/s it costs
    return out


def _child_pair(ctx, pair: str, data: Path) -> dict:
    """``python -m bench.gpu --sections determinism --pair PAIR`` in a new process: its ``determinism`` result."""
    path = ctx.work / f"determinism-{pair}.json"
    cmd = [sys.executable, "-m", "bench.gpu", "--sections", "determinism", "--pair", pair, "--shards", str(data),
           "--device", ctx.device.type, "--out", str(path), "--budget-s", "0", "--threads", str(torch.get_num_threads())]
    p = subprocess.run(cmd + (["--quick"] if ctx.quick else []), cwd=REPO, capture_output=True, text=True,
                       timeout=CHILD_TIMEOUT_S)
    if not path.is_file():
        raise RuntimeError(f"the {pair} pair's process exited with {p.returncode}: {p.stderr.strip()[-1500:]}")
    child = json.loads(path.read_text(encoding="utf-8"))
    ctx.notes.extend(n for n in child.get("notes", []) if n not in ctx.notes)
    d = child.get("determinism", {})
    if "error" in d:
        raise RuntimeError(f"the {pair} pair failed: {d['error']}")
    d.pop("seconds", None)
    return d


RUNNERS = {"peak": run_peak, "steps": run_steps, "loop": run_loop, "app": run_app, "determinism": run_determinism}


class Context:
    def __init__(self, args, device: torch.device, work: Path, r: dict):
        self.quick, self.device, self.work, self.r = args.quick, device, work, r
        self.shapes = [s.strip() for s in args.shapes.split(",") if s.strip()] if args.shapes else []
        bf16 = device.type == "cpu" or torch.cuda.is_bf16_supported()
        self.precisions = ["fp32", "bf16"] if bf16 else ["fp32"]
        self.run_precision = "bf16" if device.type == "cuda" and bf16 else "fp32"  # what `auto` picks
        self.notes: list[str] = r["notes"]
        self.make_runtime = Runtime
        self.shards, self.pair, self._corpus = args.shards, args.pair, None
        self.t0, self.budget = time.perf_counter(), args.budget_s

    def corpus(self):
        """The built-in sentences (3000 pairs with --quick), made once."""
        if self._corpus is None:
            from bertcore.data.corpus import builtin_corpus

            self._corpus = builtin_corpus(n_pairs=3000) if self.quick else builtin_corpus()
        return self._corpus

    def over_budget(self) -> bool:
        return self.budget > 0 and time.perf_counter() - self.t0 > self.budget

    def empty_cache(self) -> None:
        gpu_steps.free(self.device)


# ----------------------------------------------------------------------------- output
def write_json(path: Path | None, r: dict) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(r, indent=1, default=float), encoding="utf-8")
    os.replace(tmp, path)  # atomic: a reader never sees half a file


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="the tiny model, a few steps: seconds on a CPU")
    p.add_argument("--out", type=Path, help="write the results as JSON here (rewritten after each section)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    p.add_argument("--shapes", default="", help="steps section: comma-separated subset of tiny,mini,small,base")
    p.add_argument("--budget-s", type=float, default=330.0, help="skip what is left after this many seconds (0: no limit)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1, as a training run's "
                   "num_threads: run_steps sets it, so the step timings use the same)")
    p.add_argument("--pair", choices=("default", "deterministic"), help=argparse.SUPPRESS)  # a determinism child
    p.add_argument("--shards", type=Path, help=argparse.SUPPRESS)  # a folder prepared by the parent
    p.add_argument("--keep", type=Path, help="keep the prepared shards and run directories in this folder")
    args = p.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        print(f"error: unknown section {bad[0]!r}; choose from {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: torch sees no CUDA GPU; use --device cpu or auto", file=sys.stderr)
        return 2
    if args.pair == "deterministic":  # as the CLI does: cuBLAS's workspace setting before CUDA starts
        prepare_environment()
    old_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, args.threads))
    device = torch.device("cuda:0" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    work = args.keep if args.keep else Path(tempfile.mkdtemp(prefix="bench-gpu-"))
    old_budget = os.environ.get("BERTCORE_MAX_MODEL_MB")
    os.environ["BERTCORE_MAX_MODEL_MB"] = BIG_BUDGET_MB
    r = {"command": "python -m bench.gpu" + (" --quick" if args.quick else ""), "quick": args.quick,
         "machine": machine_info(device), "notes": [], "sections": sections}
    ctx = Context(args, device, work, r)
    try:
        for s in sections:
            if ctx.over_budget():
                r[s] = {"skipped": f"over the time budget ({args.budget_s:.0f} s)"}
                continue
            t0 = time.perf_counter()
            try:
                r[s] = RUNNERS[s](ctx)
            except Exception as e:  # noqa: BLE001 - a failing section is recorded; the others still run
                r[s] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
                say(f"section {s} FAILED: {r[s]['error']}")
                ctx.empty_cache()
            r[s]["seconds"] = time.perf_counter() - t0
            r["targets"] = targets(r)
            r["total_s"] = time.perf_counter() - ctx.t0
            write_json(args.out, r)
        try:
            say("\n" + render(r))
        except Exception as e:  # noqa: BLE001 - the JSON file holds every number anyway
            say(f"could not draw the tables ({type(e).__name__}: {e}); the numbers are in --out")
    finally:
        torch.set_num_threads(old_threads)
        if old_budget is None:
            os.environ.pop("BERTCORE_MAX_MODEL_MB", None)
        else:
            os.environ["BERTCORE_MAX_MODEL_MB"] = old_budget
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    write_json(args.out, r)
    return 1 if failures(r) else 0


def failures(r: dict) -> list[str]:
    """What failed: whole sections, and single rows of the steps and loop tables."""
    out = [f"{s}: {r[s]['error']}" for s in SECTIONS if isinstance(r.get(s), dict) and "error" in r[s]]
    for s in ("steps", "loop"):
        out += [f"{s} {c.get('shape')}: {c['error']}" for c in (r.get(s) or {}).get("rows", []) if "error" in c]
    return out


if __name__ == "__main__":
    sys.exit(main())
