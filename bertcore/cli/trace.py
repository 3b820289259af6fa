"""`trace`: one forward pass with every named tensor of the embeddings and of one layer (bertcore.analysis.trace)."""
from __future__ import annotations

import json

from bertcore.cli.common import bundle_at_step, int_in


def add_trace_parser(sub) -> None:
    x = sub.add_parser("trace", help="every named tensor of one forward pass: embeddings, Q/K/V, scores, softmax, "
                       "context, W^O, residual, LayerNorm, FFN of one layer")
    x.add_argument("dir", metavar="RUN", help="a run directory, an import-hf folder or minilm")
    x.add_argument("a", help="the text (sentence A)")
    x.add_argument("b", nargs="?", help="sentence B (optional)")
    x.add_argument("--layer", type=int_in(0, 10_000, "--layer"), default=0, help="encoder layer, 0-based (default 0)")
    x.add_argument("--step", type=int_in(0, 10**9, "--step"), help="a saved step of the run (default: final)")
    x.add_argument("--json", action="store_true", help='{"tokens": [...], "tensors": {name: {"shape", "values"}}}')


def cmd_trace(args) -> int:
    import numpy as np

    from bertcore.analysis.trace import trace, trace_json

    b = bundle_at_step(args.dir, args.step)
    t = trace(b.model, b.tokenizer, args.a, args.b, layer=args.layer)
    if args.json:
        print(json.dumps(trace_json(t)))
        return 0
    for n in t.notes:
        print(f"note: {n}")
    if getattr(b.model.config, "causal", False):  # BERT Table 5's LTR
        print("note: a left-to-right model: the attention mask is causal, so every masked score above the diagonal "
              "is -inf and every probability there is 0")
    print("tokens: " + " ".join(f"{i}:{tok}" for i, tok in enumerate(t.tokens)))
    with np.printoptions(precision=4, suppress=True, threshold=400, edgeitems=3, linewidth=110):
        for name, v in t.tensors.items():
            print(f"\n{name}  {tuple(v.shape)}")
            print(v)
    return 0
