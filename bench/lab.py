"""``python -m bench.lab [--study bert-table-8] [--seeds 3] [--json]``: a study's wall time against the default run's.

Both are measured in this one run, one after the other, as a user starts them: ``python -m bertcore train`` at the
defaults (the yardstick: imports, corpus, 600 steps, its evaluations and files) and ``python -m bertcore lab --study
NAME --seeds N`` at the study's default steps. It prints both, the ratio (the bar of issue 55: at most 5x for
bert-table-8 with 3 seeds), whether the reference variant reached NSP >= 0.9 on every seed, and where the study's
time went (each run's training seconds from skills.csv and its scoring parts from evaluation.json, in CPU-core
seconds summed over the runs). No timing is asserted anywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(cmd: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def breakdown(study_dir: Path) -> dict:
    """Core-seconds per part, summed over the study's runs: pretraining (skills.csv's training seconds at the last
    evaluation) and each scoring part (evaluation.json)."""
    import pandas as pd

    parts: dict[str, float] = {"pretraining (steps)": 0.0}
    for run in sorted((study_dir / "runs").iterdir()):
        sk = run / "skills.csv"
        if sk.is_file():
            f = pd.read_csv(sk)
            parts["pretraining (steps)"] += float(f["seconds"].iloc[-1]) if len(f) else 0.0
        ev = run / "evaluation.json"
        if ev.is_file():
            for k, v in json.loads(ev.read_text())["seconds"].items():
                parts[f"scoring: {k}"] = parts.get(f"scoring: {k}", 0.0) + float(v)
    return {k: round(v, 1) for k, v in parts.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.lab", description=__doc__.split("\n")[0])
    p.add_argument("--study", default="bert-table-8")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int)
    p.add_argument("--json", action="store_true")
    p.add_argument("--keep", metavar="DIR", help="keep the study folder here (docs/LAB.md's tables come from it)")
    args = p.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-lab-") as tmp:
        t = Path(tmp)
        print("bench.lab: the default run ...", file=sys.stderr, flush=True)
        default_s = _timed([py, "-m", "bertcore", "train", "--out", str(t / "default"), "--quiet"])
        print(f"bench.lab: {default_s:.1f} s; the study {args.study} x {args.seeds} seeds ...", file=sys.stderr,
              flush=True)
        where = Path(args.keep) if args.keep else t / "study"
        cmd = [py, "-m", "bertcore", "lab", "--study", args.study, "--seeds", str(args.seeds), "--out", str(where),
               "--json"]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        study_s = _timed(cmd)
        data = json.loads((where / "study.json").read_text())
        ref = next(v for v in data["variants"] if v["name"] == data["reference"])
        nsp = [r["metrics"]["nsp_acc"] for r in ref["runs"] if r.get("metrics")]
        out = {"study": args.study, "seeds": args.seeds, "steps": data["steps"], "runs": data["total"],
               "default_run_s": round(default_s, 1), "study_s": round(study_s, 1),
               "ratio": round(study_s / default_s, 2), "bar": 5.0, "reference_nsp": nsp,
               "reference_nsp_ok": bool(nsp) and min(nsp) >= 0.9, "cpus": os.cpu_count(),
               "core_seconds": breakdown(where), "status": data["status"]}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"default run (bertcore train, 600 steps): {out['default_run_s']} s")
        print(f"{args.study} x {args.seeds} seeds ({out['runs']} runs at {out['steps']} steps, scored): "
              f"{out['study_s']} s = {out['ratio']}x the default run (bar: <= {out['bar']}x)")
        print(f"reference {data['reference']!r} NSP accuracy per seed: {nsp} (>= 0.9 on every seed: "
              f"{out['reference_nsp_ok']})")
        print("core-seconds over the runs: " + ", ".join(f"{k} {v}" for k, v in out["core_seconds"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
