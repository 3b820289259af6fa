"""``python -m bench.experiments.skill_seeds``: time to skill at the defaults over seeds 0-9 (docs/BENCH.md).

For each seed, a headless ``Trainer`` with ``BertConfig()`` / ``TrainConfig(seed=s)`` on the built-in corpus (the
same one the app and ``bertcore train`` use), 1 torch thread, runs to the end; every evaluation is recorded with its wall time.
A seed passes when, within ``--budget`` seconds (default 60), held-out MLM accuracy reaches 3x the unigram baseline
AND held-out NSP accuracy reaches 0.90, and held-out NSP passes 0.6 at a step <= steps / 3.

Seeds run one after the other in fresh subprocesses (``--workers 1``, the default) so each gets the same machine;
wall time depends on the machine's load, so the load average is printed with every row and steps are reported too.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import bertcore  # noqa: F401,E402 - sets OMP_WAIT_POLICY before torch is imported

NSP_TARGET, MLM_FACTOR, NSP_EARLY = 0.90, 3.0, 0.6


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def run_seed(seed: int, overrides: dict, stop_after: int | None = None, corpus: str = "builtin") -> dict:
    """Train one seed at the defaults (plus ``overrides``) on ``corpus`` (a get_corpus spec); returns its
    evaluations and verdict."""
    import torch

    torch.set_num_threads(1)
    from bertcore.config import BertConfig, TrainConfig, split_overrides
    from bertcore.data.corpora import get_corpus
    from bertcore.training.trainer import Trainer

    bk, tk = split_overrides(overrides)
    tc = TrainConfig(**{**tk, "seed": seed})
    load0 = _load()
    t0 = time.perf_counter()
    tr = Trainer(BertConfig(**bk), tc, get_corpus(corpus))
    setup = time.perf_counter() - t0
    evals = []
    t0 = time.perf_counter()
    while not tr.done and (stop_after is None or tr.step_count < stop_after):
        row = tr.step()
        if not math.isnan(row.get("eval_mlm_acc", float("nan"))):
            evals.append((round(time.perf_counter() - t0, 2), int(row["step"]), round(row["eval_mlm_acc"], 4),
                          round(row["eval_nsp_acc"], 4)))
    base = tr.unigram_baseline
    return {"seed": seed, "steps": tc.steps, "setup_s": round(setup, 2), "unigram": base, "evals": evals,
            "load_start": load0, "load_end": _load(), "error": tr.error}


def verdict(r: dict, budget: float) -> dict:
    """Did this seed meet the bar within ``budget`` seconds of training?"""
    base, ev = r["unigram"], r["evals"]
    in_time = [e for e in ev if e[0] <= budget]
    both = next((e for e in in_time if e[2] >= MLM_FACTOR * base and e[3] >= NSP_TARGET), None)
    early = next((e for e in ev if e[3] >= NSP_EARLY), None)
    last = ev[-1] if ev else (float("nan"), 0, float("nan"), float("nan"))
    early_ok = early is not None and early[1] <= r["steps"] / 3
    return {"seed": r["seed"], "wall_s": last[0], "steps_done": last[1], "mlm_acc": last[2],
            "mlm_x": last[2] / base if base else float("nan"), "nsp_acc": last[3],
            "skill_s": both[0] if both else None, "skill_step": both[1] if both else None,
            "nsp06_step": early[1] if early else None, "passes": both is not None and early_ok,
            "load": r["load_end"]}


def render(rows: list[dict], budget: float, overrides: dict) -> str:
    head = (f"time to skill, seeds {rows[0]['seed']}-{rows[-1]['seed']}: held-out MLM >= {MLM_FACTOR:g}x unigram and "
            f"NSP >= {NSP_TARGET} within {budget:g} s, NSP >= {NSP_EARLY} by step steps/3"
            + (f"; overrides {overrides}" if overrides else ""))
    lines = [head, "", "| seed | MLM acc (x unigram) | NSP acc | first step NSP >= 0.6 | time to skill (s, step) "
             "| wall s / steps | load (1/5/15 min) | passes |", "|---|---|---|---|---|---|---|---|"]
    for v in rows:
        skill = f"{v['skill_s']:.1f} s (step {v['skill_step']})" if v["skill_s"] is not None else "not reached"
        lines.append(f"| {v['seed']} | {v['mlm_acc']:.3f} ({v['mlm_x']:.2f}x) | {v['nsp_acc']:.3f} | "
                     f"{v['nsp06_step']} | {skill} | {v['wall_s']:.1f} / {v['steps_done']} | "
                     f"{' / '.join(str(x) for x in v['load'])} | {'yes' if v['passes'] else 'no'} |")
    n = sum(v["passes"] for v in rows)
    lines += ["", f"{n} of {len(rows)} seeds pass"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.skill_seeds", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0-9", help="a range like 0-9 or a list like 0,3,5")
    p.add_argument("--budget", type=float, default=60.0, help="seconds of training allowed (default 60)")
    p.add_argument("--workers", type=int, default=1, help="seeds trained at once (1 gives honest wall times)")
    p.add_argument("--stop-after", type=int, help="stop each seed after this many steps (quick exploration)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, as in `bertcore train --set` (exploration only)")
    p.add_argument("--json", metavar="FILE", help="also write the raw evaluations to FILE")
    args = p.parse_args(argv)
    if "-" in args.seeds:
        lo, hi = (int(x) for x in args.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(x) for x in args.seeds.split(",")]
    overrides = dict(kv.split("=", 1) for kv in args.overrides)
    results = []
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as ex:
        futs = [ex.submit(run_seed, s, overrides, args.stop_after) for s in seeds]
        for f in futs:
            r = f.result()
            results.append(r)
            v = verdict(r, args.budget)
            print(f"seed {v['seed']}: nsp {v['nsp_acc']:.3f}, mlm {v['mlm_x']:.2f}x, nsp>=0.6 at step "
                  f"{v['nsp06_step']}, {v['wall_s']:.1f} s, load {v['load']}", file=sys.stderr, flush=True)
    rows = [verdict(r, args.budget) for r in results]
    print(render(rows, args.budget, overrides))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"overrides": overrides, "budget_s": args.budget, "runs": results}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
