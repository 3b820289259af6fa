"""`explain` and `ablate`: why a model predicts what it predicts (bertcore.analysis.explain, .ablation)."""
from __future__ import annotations

import json
import sys

from bertcore.cli.common import CliError, int_in, load_bundle

# the same numbers as bertcore.analysis.explain (not imported here: it imports torch; tests/test_explain.py checks)
DEFAULT_IG_STEPS, MIN_IG_STEPS, MAX_IG_STEPS = 64, 50, 2000


def add_explain_parsers(sub, corpus_help: str) -> None:
    """``explain`` and ``ablate`` (bertcore.analysis.explain / .ablation); layers and heads are 0-based."""
    x = sub.add_parser("explain", help="why the model predicts that: attention rollout, gradient x input or "
                       "integrated gradients for a [MASK] or for P(IsNext)")
    x.add_argument("dir", metavar="DIR")
    x.add_argument("a")
    x.add_argument("b", nargs="?")
    x.add_argument("--target", default="mask", help="mask (the first [MASK]), mask:i (the i-th, 0-based) or nsp")
    x.add_argument("--method", default="integrated_gradients",
                   choices=("rollout", "grad_x_input", "integrated_gradients"))
    x.add_argument("--steps", type=int_in(MIN_IG_STEPS, MAX_IG_STEPS, "--steps"), default=DEFAULT_IG_STEPS,
                   help=f"integrated-gradients interpolation steps (default {DEFAULT_IG_STEPS})")
    x.add_argument("--baseline", choices=("mask", "pad"), default="mask",
                   help="integrated-gradients baseline: every word replaced by [MASK] or [PAD] embeddings")
    x.add_argument("--json", action="store_true")

    a = sub.add_parser("ablate", help="switch attention heads off and measure held-out MLM/NSP (Michel et al. 2019)")
    a.add_argument("dir", metavar="DIR")
    a.add_argument("--heads", help="0-based LAYER.HEAD list, e.g. 0.1,2.3: each alone, then all together "
                   "(default: every head alone, the importance map)")
    a.add_argument("--curve", action="store_true", help="the pruning curve (Michel et al. 2019 §4): heads removed "
                   "one by one, least important (|gradient of the loss wrt the head mask|) first, with held-out MLM "
                   "and NSP after each removal")
    a.add_argument("--step", type=int_in(0, 10**9, "--step"), help="a run's saved step (default: the final model)")
    a.add_argument("--corpus", default="builtin", help=corpus_help + "; its held-out split is used")
    a.add_argument("--examples", type=int_in(1, 100_000, "--examples"), default=256,
                   help="held-out examples (fixed masks and NSP choices)")
    a.add_argument("--json", action="store_true")


def cmd_explain(args) -> int:
    from bertcore.analysis import explain as ex

    b = load_bundle(args.dir)
    if args.method == "rollout":
        r = ex.rollout_for(b.model, b.tokenizer, args.a, args.b)
        if args.json:
            print(json.dumps({"tokens": r["tokens"], "method": "rollout", "rollout": r["rollout"].tolist()}))
            return 0
        _note_truncated(r["truncated"])
        print("attention rollout (Abnar & Zuidema 2020): row = position at the top, column = input token")
        for tok, row in zip(r["tokens"], r["rollout"]):
            print(f"  {tok:<14} " + " ".join(f"{v:.2f}" for v in row))
        return 0
    r = ex.explain(b.model, b.tokenizer, args.a, args.b, target=args.target, method=args.method, steps=args.steps,
                   baseline=args.baseline)
    if args.json:
        print(json.dumps({"tokens": r.tokens, "method": r.method, "target": r.target, "target_label": r.target_label,
                          "position": r.position, "attributions": r.attributions.tolist(),
                          "completeness_gap": r.completeness_gap, "f_input": r.f_input, "f_baseline": r.f_baseline,
                          "baseline": r.baseline, "steps": r.steps}))
        return 0
    _note_truncated(r.truncated)
    print(f"{r.method} for {r.target} ({r.target_label!r} at position {r.position}); f = log-probability "
          f"{r.f_input:.4f}, baseline ({r.baseline}) {r.f_baseline:.4f}, completeness gap {r.completeness_gap:.4f}")
    for tok, v in zip(r.tokens, r.attributions):
        print(f"  {tok:<14} {v:+.4f}")
    return 0


def _note_truncated(truncated: bool) -> None:
    if truncated:
        print("note: the input was truncated to the model's maximum length", file=sys.stderr)


def cmd_ablate(args) -> int:
    from bertcore.analysis import ablation as ab
    from bertcore.data.corpora import get_corpus

    if args.curve and args.heads is not None:
        raise CliError("--curve removes every head in order of importance; leave --heads out")
    b = load_bundle(args.dir)
    if args.step is not None:
        from bertcore.io.steps import load_step

        b = load_step(args.dir, args.step, bundle=b)
    heads = ab.parse_heads(args.heads) if args.heads is not None else None
    L, H = int(b.model.config.num_hidden_layers), int(b.model.config.num_attention_heads)
    if heads:
        ab.head_mask_for(heads, L, H)  # range check before the slow part
    batches = ab.held_out_batches(b.tokenizer, get_corpus(args.corpus), b.train_config, args.examples,
                                  max_len=b.model.config.max_position_embeddings)
    if args.curve:
        return _curve(b.model, batches, args)
    imp = ab.head_importance(b.model, batches, heads)
    out = dict(imp)
    if heads and len(heads) > 1:
        both = ab.ablate(b.model, batches, heads, baseline=imp["baseline"])
        out["together"] = {"heads": both["heads"], **both["delta"]}
    if args.json:
        print(json.dumps(out))
        return 0
    base = out["baseline"]
    print(f"held-out baseline ({args.examples} examples): MLM loss {base['mlm_loss']:.4f}, MLM accuracy "
          f"{base['mlm_acc']:.4f}, NSP accuracy {base['nsp_acc']:.4f}")
    print("head (0-based)   d_mlm_loss  d_mlm_acc  d_nsp_acc")
    for r in out["heads"]:
        print(f"  {r['layer']}.{r['head']:<12} {r['d_mlm_loss']:+10.4f} {r['d_mlm_acc']:+10.4f} {r['d_nsp_acc']:+10.4f}")
    if "together" in out:
        t = out["together"]
        print(f"  all {len(t['heads'])} together {t['d_mlm_loss']:+10.4f} {t['d_mlm_acc']:+10.4f} "
              f"{t['d_nsp_acc']:+10.4f}")
    return 0


def _curve(model, batches, args) -> int:
    from bertcore.analysis.pruning import pruning_curve

    out = pruning_curve(model, batches)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"pruning curve on {args.examples} held-out examples (Michel et al. 2019): least important head first")
    print("removed  head (0-based)  mlm_acc  nsp_acc  mlm_loss")
    for p, h in zip(out["points"], [None, *out["order"]]):
        name = f"{h['layer']}.{h['head']}" if h else "-"
        print(f"  {p['removed']:<6} {name:<15} {p['mlm_acc']:.4f}   {p['nsp_acc']:.4f}   {p['mlm_loss']:.4f}")
    return 0
