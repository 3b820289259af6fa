"""``python -m bench.experiments.loss_paths``: the fused MLM loss against the logits path it replaced, where nothing may get slower.

1. **Training against transformers** (``bench.training``'s configs, fixed batches, torch at ``--threads``): three
   runners take turns in one process, bertcore's ``Trainer.step`` with the decoder fused with the loss (what a step
   does), the same step through the (N, V) logits (the step before), and transformers' ``BertForPreTraining``.
   Reported: steps/s of each (medians), the two ratios bertcore / transformers and fused / logits (medians of the
   per-round ratios).
2. **The built-in corpus's time to skill**: for each seed, two trainers at the app defaults (``BertConfig()``,
   ``TrainConfig(seed=s)``, 1 thread), one per path, take turns of ``--block`` steps (who goes first alternates)
   with a held-out evaluation after each (not timed); the training seconds until held-out MLM >= 3x unigram and
   NSP >= 0.9 (the bar of ``bench.experiments.skill_seeds``), and until MLM >= 2x unigram.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported


def _feeder(batches):
    i = [0]

    def sample_batch(*_args, **_kw):
        i[0] += 1
        return batches[i[0] % len(batches)]

    return sample_batch


def training_ratios(name: str, corpus, rounds: int, block_s: float) -> dict:
    import torch

    from bench.training import CONFIGS, HFStep, bench_setup, hf_model, pad_to
    from bertcore.training.trainer import Trainer

    V, D, L, H, F, T, B = CONFIGS[name]
    cfg, tc, tok, pairs = bench_setup(name, corpus)
    fused, logits = Trainer(cfg, tc, pairs, tokenizer=tok), Trainer(cfg, tc, pairs, tokenizer=tok)
    logits._loss_only = {}  # the (N, V) logits, then the loss
    g = torch.Generator().manual_seed(123)
    batches = [pad_to(fused.data.sample_batch(B, g), T, tok.pad_id) for _ in range(16)]
    for tr in (fused, logits):
        tr.data.sample_batch = _feeder(batches)  # Trainer.step's own data call, on fixed batches
    hf = HFStep(hf_model(cfg), tc)
    hf_i = {"i": 0}

    def hf_step():
        hf_i["i"] += 1
        hf(batches[hf_i["i"] % len(batches)])

    runners = {"fused": fused.step, "logits": logits.step, "transformers": hf_step}
    for f in runners.values():
        for _ in range(5):
            f()
    rates: dict[str, list[float]] = {k: [] for k in runners}
    for r in range(rounds):
        order = list(runners) if r % 2 == 0 else list(runners)[::-1]
        for k in order:
            n, t0 = 0, time.perf_counter()
            while True:
                runners[k]()
                n += 1
                dt = time.perf_counter() - t0
                if dt >= block_s and n >= 2:
                    break
            rates[k].append(n / dt)
    out = {"config": name, "vocab": V, "steps_s": {k: statistics.median(v) for k, v in rates.items()}}
    for k in ("fused", "logits"):
        out[f"{k}_over_transformers"] = statistics.median(a / b for a, b in zip(rates[k], rates["transformers"]))
    out["fused_over_logits"] = statistics.median(a / b for a, b in zip(rates["fused"], rates["logits"]))
    return out


def skill_race(seed: int, block: int, cap_steps: int = 600) -> dict:
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.training.trainer import Trainer

    corpus = builtin_corpus()
    tc = TrainConfig(seed=seed, eval_every=0, snapshot_every=0)
    runs = {k: Trainer(BertConfig(), tc, corpus) for k in ("fused", "logits")}
    runs["logits"]._loss_only = {}
    secs = {k: 0.0 for k in runs}
    hit: dict[str, dict] = {k: {} for k in runs}
    turn = 0
    while any(len(hit[k]) < 2 for k in runs) and all(tr.step_count < cap_steps for tr in runs.values()):
        turn += 1
        for k, tr in (list(runs.items()) if turn % 2 else list(runs.items())[::-1]):  # who goes first alternates
            t0 = time.perf_counter()
            for _ in range(block):
                tr.step()
            secs[k] += time.perf_counter() - t0
            ev = tr.evaluate()
            x = ev["eval_mlm_acc"] / tr.unigram_baseline
            if x >= 2 and "2x" not in hit[k]:
                hit[k]["2x"] = (round(secs[k], 2), tr.step_count)
            if x >= 3 and ev["eval_nsp_acc"] >= 0.9 and "skill" not in hit[k]:
                hit[k]["skill"] = (round(secs[k], 2), tr.step_count)
    return {"seed": seed, **{k: hit[k] for k in runs}}


def _fmt(hit) -> str:
    return f"{hit[0]:.1f} s (step {hit[1]})" if hit else "not reached"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.loss_paths", description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="tiny,small,base4")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block-s", type=float, default=2.0)
    ap.add_argument("--seeds", default="0,1,2", help="built-in time to skill; empty: skip")
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch

    from bertcore.data.corpus import builtin_corpus

    torch.set_num_threads(args.threads)
    res = {"training": [training_ratios(c, builtin_corpus(), args.rounds, args.block_s)
                        for c in args.configs.split(",") if c]}
    torch.set_num_threads(1)
    res["skill"] = [skill_race(int(s), args.block) for s in args.seeds.split(",") if s]
    if args.json:
        print(json.dumps(res))
        return 0
    print("| config (V) | bertcore fused steps/s | bertcore logits steps/s | transformers steps/s | "
          "fused / transformers | logits / transformers | fused / logits |\n|---|---|---|---|---|---|---|")
    for r in res["training"]:
        s = r["steps_s"]
        print(f"| {r['config']} ({r['vocab']}) | {s['fused']:.2f} | {s['logits']:.2f} | {s['transformers']:.2f} | "
              f"{r['fused_over_transformers']:.2f} | {r['logits_over_transformers']:.2f} | "
              f"{r['fused_over_logits']:.2f} |")
    print("\n| seed | fused: to 2x unigram | fused: to skill | logits: to 2x unigram | logits: to skill |\n"
          "|---|---|---|---|---|")
    for r in res["skill"]:
        print(f"| {r['seed']} | {_fmt(r['fused'].get('2x'))} | {_fmt(r['fused'].get('skill'))} | "
              f"{_fmt(r['logits'].get('2x'))} | {_fmt(r['logits'].get('skill'))} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
