"""Command-line interface: ``python -m bertcore COMMAND ...`` (see ``--help``).

    python -m bertcore train   [--out DIR] [--corpus builtin|tutorial|FILE] [--steps N] [--seed N] [--set KEY=VALUE ...]
    python -m bertcore train   --resume RUN_DIR
    python -m bertcore prepare --corpus FILE|DIR --out DATA [--vocab-size N | --vocab vocab.txt]
    python -m bertcore train   --data DATA [--device auto|cpu|cuda] [--precision fp32|bf16] [--grad-accum N]
                               [--compile] [--nproc-per-node N]   (also under torchrun)
    python -m bertcore fill-mask DIR "text with [MASK]" [--top-k K] [--json]
    python -m bertcore nsp     DIR "sentence A" "sentence B" [--json]
    python -m bertcore inspect DIR "sentence A" ["sentence B"] [--json]
    python -m bertcore mask    [--corpus ...] [--draws N] [--seed N] [--json]
    python -m bertcore presets [--size tiny|seed] [--json]
    python -m bertcore explain DIR "text" ["text B"] [--target mask[:i]|nsp] [--method rollout|grad_x_input|
                               integrated_gradients] [--steps N] [--baseline mask|pad] [--json]
    python -m bertcore ablate  DIR [--heads L.H,...] [--corpus ...] [--examples N] [--json]
    python -m bertcore export-hf DIR OUT_DIR
    python -m bertcore import-hf HF_DIR OUT_DIR

Bad input prints ``error: <what and how to fix>`` on stderr and exits with status 2, never a traceback.
Heavy imports (torch) happen inside the commands so ``--help`` is instant.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from bertcore.cli_data import (add_data_args, add_prepare_parser, cmd_prepare, cmd_train_data, is_shard_run,
                               refuse_data_options)

EXIT_BAD_INPUT = 2
MAX_DRAWS = 1_000_000


class _Parser(argparse.ArgumentParser):
    """argparse that reports problems as ``error: ...`` (exit 2) without the usage dump."""

    def error(self, message):  # noqa: D401 - argparse API
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see `python -m {self.prog} --help`)\n")


class CliError(Exception):
    """Bad command-line input found after parsing (printed as ``error: ...``, exit 2)."""


def _int_in(lo: int, hi: int, what: str):
    def parse(s: str) -> int:
        try:
            v = float(s)
            if not v.is_integer():
                raise ValueError
            v = int(v)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{what} must be a whole number, got {s!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{what}={v} is out of range; use a value in [{lo}, {hi}]")
        return v

    return parse


def _key_value(s: str) -> tuple[str, str]:
    if "=" not in s:
        raise argparse.ArgumentTypeError(f"--set expects KEY=VALUE (e.g. hidden_size=64), got {s!r}")
    k, v = s.split("=", 1)
    if not k.strip():
        raise argparse.ArgumentTypeError(f"--set expects KEY=VALUE with a key, got {s!r}")
    return k.strip(), v.strip()


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bertcore", description="A from-scratch BERT (Devlin et al. 2019): pre-train on MLM (§3.1) + "
                "NSP (§3.2), predict, inspect, and exchange checkpoints with HF transformers.",
                epilog="Bad input prints 'error: ...' on stderr and exits with status 2. `train` refuses configurations "
                "whose estimated training memory exceeds BERTCORE_MAX_MODEL_MB (default 1024).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    corpus_help = "builtin (default), builtin:SEED, tutorial, or a text file (tab-separated pairs or prose)"

    t = sub.add_parser("train", help="pre-train a model into a run directory (a checkpoint directory + run.json)")
    t.add_argument("--out", metavar="DIR", help="run directory to write (default: a new folder in "
                   "$BERTCORE_RUNS_DIR/runs, see the README's Limits table)")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run from its last checkpoint "
                   "(optimizer, LR schedule, RNG states and data order included); takes no other option")
    t.add_argument("--corpus", default="builtin", help=corpus_help)
    t.add_argument("--steps", type=_int_in(1, 1_000_000, "--steps"), help="optimizer steps (TrainConfig.steps)")
    t.add_argument("--seed", type=_int_in(0, 2**63 - 1, "--seed"), help="seed for init, data, masking and dropout")
    t.add_argument("--set", dest="overrides", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                   help="any BertConfig/TrainConfig field, e.g. --set hidden_size=64 --set lr=1e-3 (repeatable)")
    t.add_argument("--tokenizer", choices=("word", "wordpiece"), default="word", help="vocabulary kind")
    t.add_argument("--vocab-size", type=_int_in(50, 250_000, "--vocab-size"),
                   help="WordPiece vocabulary size (default: picked from the corpus, as the app does)")
    t.add_argument("--preset", help="start from a named preset (see `python -m bertcore presets`)")
    t.add_argument("--size", choices=("tiny", "seed"), default="tiny",
                   help="with --preset: tiny (trains in about a minute) or the seed's own model size")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    add_data_args(t)

    add_prepare_parser(sub)

    f = sub.add_parser("fill-mask", help="predict the tokens at each [MASK]")
    f.add_argument("dir", metavar="DIR")
    f.add_argument("text")
    f.add_argument("--top-k", type=_int_in(1, 1000, "--top-k"), default=5)
    f.add_argument("--json", action="store_true")

    n = sub.add_parser("nsp", help="P(IsNext): does sentence B follow sentence A?")
    n.add_argument("dir", metavar="DIR")
    n.add_argument("a")
    n.add_argument("b")
    n.add_argument("--json", action="store_true")

    i = sub.add_parser("inspect", help="tokens, segment ids and attention probabilities for one input")
    i.add_argument("dir", metavar="DIR")
    i.add_argument("a")
    i.add_argument("b", nargs="?")
    i.add_argument("--json", action="store_true")

    m = sub.add_parser("mask", help="measure the MLM masking rates (BERT §3.1) on a corpus")
    m.add_argument("--corpus", default="builtin", help=corpus_help)
    m.add_argument("--draws", type=_int_in(1, MAX_DRAWS, "--draws"), default=1000, help="examples to mask")
    m.add_argument("--seed", type=_int_in(0, 2**63 - 1, "--seed"), default=0)
    m.add_argument("--set", dest="overrides", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                   help="TrainConfig fields such as mlm_probability=0.2")
    m.add_argument("--json", action="store_true")

    r = sub.add_parser("presets", help="list the seed presets with their full model and training configs")
    r.add_argument("--size", choices=("tiny", "seed"), help="only this size (default: both)")
    r.add_argument("--json", action="store_true")

    e = sub.add_parser("export-hf", help="write a transformers BertForPreTraining directory")
    e.add_argument("dir", metavar="DIR")
    e.add_argument("out", metavar="OUT_DIR")

    h = sub.add_parser("import-hf", help="convert a transformers BERT directory into a bertcore checkpoint")
    h.add_argument("hf_dir", metavar="HF_DIR")
    h.add_argument("out", metavar="OUT_DIR")

    _add_explain_parsers(sub, corpus_help)
    return p


# the same numbers as bertcore.analysis.explain (not imported here: it imports torch; tests/test_explain.py checks)
DEFAULT_IG_STEPS, MIN_IG_STEPS, MAX_IG_STEPS = 64, 50, 2000


def _add_explain_parsers(sub, corpus_help: str) -> None:
    """``explain`` and ``ablate`` (bertcore.analysis.explain / .ablation); layers and heads are 0-based."""
    x = sub.add_parser("explain", help="why the model predicts that: attention rollout, gradient x input or "
                       "integrated gradients for a [MASK] or for P(IsNext)")
    x.add_argument("dir", metavar="DIR")
    x.add_argument("a")
    x.add_argument("b", nargs="?")
    x.add_argument("--target", default="mask", help="mask (the first [MASK]), mask:i (the i-th, 0-based) or nsp")
    x.add_argument("--method", default="integrated_gradients",
                   choices=("rollout", "grad_x_input", "integrated_gradients"))
    x.add_argument("--steps", type=_int_in(MIN_IG_STEPS, MAX_IG_STEPS, "--steps"), default=DEFAULT_IG_STEPS,
                   help=f"integrated-gradients interpolation steps (default {DEFAULT_IG_STEPS})")
    x.add_argument("--baseline", choices=("mask", "pad"), default="mask",
                   help="integrated-gradients baseline: every word replaced by [MASK] or [PAD] embeddings")
    x.add_argument("--json", action="store_true")

    a = sub.add_parser("ablate", help="switch attention heads off and measure held-out MLM/NSP (Michel et al. 2019)")
    a.add_argument("dir", metavar="DIR")
    a.add_argument("--heads", help="0-based LAYER.HEAD list, e.g. 0.1,2.3: each alone, then all together "
                   "(default: every head alone, the importance map)")
    a.add_argument("--corpus", default="builtin", help=corpus_help + "; its held-out split is used")
    a.add_argument("--examples", type=_int_in(1, 100_000, "--examples"), default=256,
                   help="held-out examples (fixed masks and NSP choices)")
    a.add_argument("--json", action="store_true")


def _overrides(pairs) -> dict:
    out = {}
    for k, v in pairs:
        out[k] = v
    return out


def _configs(args):
    from bertcore.config import PRESETS, BertConfig, TrainConfig, preset, split_overrides

    bert_kw, train_kw = {}, {}
    if args.preset is not None:
        if args.preset not in PRESETS:
            raise CliError(f"unknown preset {args.preset!r}; choose one of: {', '.join(PRESETS)}")
        bert_kw, train_kw = preset(args.preset, getattr(args, "size", "tiny"))
    b, t = split_overrides(_overrides(args.overrides))
    bert_kw.update(b)
    train_kw.update(t)
    if args.steps is not None:
        train_kw["steps"] = args.steps
    if args.seed is not None:
        train_kw["seed"] = args.seed
    return BertConfig(**bert_kw), TrainConfig(**train_kw), "vocab_size" in bert_kw


def max_model_mb() -> float:
    """Training-memory budget in MB (bertcore.training.service.max_model_mb, env BERTCORE_MAX_MODEL_MB)."""
    from bertcore.training.service import max_model_mb as budget

    return budget()


def _train_spec(args):
    from bertcore.training.service import RunSpec

    bert, train, vocab_given = _configs(args)
    if args.vocab_size is not None and args.tokenizer != "wordpiece":
        raise CliError("--vocab-size only applies to --tokenizer wordpiece (a word-level vocabulary keeps every word)")
    name = os.path.basename(os.path.normpath(os.path.expanduser(args.out))) if args.out else ""
    return RunSpec(bert, train, corpus=args.corpus, tokenizer=args.tokenizer,
                   tokenizer_vocab_size=args.vocab_size or (bert.vocab_size if vocab_given else None), preset=args.preset,
                   name=name or f"{args.preset or 'cli'}, seed {train.seed}", source=f"bertcore train on {args.corpus}")


def cmd_train(args) -> int:
    if args.data is not None or (args.resume is not None and is_shard_run(args.resume)):
        return cmd_train_data(args)
    refuse_data_options(args)
    from tqdm import tqdm

    from bertcore.training import service

    if args.resume is not None:
        given = [o for o, v in (("--out", args.out), ("--steps", args.steps), ("--seed", args.seed),
                                ("--set", args.overrides), ("--preset", args.preset)) if v]
        if args.corpus != "builtin" or args.tokenizer != "word":
            given.append("--corpus/--tokenizer")
        if given:
            raise CliError(f"--resume continues a run with its saved settings; drop {', '.join(given)}")
    else:
        spec = _train_spec(args)
        if args.out and os.path.exists(os.path.expanduser(args.out)) and not os.path.isdir(os.path.expanduser(args.out)):
            raise CliError(f"--out {args.out} exists and is a file; give a directory path")
    bars = []  # the progress bar, made once training starts (bad input prints only the error)

    def started(tr, run_dir):
        print(f"training {sum(p.numel() for p in tr.model.parameters()):,} parameters on {tr.corpus.name} "
              f"({len(tr.corpus)} pairs, vocab {tr.tokenizer.vocab_size}) for {tr.config.steps} steps "
              f"into {run_dir}", file=sys.stderr)
        bars.append(tqdm(total=tr.config.steps, initial=tr.step_count, file=sys.stderr, disable=args.quiet,
                         unit="step", mininterval=0.5, dynamic_ncols=True))

    def progress(tr, row):
        bar = bars[0]
        bar.update(1)
        if tr.step_count % 10 == 0 or tr.done:
            bar.set_postfix(mlm=f"{row['mlm_loss']:.3f}", nsp=f"{row['nsp_loss']:.3f}", refresh=False)

    hooks = service.Hooks(on_start=started, on_step=progress)
    try:
        if args.resume is not None:
            result = service.resume(args.resume, hooks=hooks)
        else:
            out = os.path.expanduser(args.out) if args.out else None
            result = service.train(spec, out, hooks=hooks)
    finally:
        for bar in bars:
            bar.close()
    trainer, out = result.trainer, result.run_dir
    hist = trainer.history
    ev = hist.dropna(subset=["eval_mlm_acc"]) if len(hist) else hist
    if len(ev):
        last = ev.iloc[-1]
        base = trainer.unigram_baseline
        ratio = f" = {last.eval_mlm_acc / base:.2f}x the unigram baseline" if base > 0 else ""
        print(f"held-out after step {int(last.step)}: masked-token accuracy {last.eval_mlm_acc:.3f}{ratio} "
              f"({base:.3f}), NSP accuracy {last.eval_nsp_acc:.3f}, MLM loss {last.eval_mlm_loss:.3f}, "
              f"NSP loss {last.eval_nsp_loss:.3f}")
    else:
        print(f"no held-out evaluation yet; unigram baseline {trainer.unigram_baseline:.3f}")
    if result.interrupted:
        print(f"interrupted at step {trainer.step_count}/{trainer.config.steps}; saved the model trained so far to "
              f"{out} (continue with `python -m bertcore train --resume {out}`)", file=sys.stderr)
        return 130
    if result.status == "failed":
        print(f"error: {trainer.error}. The last good weights were saved to {out}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"saved checkpoint to {out}")
    return 0


def _load(path: str):
    from bertcore.io.checkpoint import load_checkpoint

    return load_checkpoint(path)


def cmd_fill_mask(args) -> int:
    from bertcore.analysis.inference import fill_mask

    b = _load(args.dir)
    r = fill_mask(b.model, b.tokenizer, args.text, top_k=args.top_k)
    if args.json:
        print(json.dumps({"tokens": r.tokens, "masks": [
            {"position": m.position, "candidates": [{"token": t, "prob": p} for t, p in m.candidates]}
            for m in r.masks]}))
        return 0
    if r.truncated:
        print("note: the text was truncated to the model's maximum length", file=sys.stderr)
    print(" ".join(r.tokens))
    for m in r.masks:
        print(f"[MASK] at position {m.position}:")
        for t, p in m.candidates:
            print(f"  {t:<20} {p:.4f}")
    return 0


def cmd_nsp(args) -> int:
    from bertcore.analysis.inference import nsp_probability

    b = _load(args.dir)
    p = nsp_probability(b.model, b.tokenizer, args.a, args.b)
    print(json.dumps({"is_next": p}) if args.json else f"P(IsNext) = {p:.4f}")
    return 0


def cmd_inspect(args) -> int:
    from bertcore.analysis.inference import inspect_pair

    b = _load(args.dir)
    r = inspect_pair(b.model, b.tokenizer, args.a, args.b)
    if args.json:
        print(json.dumps({"tokens": r.tokens, "segment_ids": list(r.segment_ids), "attentions": r.attentions.tolist()}))
        return 0
    if r.truncated:
        print("note: the input was truncated to the model's maximum length", file=sys.stderr)
    print("tokens:     " + " ".join(r.tokens))
    print("segment ids:" + " ".join(str(s) for s in r.segment_ids))
    L, H, T, _ = r.attentions.shape
    print(f"attentions: {L} layers x {H} heads x {T} x {T}; most-attended token per head (from [CLS]):")
    for layer in range(L):
        row = [r.tokens[int(r.attentions[layer, h, 0].argmax())] for h in range(H)]
        print(f"  layer {layer}: " + "  ".join(row))
    return 0


def cmd_mask(args) -> int:
    from bertcore.config import TrainConfig, split_overrides
    from bertcore.data.corpus import get_corpus
    from bertcore.data.pretraining import MaskingRates, PretrainingData, masking_stats
    from bertcore.data.tokenization import WordTokenizer

    bert_kw, train_kw = split_overrides(_overrides(args.overrides))
    if bert_kw:
        raise CliError(f"mask only takes training settings; {', '.join(bert_kw)} belong to the model config")
    tc = TrainConfig(**train_kw)
    corpus = get_corpus(args.corpus)
    tok = WordTokenizer.build(corpus.texts())
    data = PretrainingData(corpus, tok, tc.max_seq_len, MaskingRates(tc.mlm_probability, tc.mask_token_frac,
                           tc.random_token_frac), tc.nsp_positive_prob, tc.held_out_frac, args.seed)
    s = masking_stats(data, args.draws, args.seed)
    keys = ("draws", "tokens_seen", "selected_rate", "mask_share", "random_share", "keep_share")
    out = {k: (int(s[k]) if k in ("draws", "tokens_seen") else float(s[k])) for k in keys}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['draws']} examples, {out['tokens_seen']} non-special tokens")
        print(f"selected {out['selected_rate']:.4f} (configured {tc.mlm_probability}); of the selected: "
              f"[MASK] {out['mask_share']:.4f} ({tc.mask_token_frac}), random {out['random_share']:.4f} "
              f"({tc.random_token_frac}), kept {out['keep_share']:.4f} ({tc.keep_frac:.2f})")
    return 0


def cmd_export_hf(args) -> int:
    from bertcore.io.hf_interop import export_hf

    b = _load(args.dir)
    out = export_hf(b, os.path.expanduser(args.out))
    print(f"wrote a transformers directory to {out} (load it with BertForPreTraining.from_pretrained)")
    return 0


def cmd_import_hf(args) -> int:
    from bertcore.io.checkpoint import save_checkpoint
    from bertcore.io.hf_interop import import_hf

    b = import_hf(os.path.expanduser(args.hf_dir))
    save_checkpoint(b, os.path.expanduser(args.out))
    for note in b.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"saved bertcore checkpoint to {args.out}")
    return 0


def cmd_presets(args) -> int:
    """Each preset's full BertConfig (vocab_size comes from the tokenizer at training time) and TrainConfig."""
    from bertcore.config import BertConfig, TrainConfig, estimate
    from bertcore.presets import PRESET_NOTES, PRESET_SIZES, PRESETS, SEED_FILES, preset

    out = []
    for name in PRESETS:
        for size in [args.size] if args.size else PRESET_SIZES:
            b, t = preset(name, size)
            bert, train = BertConfig(**b), TrainConfig(**t)
            out.append({"name": name, "size": size, "seeds": SEED_FILES[name], "bert": bert.to_dict(),
                        "train": train.to_dict(), "params_at_vocab_size": estimate(bert)["params"],
                        "notes": PRESET_NOTES[name]})
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    default = BertConfig().to_dict()
    for p in out:
        diff = {k: v for k, v in p["bert"].items() if default[k] != v}
        seeds = ", ".join(p["seeds"]) if p["seeds"] else "BERT paper / HF transformers"
        print(f"{p['name']} [{p['size']}] (seeds: {seeds}; {p['params_at_vocab_size']:,} parameters at "
              f"vocab_size={p['bert']['vocab_size']})")
        print("  " + (", ".join(f"{k}={v}" for k, v in diff.items()) or "the BertConfig defaults"))
    return 0


