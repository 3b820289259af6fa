"""``python -m bench.experiments.heads_cost [--run RUN] [--reps N] [--json]``: what head roles and the pruning curve cost.

On a default run (CLI defaults: 600 steps of the built-in grammar, 2 layers x 4 heads, trained here into a temp
folder unless ``--run`` names one):

* ``role_map_ms``: the role map of one saved step (``head_measures`` on 64 held-out pairs; the step's weights
  already loaded) and ``load_step_ms`` (reading one fp16 step file);
* ``timeline_s``: ``head_roles_over_steps`` over every saved step (each loaded from disk, then measured);
* ``pruning_curve_s``: ``pruning_curve`` on 256 held-out examples (importance gradients + L*H+1 evaluations);
* ``page_s``: the Attention page's *Head roles* tab in AppTest (app.py included), first open (cold: nothing
  memoised) and a rerun (warm);
* the final roles and the step each took its role, so the numbers have their context.

Medians of ``--reps``. Numbers go to docs/BENCH.md ("Head roles"); nothing here is asserted.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _median_s(f, reps: int):
    ts, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def _train(out: Path) -> Path:
    from bertcore.cli import main

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the result
        assert main(["train", "--out", str(out), "--quiet"]) == 0
    print(f"trained the default run in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out


def _page(run_dir: Path) -> dict:
    from streamlit.testing.v1 import AppTest

    from bertcore.training import runs

    ws = "benchHeadsWorkspace012345"
    dst = runs.workspace_dir(ws) / "run"
    if not dst.exists():
        shutil.copytree(run_dir, dst)
    runs.write_workspace(ws, active="run:run")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["ws"] = ws
    at.query_params["attn_tab"] = "Head roles"
    t0 = time.perf_counter()
    at.switch_page("app_pages/attention.py").run()
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    at.run()
    warm = time.perf_counter() - t0
    return {"cold_s": cold, "warm_s": warm, "exceptions": [e.value for e in at.exception][:2]}


def measure(run_dir: Path, reps: int, page: bool = True) -> dict:
    import torch

    from bertcore.analysis import heads as hd
    from bertcore.analysis.ablation import held_out_batches
    from bertcore.analysis.pruning import pruning_curve
    from bertcore.io.checkpoint import load_checkpoint
    from bertcore.io.steps import list_steps, load_step
    from bertcore.training.run_corpus import run_corpus

    torch.set_num_threads(1)
    base = load_checkpoint(run_dir)
    steps = list_steps(run_dir)
    corpus = run_corpus(run_dir)
    texts = hd.held_out_texts(corpus, base.tokenizer, base.train_config)
    cfg = base.model.config
    r: dict = {"run": str(run_dir), "layers": cfg.num_hidden_layers, "heads": cfg.num_attention_heads,
               "saved_steps": len(steps), "texts": len(texts), "reps": reps}
    mid = steps[len(steps) // 2]
    r["load_step_ms"] = _median_s(lambda: load_step(run_dir, mid, bundle=base), reps)[0] * 1e3
    model = load_step(run_dir, mid, bundle=base).model
    r["role_map_ms"] = _median_s(lambda: hd.head_measures(model, base.tokenizer, texts), reps)[0] * 1e3
    r["timeline_s"], over = _median_s(lambda: hd.head_roles_over_steps(run_dir, texts), reps)
    batches = held_out_batches(base.tokenizer, corpus, base.train_config, 256,
                               max_len=cfg.max_position_embeddings)
    r["pruning_curve_s"], curve = _median_s(lambda: pruning_curve(base.model, batches), reps)
    L, H = cfg.num_hidden_layers, cfg.num_attention_heads
    r["final_roles"] = [{"layer": layer, "head": h, "role": over["per_step"][-1]["roles"][layer][h],
                         "since_step": over["final_role_step"][layer][h]} for layer in range(L) for h in range(H)]
    r["curve"] = [{k: p[k] for k in ("removed", "mlm_acc", "nsp_acc")} for p in curve["points"]]
    if page:
        r["page"] = _page(run_dir)
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.heads_cost", description=__doc__.split("\n")[0])
    ap.add_argument("--run", help="a run directory (default: train the CLI's default run into a temp folder)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-page", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-heads-") as tmp:
        os.environ.setdefault("BERTCORE_RUNS_DIR", str(Path(tmp) / "runs"))
        run_dir = Path(args.run) if args.run else _train(Path(tmp) / "run")
        r = measure(run_dir, args.reps, page=not args.no_page)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    print(f"{r['layers']} layers x {r['heads']} heads, {r['saved_steps']} saved steps, {r['texts']} texts")
    print(f"role map of one step   {r['role_map_ms']:8.1f} ms  (+ {r['load_step_ms']:.1f} ms to load the step)")
    print(f"timeline, all steps    {r['timeline_s']:8.2f} s")
    print(f"pruning curve (256 ex) {r['pruning_curve_s']:8.2f} s")
    if "page" in r:
        print(f"Head roles tab         cold {r['page']['cold_s']:.2f} s, warm {r['page']['warm_s']:.2f} s")
    for f in r["final_roles"]:
        print(f"  L{f['layer'] + 1} H{f['head'] + 1}: {f['role']} since step {f['since_step']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
