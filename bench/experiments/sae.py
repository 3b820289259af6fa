"""``python -m bench.experiments.sae [RUN ...] [--seeds 0,1,2] [--saelens-python PY] [--json]``: the sparse autoencoder's bars
on default runs (docs/FEATURES.md), one run per seed.

Without RUNs a default run (``python -m bertcore train --seed S``: 600 steps) is trained per seed into a temp
folder. Per run, with the SAE's defaults (layer 1, residual stream, 8x = 512 features, top-k k = 8, seed = the run's
seed), as ``python -m bertcore sae RUN --layer 1`` trains it:

* time: wall seconds and this process's CPU seconds (one torch thread: the CPU time is what the wall time would be
  on an idle core; this machine's cores are shared, so the wall time is noisy) of the SAE's optimisation and of
  the whole command (corpus, activations, training, quality, labels, output words, saving);
* quality: variance explained, L0, dead and dense shares, the MLM loss clean / spliced / zero-ablated and the loss
  recovered;
* labels: how many features carry a label with AUROC >= 0.95, and the best number, topic and [MASK] features;
* steering: the best number feature (highest AUROC for a number label) added at strength 1 and 2 over the
  held-out verb-agreement items: flip rate and the flip rate of random directions of the same norm;
* the same quality and labels for an SAE on layer 0 (where [MASK] is still a token of its own);
* over training (first seed): an SAE at 5 saved steps, the best number / topic / [MASK] AUROC against the skills;
* ``--saelens-python``: an interpreter with SAELens installed loads every saved SAE with ``SAE.load_from_disk`` and
  compares its activations with bertcore's on the same inputs (bench/experiments/sae_lens_check.py).

Nothing is asserted; the numbers go to docs/BENCH.md.
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


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def _train_default_run(seed: int, parent: Path) -> Path:
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.launch import service

    log(f"bench.experiments.sae: training the default run, seed {seed} ...")
    return service.train(service.RunSpec(BertConfig(), TrainConfig(seed=seed), name=f"default-{seed}"),
                         parent / f"default-{seed}").run_dir


def _timed_sae(run: Path, spec) -> tuple[Path, dict]:
    from bertcore.analysis.sae_runs import train_run_sae

    w0, c0 = time.perf_counter(), time.process_time()
    d = train_run_sae(run, spec)
    return d, {"wall_s": round(time.perf_counter() - w0, 2), "cpu_s": round(time.process_time() - c0, 2)}


def _steer(run: Path, d: Path, table: dict, strengths=(1.0, 2.0)) -> dict:
    from bertcore.analysis.sae_runs import effect_of, open_sae, sae_corpus
    from bertcore.analysis.steering import skill_flips, skill_suite, steering_vector
    from bertcore.io.sae_io import hook_of

    best = (table.get("families") or {}).get("number")
    if best is None:
        return {"feature": None}
    f = best["id"]
    sae, cfg, training, b = open_sae(d)
    suite = skill_suite(sae_corpus(run, 24000), b.tokenizer, "verb_agreement", 48)
    out = {"feature": f, "label": best["label"], "auroc": best["auroc"], "by_strength": {}}
    for s in strengths:
        vec = steering_vector(sae, f, s, table["features"][f]["max_activation"])
        r = skill_flips(b.model, suite, hook_of(cfg), vec, effect_of(d, f), seed=int(training["spec"]["seed"]))
        out["by_strength"][str(s)] = {k: r[k] for k in ("items", "can_flip", "flip_rate", "random_flip_rate",
                                                          "random_flip_rates", "accuracy_before", "vector_norm")}
    return out


def _row(d: Path, times: dict) -> dict:
    from bertcore.analysis.sae_runs import features_of, summary

    s, table = summary(d), features_of(d)
    named = [f for f in table["features"] if f["label"] is not None]
    strong = sorted((f for f in named if f["auroc"] >= 0.95), key=lambda f: -f["auroc"])
    t = json.loads((d / "training.json").read_text())
    return {"sae_dir": str(d), **{k: s[k] for k in ("variance_explained", "l0", "dead_fraction", "dense_fraction",
                                                    "clean_loss", "spliced_loss", "zero_loss", "loss_recovered")},
            "train_wall_s": t["train_seconds"], "total": times, "named": len(named),
            "auroc_095": len(strong), "auroc_095_labels": [[f["id"], f["label"], f["auroc"]] for f in strong],
            "families": table.get("families")}


def _over_training(run: Path, seed: int) -> list[dict]:
    from bertcore.analysis.sae_runs import SAESpec, features_of, saes_over_training
    from bertcore.launch.service import read_skills_csv

    dirs = saes_over_training(run, SAESpec(layer=1, seed=seed))
    skills = read_skills_csv(run)
    frame = skills.frame() if skills is not None else None
    out = []
    for d in dirs:
        t = json.loads((d / "training.json").read_text())
        row = {"step": t["step"], "variance_explained": t["quality"]["variance_explained"],
               "families": features_of(d).get("families")}
        if frame is not None:
            at = frame[frame["step"] == t["step"]]
            if len(at):
                row["skills"] = {k: float(at.iloc[0][k]) for k in ("verb_agreement", "topic_place") if k in at}
        out.append(row)
    return out


def _saelens(python: str, dirs: list[Path]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    r = subprocess.run([python, "-m", "bench.experiments.sae_lens_check", *map(str, dirs)], capture_output=True, text=True,
                       env=env, cwd=Path(__file__).resolve().parents[2])
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {"error": (r.stderr or r.stdout)[-2000:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.sae", description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="*", help="default runs, one per seed (default: train them)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--saelens-python", help="a Python with sae-lens installed, for the round trip")
    p.add_argument("--no-over-training", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    import torch

    from bertcore.analysis.sae_runs import SAESpec, features_of
    from bertcore.io.checkpoint import load_checkpoint

    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-sae-"))
    runs = [Path(r) for r in args.runs] or [_train_default_run(s, tmp) for s in seeds]
    out = {"command": "python -m bench.experiments.sae " + " ".join(argv or sys.argv[1:]), "loadavg_start": os.getloadavg(),
           "torch_threads": torch.get_num_threads(), "runs": []}
    saved = []
    for run, seed in zip(runs, seeds):
        seed = int((load_checkpoint(run).train_config or {}).get("seed", seed))  # the run's own seed
        log(f"bench.experiments.sae: {run.name}: SAE on layer 1 (seed {seed}) ...")
        d1, t1 = _timed_sae(run, SAESpec(layer=1, seed=seed))
        r1 = _row(d1, t1)
        log(f"bench.experiments.sae: {run.name}: steering ...")
        r1["steering"] = _steer(run, d1, features_of(d1))
        log(f"bench.experiments.sae: {run.name}: SAE on layer 0 ...")
        d0, t0 = _timed_sae(run, SAESpec(layer=0, seed=seed))
        out["runs"].append({"run": str(run), "seed": seed, "layer1": r1, "layer0": _row(d0, t0),
                            "loadavg": os.getloadavg()})
        saved += [d1, d0]
    if not args.no_over_training:
        log("bench.experiments.sae: SAEs over training (first run) ...")
        out["over_training"] = _over_training(runs[0], seeds[0])
    if args.saelens_python:
        log("bench.experiments.sae: SAELens round trip ...")
        out["saelens"] = _saelens(args.saelens_python, saved)
    out["loadavg_end"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