def cmd_explain(args) -> int:
    from bertcore.analysis import explain as ex

    b = _load(args.dir)
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
    from bertcore.data.corpus import get_corpus

    b = _load(args.dir)
    heads = ab.parse_heads(args.heads) if args.heads is not None else None
    L, H = int(b.model.config.num_hidden_layers), int(b.model.config.num_attention_heads)
    if heads:
        ab.head_mask_for(heads, L, H)  # range check before the slow part
    batches = ab.held_out_batches(b.tokenizer, get_corpus(args.corpus), b.train_config, args.examples,
                                  max_len=b.model.config.max_position_embeddings)
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


COMMANDS = {"prepare": cmd_prepare, "train": cmd_train, "fill-mask": cmd_fill_mask, "nsp": cmd_nsp,
            "inspect": cmd_inspect, "explain": cmd_explain, "ablate": cmd_ablate, "mask": cmd_mask,
            "presets": cmd_presets, "export-hf": cmd_export_hf, "import-hf": cmd_import_hf}


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return COMMANDS[args.command](args)
    except (CliError, ValueError) as e:  # BertcoreError is a ValueError
        return _fail(str(e))
    except FileNotFoundError as e:
        return _fail(f"{e.filename or e}: no such file or directory; check the path")
    except PermissionError as e:
        return _fail(f"{e.filename or e}: permission denied; choose a location you can write/read")
    except OSError as e:
        return _fail(f"{e}; check the paths and free disk space")
    except MemoryError:
        return _fail("out of memory; use a smaller model or batch (--set hidden_size=... --set batch_size=...)")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the CLI contract: never a traceback
        if os.environ.get("BERTCORE_DEBUG"):
            raise
        return _fail(f"unexpected {type(e).__name__}: {e} (re-run with BERTCORE_DEBUG=1 for details and report it)")
