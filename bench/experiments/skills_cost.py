"""``python -m bench.experiments.skills_cost [--steps N] [--reps N] [--json]``: what scoring the skills costs per training step.

At the defaults (``BertConfig()``, ``TrainConfig()``, the built-in grammar, word tokenizer, 1 torch thread):

* ``build_s``: making the items (``builtin_items``, held out from the corpus) and encoding them (``SkillSuite``),
  once per run;
* ``score_ms``: one scoring of all skills on the model (``SkillSuite.score``: 8 skills, 1,600 items, NSP items
  two sequences each), the work added to every held-out evaluation;
* ``steps_per_s`` with and without skills over the same ``--steps`` steps (evaluations every ``eval_every``
  steps, as in a run), alternating the two ``--reps`` times, and the cost as a share of throughput.

Numbers go to docs/BENCH.md ("Skills"); nothing here is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported


def _train(corpus, tok, steps: int, suite) -> float:
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.analysis.records import TrainingRecords
    from bertcore.training.trainer import Trainer

    tr = Trainer(BertConfig(), TrainConfig(), corpus, tokenizer=tok)
    TrainingRecords.attach(tr, "default", suite)
    t0 = time.perf_counter()
    for _ in range(steps):
        tr.step()
    return steps / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.skills_cost", description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="steps per timed block (evaluations every 50)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from bertcore.analysis.skills import SkillSuite
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.skill_items import builtin_items
    from bertcore.data.tokenization import WordTokenizer
    from bertcore.model.bert import init_model

    corpus = builtin_corpus()
    tok = WordTokenizer.build(corpus.texts())
    max_len = TrainConfig().max_seq_len
    t0 = time.perf_counter()
    suite = SkillSuite(builtin_items(corpus), tok, max_len)
    build_s = time.perf_counter() - t0
    model = init_model(BertConfig(vocab_size=tok.vocab_size))
    suite.score(model)  # warm-up
    ts = []
    for _ in range(max(3, args.reps)):
        t0 = time.perf_counter()
        suite.score(model)
        ts.append(time.perf_counter() - t0)
    score_ms = 1000 * statistics.median(ts)
    with_s, without_s = [], []
    load0 = os.getloadavg()
    for _ in range(args.reps):
        without_s.append(_train(corpus, tok, args.steps, None))
        with_s.append(_train(corpus, tok, args.steps, suite))
    evals = args.steps // TrainConfig().eval_every
    r = {"items": len(suite.items), "skills": len(suite.names), "build_s": round(build_s, 3),
         "score_ms": round(score_ms, 1), "steps": args.steps, "evaluations_per_block": evals,
         "steps_per_s_without": round(statistics.median(without_s), 3),
         "steps_per_s_with": round(statistics.median(with_s), 3),
         "all_with": [round(x, 3) for x in with_s], "all_without": [round(x, 3) for x in without_s],
         "load": [round(x, 2) for x in load0] + [round(x, 2) for x in os.getloadavg()]}
    r["throughput_cost"] = round(1 - r["steps_per_s_with"] / r["steps_per_s_without"], 4)
    # the same share computed from the parts: one scoring per eval_every steps
    step_s = 1 / r["steps_per_s_without"]
    r["cost_from_parts"] = round((score_ms / 1000) / (TrainConfig().eval_every * step_s + score_ms / 1000), 4)
    if args.json:
        print(json.dumps(r))
    else:
        print(f"{r['skills']} skills, {r['items']} items: build {r['build_s']:.2f} s once per run, "
              f"one scoring {r['score_ms']:.0f} ms (median)")
        print(f"steps/s over {args.steps} steps ({evals} evaluations): without skills {r['steps_per_s_without']:.2f}, "
              f"with {r['steps_per_s_with']:.2f} (all: {r['all_without']} / {r['all_with']})")
        print(f"cost: {100 * r['throughput_cost']:.1f}% of throughput measured; "
              f"{100 * r['cost_from_parts']:.1f}% from one scoring per {TrainConfig().eval_every} steps")
        print(f"load average: {r['load']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
