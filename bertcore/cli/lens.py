"""`lens` and `patch`: where in the network an answer forms (bertcore.analysis.lens, .patching)."""
from __future__ import annotations

import json
import sys

from bertcore.cli.common import bundle_at_step, int_in


def add_lens_parsers(sub) -> None:
    """``lens`` (logit lens at every [MASK]) and ``patch`` (activation patching); layers 0-based, 0 = embeddings."""
    x = sub.add_parser("lens", help="logit lens: the MLM head applied to every layer's hidden state at each [MASK]")
    x.add_argument("dir", metavar="RUN", help="a run directory, a checkpoint folder or minilm")
    x.add_argument("text", help="a text with [MASK]")
    x.add_argument("--step", type=int_in(0, 10**9, "--step"), help="a saved step of the run (default: final)")
    x.add_argument("--top-k", type=int_in(1, 100, "--top-k"), default=5)
    x.add_argument("--word", help="also the rank and probability of this word at every layer")
    x.add_argument("--json", action="store_true")

    p = sub.add_parser("patch", help="activation patching: B's hidden state at one layer x position put into A")
    p.add_argument("dir", metavar="RUN", help="a run directory, a checkpoint folder or minilm")
    p.add_argument("a", help="text A with [MASK]")
    p.add_argument("b", help="text B, the same number of tokens")
    p.add_argument("--right", help="the word B should predict (readout logit(right) - logit(wrong))")
    p.add_argument("--wrong", help="the word A should predict")
    p.add_argument("--heads", action="store_true", help="also the layer x head map (one head's output patched)")
    p.add_argument("--step", type=int_in(0, 10**9, "--step"), help="a saved step of the run (default: final)")
    p.add_argument("--json", action="store_true")


def cmd_lens(args) -> int:
    from bertcore.analysis.lens import lens_json, logit_lens

    b = bundle_at_step(args.dir, args.step)
    r = logit_lens(b.model, b.tokenizer, args.text, top_k=args.top_k, word=args.word)
    if args.json:
        print(json.dumps(lens_json(r)))
        return 0
    if r.truncated:
        print("note: the text was truncated to the model's maximum length", file=sys.stderr)
    print(f"logit lens: {r.applied}")
    for m, pos in enumerate(r.positions):
        print(f"[MASK] at position {pos}:")
        for layer, cands in enumerate(r.top[m]):
            word = (f"   {r.word}: rank {r.word_rank[m][layer]}, p {r.word_prob[m][layer]:.4f}"
                    if r.word is not None else "")
            print(f"  layer {layer}: " + "  ".join(f"{t} {q:.3f}" for t, q in cands) + word)
    return 0


def cmd_patch(args) -> int:
    from bertcore.analysis.patching import activation_patching, patch_json

    b = bundle_at_step(args.dir, args.step)
    r = activation_patching(b.model, b.tokenizer, args.a, args.b, right=args.right, wrong=args.wrong,
                            heads=args.heads)
    if args.json:
        print(json.dumps(patch_json(r)))
        return 0
    for n in r.notes:
        print(f"note: {n}", file=sys.stderr)
    print(f"readout {r.readout} at position {r.position}: A {r.d_a:+.4f}, B {r.d_b:+.4f}; "
          "effect (0 = A's answer, 1 = B's), rows = layers (0 = embeddings), columns = positions")
    print("        " + " ".join(f"{t[:7]:>7}" for t in r.tokens_a))
    for layer, row in enumerate(r.effect):
        print(f"  {layer:>4}  " + " ".join(f"{v:7.3f}" for v in row))
    if r.head_effect is not None:
        print("heads: rows = layers (0-based), columns = heads")
        for layer, row in enumerate(r.head_effect):
            print(f"  {layer:>4}  " + " ".join(f"{v:7.3f}" for v in row))
    return 0
