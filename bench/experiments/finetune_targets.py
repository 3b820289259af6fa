"""``python -m bench.experiments.finetune_targets``: the fine-tuning targets (docs/FINETUNE.md), measured through the CLI.

For every built-in task and seeds 0, 1, 2: ``python -m bertcore finetune --labels 64`` once ``--from`` the
default 600-step pretraining run (``python -m bertcore train --out DIR`` with defaults; trained here unless
``--pretrained DIR`` is given) and once ``--from scratch`` (the same architecture, random initial weights).
Targets: pretrained beats scratch by >= 15 points of held-out accuracy on every (task, seed), and each
fine-tune trains in < 30 s (``train_seconds``: the training loop, evaluations included, without process start).
Prints a markdown table (for docs/FINETUNE.md) with the load average; nothing is asserted.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time

TARGET_POINTS = 15.0
TARGET_SECONDS = 30.0


def _cli(args: list[str]) -> dict:
    from bertcore.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(args)
    if rc != 0:
        raise SystemExit(f"`python -m bertcore {' '.join(args)}` exited {rc}")
    return json.loads(out.getvalue().strip().splitlines()[-1])


def _load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(pretrained: str, tasks: list[str], seeds: list[int], labels: int, work: str) -> list[dict]:
    rows = []
    for task in tasks:
        for seed in seeds:
            row = {"task": task, "seed": seed, "load_before": _load()}
            for src, key in ((pretrained, "pretrained"), ("scratch", "scratch")):
                c0 = time.process_time()
                r = _cli(["finetune", "--from", src, "--task", task, "--labels", str(labels), "--seed", str(seed),
                          "--out", os.path.join(work, f"{task}-{seed}-{key}"), "--json"])
                row[key], row[f"{key}_s"] = r["eval_accuracy"], r["train_seconds"]
                row[f"{key}_cpu_s"] = time.process_time() - c0  # 1 torch thread: the wall time on an idle core
            row["points"] = 100 * (row["pretrained"] - row["scratch"])
            print(f"{task} seed {seed}: {row}", file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def _verdict(r: dict) -> str:
    points = r["points"] >= TARGET_POINTS
    wall = max(r["pretrained_s"], r["scratch_s"]) < TARGET_SECONDS
    cpu = max(r["pretrained_cpu_s"], r["scratch_cpu_s"]) < TARGET_SECONDS
    if points and wall:
        return "met"
    if points and cpu:
        return "points met; time met in CPU s only (busy machine)"
    return "points met, time NOT met" if points else "NOT met"


def render(rows: list[dict], labels: int) -> str:
    lines = [f"| task | seed | pretrained | random init | points | wall s (pre / scratch) | CPU s (pre / scratch) | "
             f"load (1/5/15 min) | target (≥ {TARGET_POINTS:g} points, < {TARGET_SECONDS:g} s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['seed']} | {r['pretrained']:.3f} | {r['scratch']:.3f} | "
                     f"{r['points']:+.1f} | {r['pretrained_s']:.1f} / {r['scratch_s']:.1f} | "
                     f"{r['pretrained_cpu_s']:.1f} / {r['scratch_cpu_s']:.1f} | {r['load_before']} | "
                     f"{_verdict(r)} |")
    return "\n".join(lines) + f"\n\n{labels} labelled examples each; held-out accuracy on 600 examples per task."


def main(argv: list[str] | None = None) -> int:
    from bertcore.data.tasks import task_names

    p = argparse.ArgumentParser(prog="python -m bench.experiments.finetune_targets", description=__doc__.split("\n")[0])
    p.add_argument("--pretrained", help="a default pretraining run directory (trained here if omitted)")
    p.add_argument("--tasks", default=",".join(task_names()))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--labels", type=int, default=64)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="bench-finetune-") as work:
        pre = args.pretrained
        t_pre = None
        if pre is None:
            from bertcore.cli import main as cli

            pre = os.path.join(work, "pretrained")
            t0 = time.perf_counter()
            if cli(["train", "--out", pre, "--quiet"]) != 0:
                raise SystemExit("pretraining failed")
            t_pre = time.perf_counter() - t0
        rows = measure(pre, args.tasks.split(","), [int(s) for s in args.seeds.split(",")], args.labels, work)
    if args.json:
        print(json.dumps({"rows": rows, "pretraining_s": t_pre, "load_end": _load()}))
    else:
        print(render(rows, args.labels))
        if t_pre is not None:
            print(f"\nPretraining the default run took {t_pre:.0f} s here.")
        print(f"Load average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
