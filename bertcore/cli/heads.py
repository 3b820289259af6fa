"""`heads`: the role of every attention head (Clark et al. 2019), at one saved step or at all of them
(bertcore.analysis.heads). Layers and heads are 0-based."""
from __future__ import annotations

import json
import sys

from bertcore.cli.common import int_in


def add_heads_parser(sub) -> None:
    h = sub.add_parser("heads", help="what each attention head looks at (previous/next token, itself, [CLS], "
                       "[SEP], punctuation, entropy) and its role (Clark et al. 2019), at a step or over the run")
    h.add_argument("dir", metavar="RUN")
    h.add_argument("--texts", metavar="FILE", help="one sentence or one A<TAB>B pair per line (default: held-out "
                   "pairs of the run's corpus, else of the built-in grammar, drawn with a fixed seed)")
    h.add_argument("--examples", type=int_in(1, 2000, "--examples"), default=64,
                   help="how many held-out pairs without --texts (default 64)")
    when = h.add_mutually_exclusive_group()
    when.add_argument("--step", type=int_in(0, 10**9, "--step"), help="a saved step (default: the final model)")
    when.add_argument("--all-steps", action="store_true", help="every saved step, and when each head took its "
                      "final role")
    h.add_argument("--json", action="store_true")


def _texts(args, bundle) -> tuple[list, str]:
    from bertcore.analysis import heads as hd

    if args.texts is not None:
        with open(args.texts, encoding="utf-8", errors="replace") as f:
            return hd.parse_texts(f.read(), args.texts), args.texts
    from bertcore.data.corpora import get_corpus
    from bertcore.errors import BertcoreError
    from bertcore.training.run_corpus import run_corpus

    try:
        corpus = run_corpus(args.dir)
    except BertcoreError:  # a checkpoint folder that does not record its corpus
        corpus = None
    where = "the run's corpus"
    if corpus is None:  # or a run trained from prepared shards
        corpus, where = get_corpus("builtin"), "the built-in grammar"
    return hd.held_out_texts(corpus, bundle.tokenizer, bundle.train_config, args.examples), \
        f"{args.examples} held-out pairs of {where} (seed {hd.TEXTS_SEED})"


def cmd_heads(args) -> int:
    from bertcore.analysis import heads as hd
    from bertcore.io.checkpoint import load_checkpoint
    from bertcore.io.steps import load_step

    base = load_checkpoint(args.dir)
    texts, source = _texts(args, base)
    meta = {"texts": source, "n_texts": len(texts), "measures": list(hd.MEASURES), "roles": list(hd.ROLES),
            "share_threshold": hd.SHARE_THRESHOLD, "broad_fraction": hd.BROAD_FRACTION}
    if args.all_steps:
        r = hd.head_roles_over_steps(args.dir, texts)
        per = [{"step": s, "max_entropy": p["max_entropy"], "heads": hd.head_rows(p)}
               for s, p in zip(r["steps"], r["per_step"])]
        final = [{"layer": row["layer"], "head": row["head"], "role": row["role"],
                  "step": r["final_role_step"][row["layer"]][row["head"]]} for row in per[-1]["heads"]]
        out = {**meta, "steps": r["steps"], "per_step": per, "final_role": final}
    else:
        model = base.model if args.step is None else load_step(args.dir, args.step, bundle=base).model
        res = hd.head_measures(model, base.tokenizer, texts)
        out = {**meta, "step": args.step, "max_entropy": res["max_entropy"], "heads": hd.head_rows(res)}
    if args.json:
        print(json.dumps(out))
        return 0
    _print(out)
    return 0


def _table(rows: list[dict]) -> None:
    print("head (0-based)  prev   next   self   [CLS]  [SEP]  punct  entropy  role")
    for r in rows:
        print(f"  {r['layer']}.{r['head']:<12}" + " ".join(f"{r[k]:.3f} " for k in
              ("to_prev", "to_next", "to_self", "to_cls", "to_sep", "to_punct")) + f"{r['entropy']:.3f}    {r['role']}")


def _print(out: dict) -> None:
    print(f"texts: {out['texts']} ({out['n_texts']}); role when >= {out['share_threshold']} of the attention goes "
          f"to one target, broad when entropy >= {out['broad_fraction']} x uniform, else mixed", file=sys.stderr)
    if "per_step" not in out:
        print(f"step {out['step'] if out['step'] is not None else 'final'}; uniform attention entropy "
              f"{out['max_entropy']:.3f} nats")
        _table(out["heads"])
        return
    for p in out["per_step"]:
        print(f"step {p['step']}: " + ", ".join(f"{r['layer']}.{r['head']} {r['role']}" for r in p["heads"]))
    print("final role and the step from which it holds:")
    for r in out["final_role"]:
        print(f"  {r['layer']}.{r['head']}  {r['role']:<15} since step {r['step']}")
