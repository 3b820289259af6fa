"""``python -m bench.experiments.probe_speed [RUN] [--reps N] [--minilm] [--json]``: probes of every layer of one saved step
(target: <= 2 s, cached per step), and the facts a default run should show.

Without RUN a default run (``python -m bertcore train``: 600 steps, 13 saved steps) is trained into a temp
folder first. Per property, at the run's last saved step:

* ``cold_s``: ``probe_step`` with empty caches (probe set, forward pass of every layer, 2 x L+1 L-BFGS fits);
* ``memory_s``: the same call again (the in-memory cache), ``disk_s``: a fresh process's call (the JSON file in
  ``RUN/probes/``, memory cleared);
* ``all_steps_cold_s``: ``probe_over_steps`` over every saved step with empty caches.

Then the check: position at layer 0 (held out), the subject-number probe's best layer at the first and last
step, and the control task against its chance. ``--minilm`` also times the current-model probes of the packaged
all-MiniLM-L6-v2 (no run: position only). Medians of ``--reps`` runs; nothing is asserted (docs/BENCH.md).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _timed(f, reps: int) -> tuple[float, object]:
    ts, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t0)
    return round(statistics.median(ts), 6), out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.probe_speed", description=__doc__.split("\n")[0])
    p.add_argument("run", nargs="?", help="a run directory with saved steps (default: train one)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--minilm", action="store_true", help="also time the packaged all-MiniLM-L6-v2")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    import torch

    from bertcore.analysis import probing
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.probe_sets import GRAMMAR_PROPERTIES
    from bertcore.io.steps import list_steps
    from bertcore.launch import service

    torch.set_num_threads(1)
    run = Path(args.run) if args.run else None
    if run is None:
        print("bench: training the default run (600 steps) ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        run = service.train(service.RunSpec(BertConfig(), TrainConfig(), name="probe bench"),
                            Path(tempfile.mkdtemp(prefix="probe-bench-")) / "run").run_dir
        print(f"bench: trained in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    steps = list_steps(run)
    last = steps[-1]
    out = {"run": str(run), "steps": steps, "threads": 1, "loadavg": os.getloadavg()[0], "properties": {}}

    def cold(prop):
        probing._MEMORY.clear()
        return probing.probe_step(run, last, prop, disk=False)

    def from_disk(prop):
        probing._MEMORY.clear()
        return probing.probe_step(run, last, prop)

    for prop in GRAMMAR_PROPERTIES:
        c, _ = _timed(lambda p=prop: cold(p), args.reps)
        from_disk(prop)  # writes the file
        d, _ = _timed(lambda p=prop: from_disk(p), args.reps)
        m, _ = _timed(lambda p=prop: probing.probe_step(run, last, p), args.reps)
        out["properties"][prop] = {"cold_s": c, "disk_s": d, "memory_s": m}
    probing._MEMORY.clear()
    t0 = time.perf_counter()
    number = probing.probe_over_steps(run, "number", disk=False)
    out["all_steps_cold_s"] = {"number": round(time.perf_counter() - t0, 2)}
    acc = number.matrix("accuracy")
    pos = probing.probe_step(run, last, "position").layers[0]
    out["check"] = {
        "position_layer0_accuracy": pos.accuracy, "position_layer0_control": pos.control_accuracy,
        "number_best_layer_first_step": float(acc[:, 0].max()), "number_best_layer_last_step": float(acc[:, -1].max()),
        "number_by_step_best_layer": [round(float(v), 3) for v in acc.max(0)],
        "number_control_layer0_vs_chance": [number.results[-1].layers[0].control_accuracy,
                                            number.results[-1].layers[0].control_chance],
        "number_control_best_layer_last_step": float(number.matrix("control_accuracy")[:, -1].max()),
    }
    if args.minilm:
        from bertcore.io.hf_interop import import_hf, packaged_minilm_dir

        d = packaged_minilm_dir()
        if d is not None:
            b = import_hf(d, name="all-MiniLM-L6-v2")
            t, r = _timed(lambda: probing.probe_model(b.model, b.tokenizer, "position"), 1)
            out["minilm_position_s"] = t
            out["minilm_position_layer0"] = r.layers[0].accuracy
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"run {run} (steps {steps[0]}..{last}, {len(steps)} saved), 1 torch thread, load {out['loadavg']:.2f}")
    print("property   cold s   from disk s   in memory s")
    for prop, v in out["properties"].items():
        print(f"{prop:9}  {v['cold_s']:6.3f}   {v['disk_s']:11.4f}   {v['memory_s']:11.6f}")
    print(f"number over all {len(steps)} steps, cold: {out['all_steps_cold_s']['number']} s")
    print(json.dumps(out["check"], indent=2))
    if "minilm_position_s" in out:
        print(f"MiniLM position probes (7 layers): {out['minilm_position_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
