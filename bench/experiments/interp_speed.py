"""``python -m bench.experiments.interp_speed [--reps N] [--threads T] [--json]``: logit lens and activation patching speed.

* ``default``: the default model (``BertConfig(vocab_size=...)`` of the built-in tokenizer, the architecture the
  one-press "Train the default model" trains; speed does not depend on the weights) on a ready is/are pair: the lens,
  patching (layer x position), patching with heads. The first call and the median of ``--reps`` later calls with a
  new input each time (the page caches per input, so "after the first call" means: warm process, new text).
* ``minilm``: all-MiniLM-L6-v2 (packaged) on a short pair and on a 512-token pair: the lens answers "no MLM head"
  (timed: the refusal), patching with the [CLS] projection readout; for 512 tokens both the page's default (the
  differing positions, [CLS], the [MASK]) and every position.
* ``page``: server-side time of one page run (AppTest, app.py included) after the text changed, lens and patch view.

Numbers go to docs/BENCH.md ("Logit lens & patching"); nothing is asserted. The chromium timing is taken by
tests/test_browser_interp_lens.py (printed with -s).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LONG = "the quick brown fox jumps over the lazy dog near the river bank ."


def _timed(f):
    t0 = time.perf_counter()
    out = f()
    return time.perf_counter() - t0, out


def _series(fs: list) -> dict:
    """First call, then the median and max of the others (each a new input)."""
    ts = [_timed(f)[0] for f in fs]
    rest = ts[1:] or ts
    return {"first_s": round(ts[0], 4), "median_s": round(statistics.median(rest), 4), "max_s": round(max(rest), 4)}


def default_model(reps: int) -> dict:
    import torch

    from bertcore.analysis.lens import logit_lens
    from bertcore.analysis.patching import activation_patching, default_pairs
    from bertcore.config import BertConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.tokenization import WordTokenizer
    from bertcore.model.bert import BertForPreTraining

    corpus = builtin_corpus(seed=0, n_pairs=4000)
    tok = WordTokenizer.build([s for p in corpus.pairs for s in p])
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size)).eval()
    pairs = (default_pairs(tok, limit=reps + 1) * (reps + 1))[:reps + 1]
    cfg = model.config
    return {
        "model": f"{cfg.num_hidden_layers} layers x {cfg.num_attention_heads} heads, hidden {cfg.hidden_size}, "
                 f"vocab {tok.vocab_size}",
        "tokens": len(tok.encode(pairs[0][0])) + 2,
        "lens": _series([lambda p=p: logit_lens(model, tok, p[0], top_k=5, word=p[2]) for p in pairs]),
        "patch": _series([lambda p=p: activation_patching(model, tok, p[0], p[1], p[2], p[3]) for p in pairs]),
        "patch_heads": _series([lambda p=p: activation_patching(model, tok, p[0], p[1], p[2], p[3], heads=True)
                                for p in pairs]),
    }


def minilm(reps: int) -> dict | None:
    from bertcore.analysis.lens import logit_lens
    from bertcore.analysis.patching import activation_patching, focus_positions
    from bertcore.errors import InputError
    from bertcore.io.hf_interop import import_hf, packaged_minilm_dir

    d = packaged_minilm_dir()
    if d is None:
        return None
    b = import_hf(d)
    model, tok = b.model, b.tokenizer

    def refuse(text):
        try:
            logit_lens(model, tok, text)
        except InputError:
            return True

    shorts = [(f"the cat sat on the mat number {i} .", f"the dog sat on the mat number {i} .") for i in range(reps + 1)]
    words = LONG.split()
    longs = [(" ".join(words[(i + j) % len(words)] for j in range(600)),) for i in range(reps + 1)]
    longs = [(a, a.replace("fox", "cat", 1)) for (a,) in longs]
    out = {"lens_no_mlm_head": _series([lambda p=p: refuse(p[0]) for p in shorts]),
           "patch_short": _series([lambda p=p: activation_patching(model, tok, p[0], p[1], heads=True) for p in shorts]),
           "patch_512_focus": _series([lambda p=p: activation_patching(
               model, tok, p[0], p[1], positions=focus_positions(tok, p[0], p[1], 512), max_len=512)
               for p in longs]),
           "patch_512_focus_heads": _series([lambda p=p: activation_patching(
               model, tok, p[0], p[1], heads=True, positions=focus_positions(tok, p[0], p[1], 512), max_len=512)
               for p in longs])}
    # every position of a 512-token pair: 7 x 512 runs; timed on 64 positions and scaled (the runs are batched
    # per layer in equal chunks, so the time grows linearly with the positions)
    t64 = _timed(lambda: activation_patching(model, tok, longs[0][0], longs[0][1], positions=list(range(64)),
                                             max_len=512))[0]
    out["patch_512_all_positions_s_estimated"] = round(t64 * 512 / 64, 1)
    return out


def page(reps: int) -> dict:
    """Server-side time of a page run (AppTest) after the texts changed, untrained default model, both views."""
    from streamlit.testing.v1 import AppTest

    from bertcore.analysis.patching import default_pairs
    from explorer.session.workspace import shared_corpus_and_tokenizer

    _, tok = shared_corpus_and_tokenizer()
    pairs = default_pairs(tok, limit=reps + 1)
    out = {}
    for view in ("lens", "patch"):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
        at.query_params["lp_view"] = view
        at.switch_page("app_pages/lens_patching.py").run()
        ts = []
        for a, b, _right, _ in pairs[1:]:
            key = "lp_text" if view == "lens" else "lp_a"
            t0 = time.perf_counter()
            at.text_input(key=key).set_value(a)
            if view == "patch":
                at.text_input(key="lp_b").set_value(b)
            at.run()
            ts.append(time.perf_counter() - t0)
            assert not at.exception, [e.value for e in at.exception]
        out[view] = {"median_s": round(statistics.median(ts), 4), "max_s": round(max(ts), 4)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.interp_speed")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-page", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    res = {"threads": args.threads, "default": default_model(args.reps)}
    print(json.dumps(res), flush=True)
    res["minilm"] = minilm(max(1, args.reps // 2))
    print(json.dumps(res["minilm"]), flush=True)
    if not args.no_page:
        res["page"] = page(args.reps)
    print(json.dumps(res, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
