"""``python -m bench.experiments.chinese_grammar``: time to skill of the built-in Chinese grammar (``--corpus builtin-zh``)
at the defaults over seeds 0-4, with the bar of ``bench.experiments.skill_seeds``: held-out MLM >= 3x the
unigram baseline AND held-out NSP >= 0.90 within 60 s of training. Tokens are single Han characters (both
tokenizers split them, ``bertcore.data.tokenization.has_cjk``). Results: docs/BENCH.md.
"""
from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor

from bench.experiments.skill_seeds import MLM_FACTOR, NSP_TARGET, render, run_seed, verdict

CORPUS = "builtin-zh"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.chinese_grammar", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0,1,2,3,4", help="a list like 0,1,2")
    p.add_argument("--budget", type=float, default=60.0)
    p.add_argument("--stop-after", type=int, help="stop each seed after this many steps")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    overrides = dict(kv.split("=", 1) for kv in args.overrides)
    rows = []
    with ProcessPoolExecutor(max_workers=1) as ex:
        for s in [int(x) for x in args.seeds.split(",")]:
            r = ex.submit(run_seed, s, overrides, args.stop_after, CORPUS).result()
            v = verdict(r, args.budget)
            first = next(((t, st) for t, st, mlm, nsp in r["evals"] if mlm >= MLM_FACTOR * r["unigram"]
                          and nsp >= NSP_TARGET), None)  # whatever the budget: on a loaded machine, read the step
            print(f"seed {s}: nsp {v['nsp_acc']:.3f}, mlm {v['mlm_x']:.2f}x, bar first met at (s, step) {first}, "
                  f"evals (s, step, mlm, nsp) {r['evals']}", file=sys.stderr, flush=True)
            rows.append(v)
    print(render(rows, args.budget, overrides))
    return 0


if __name__ == "__main__":
    sys.exit(main())
