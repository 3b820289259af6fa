"""Command-line interface: ``python -m bertcore COMMAND ...`` (see ``--help``).

    python -m bertcore train   [--out DIR] [--corpus builtin|tutorial|FILE] [--steps N] [--seed N] [--set KEY=VALUE ...]
                               [--device auto|cpu|cuda] [--precision auto|fp32|bf16]   (on every train)
    python -m bertcore train   --resume RUN_DIR [--device ...] [--precision ...]
    python -m bertcore prepare --corpus FILE|DIR --out DATA [--vocab-size N | --vocab vocab.txt]
    python -m bertcore train   --data DATA [--grad-accum N] [--compile] [--nproc-per-node N]   (also under torchrun)
    python -m bertcore fill-mask DIR "text with [MASK]" [--top-k K] [--json]
    python -m bertcore nsp     DIR "sentence A" "sentence B" [--json]
    python -m bertcore inspect DIR "sentence A" ["sentence B"] [--json]
    python -m bertcore mask    [--corpus ...] [--draws N] [--seed N] [--json]
    python -m bertcore presets [--size tiny|seed] [--json]
    python -m bertcore explain DIR "text" ["text B"] [--target mask[:i]|nsp] [--method rollout|grad_x_input|
                               integrated_gradients] [--steps N] [--baseline mask|pad] [--json]
    python -m bertcore ablate  DIR [--heads L.H,...|--curve] [--corpus ...] [--examples N] [--json]
    python -m bertcore heads   RUN [--texts FILE] [--step N|--all-steps] [--json]
    python -m bertcore export-hf DIR OUT_DIR
    python -m bertcore import-hf HF_DIR OUT_DIR
    python -m bertcore finetune --from DIR|minilm|scratch --task NAME|FILE.csv --labels N --steps S --seed K --out DIR
    python -m bertcore classify DIR "text" ["text B"] [--json]
    python -m bertcore probe   RUN --property NAME [--step N | --all-steps] [--labels FILE.csv] [--json]
    python -m bertcore trace   RUN "text A" ["text B"] [--layer L] [--step N] [--json]
    python -m bertcore sae     RUN --layer L [--site residual|ffn] [--size N] [--k K | --l1 C] [--step N] [--json]
    python -m bertcore features SAE_DIR [--top N] [--feature F] [--text "..."] [--json]
    python -m bertcore steer   RUN SAE_DIR --feature F [--strength S] ("text with [MASK]" | --skill NAME) [--json]

Bad input prints ``error: <what and how to fix>`` on stderr and exits with status 2, never a traceback.
Heavy imports (torch) happen inside the commands so ``--help`` is instant.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from bertcore.cli_common import (
    EXIT_BAD_INPUT,
    CliError,
    Parser,
    ProgressBar,
    add_runtime_args,
    int_in,
    key_value,
    load_bundle,
    overrides_dict,
    runtime_of,
    train_configs,
)
from bertcore.cli_data import (
    add_data_args,
    add_prepare_parser,
    cmd_prepare,
    cmd_train_data,
    is_shard_run,
    refuse_data_options,
)
from bertcore.cli_explain import add_explain_parsers, cmd_ablate, cmd_explain
from bertcore.cli_finetune import add_finetune_parsers, cmd_classify, cmd_finetune
from bertcore.cli_heads import add_heads_parser, cmd_heads
from bertcore.cli_probe import add_probe_parser, cmd_probe
from bertcore.cli_skills import add_skills_parser, cmd_skills
from bertcore.cli_lens import add_lens_parsers, cmd_lens, cmd_patch
from bertcore.cli_trace import add_trace_parser, cmd_trace
from bertcore.cli_sae import add_sae_parsers, cmd_features, cmd_sae, cmd_steer

MAX_DRAWS = 1_000_000


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="bertcore", description="A from-scratch BERT (Devlin et al. 2019): pre-train on MLM (§3.1) + "
                "NSP (§3.2), predict, inspect, and exchange checkpoints with HF transformers.",
                epilog="Bad input prints 'error: ...' on stderr and exits with status 2. `train` refuses configurations "
                "whose estimated training memory exceeds BERTCORE_MAX_MODEL_MB (default 1024).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    corpus_help = ("builtin (default, English grammar), builtin-zh (Chinese grammar), NAME:SEED for another seed, "
                   "tutorial, or a text file (tab-separated pairs or prose)")

    t = sub.add_parser("train", help="pre-train a model into a run directory (a checkpoint directory + run.json)")
    t.add_argument("--out", metavar="DIR", help="run directory to write (default: a new folder in "
                   "$BERTCORE_RUNS_DIR/runs, see docs/LIMITS.md)")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run from its last checkpoint "
                   "(optimizer, LR schedule, RNG states and data order included); takes no other option")
    t.add_argument("--corpus", default="builtin", help=corpus_help)
    t.add_argument("--steps", type=int_in(1, 1_000_000, "--steps"), help="optimizer steps (TrainConfig.steps)")
    t.add_argument("--seed", type=int_in(0, 2**63 - 1, "--seed"), help="seed for init, data, masking and dropout")
    t.add_argument("--set", dest="overrides", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="any BertConfig/TrainConfig field, e.g. --set hidden_size=64 --set lr=1e-3 (repeatable)")
    t.add_argument("--tokenizer", choices=("word", "wordpiece", "seed_word"),
                   help="vocabulary kind: word (default), wordpiece, or seed_word (BERT-pytorch's: <pad> <unk> <eos> "
                   "<sos> <mask>, whitespace words, case kept; the default of --preset 'BERT-pytorch (codertimo)' "
                   "--size paper)")
    t.add_argument("--vocab-size", type=int_in(50, 250_000, "--vocab-size"),
                   help="WordPiece vocabulary size (default: picked from the corpus, as the app does)")
    t.add_argument("--preset", help="start from a named preset (see `python -m bertcore presets`)")
    t.add_argument("--size", choices=("tiny", "paper", "seed"), default="tiny",
                   help="with --preset: tiny (trains in about a minute) or paper (the model size of the seed's own "
                   "code or paper; 'seed' is its old name)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--skills", metavar="FILE", help="your own skill items, scored at every evaluation like the "
                   "built-in ones: a CSV with the header text,right,wrong and one [MASK] per text")
    add_runtime_args(t)
    add_data_args(t)

    add_prepare_parser(sub)

    f = sub.add_parser("fill-mask", help="predict the tokens at each [MASK]")
    f.add_argument("dir", metavar="DIR")
    f.add_argument("text")
    f.add_argument("--top-k", type=int_in(1, 1000, "--top-k"), default=5)
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
    m.add_argument("--draws", type=int_in(1, MAX_DRAWS, "--draws"), default=1000, help="examples to mask")
    m.add_argument("--seed", type=int_in(0, 2**63 - 1, "--seed"), default=0)
    m.add_argument("--set", dest="overrides", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="TrainConfig fields such as mlm_probability=0.2")
    m.add_argument("--json", action="store_true")

    r = sub.add_parser("presets", help="list the seed presets with their full model and training configs")
    r.add_argument("--size", choices=("tiny", "paper", "seed"), help="only this size (default: both)")
    r.add_argument("--json", action="store_true")

    e = sub.add_parser("export-hf", help="write a transformers BertForPreTraining directory")
    e.add_argument("dir", metavar="DIR")
    e.add_argument("out", metavar="OUT_DIR")

    h = sub.add_parser("import-hf", help="convert a transformers BERT directory into a bertcore checkpoint")
    h.add_argument("hf_dir", metavar="HF_DIR")
    h.add_argument("out", metavar="OUT_DIR")

    add_explain_parsers(sub, corpus_help)
    add_finetune_parsers(sub)
    add_heads_parser(sub)
    add_probe_parser(sub)
    add_skills_parser(sub)
    add_lens_parsers(sub)
    add_trace_parser(sub)
    add_sae_parsers(sub)
    return p


def _train_spec(args):
    from bertcore.presets import preset_tokenizer
    from bertcore.jobs.service import RunSpec

    from bertcore.data.corpora import get_corpus, is_builtin_spec
    from bertcore.data.corpus_defaults import corpus_defaults, default_tokenizer, train_config_for

    rt = runtime_of(args)  # --device cuda without a GPU: one error line, before the corpus is read
    bert, train, vocab_given = train_configs(args)
    kind = args.tokenizer or preset_tokenizer(args.preset, args.size)
    if args.vocab_size is not None and kind != "wordpiece":
        raise CliError("--vocab-size only applies to --tokenizer wordpiece (a word-level vocabulary keeps every word)")
    name = os.path.basename(os.path.normpath(os.path.expanduser(args.out))) if args.out else ""
    skill_csv = None
    if args.skills:
        try:
            skill_csv = (os.path.basename(args.skills), open(os.path.expanduser(args.skills), "rb").read())
        except OSError as e:
            raise CliError(f"cannot read --skills {args.skills}: {e.strerror or e}; check the path") from None
    corpus, defaults, vocab = args.corpus, None, args.vocab_size or (bert.vocab_size if vocab_given else None)
    if args.tokenizer is None and not is_builtin_spec(args.corpus):  # a file: the Train page's defaults for it
        corpus = get_corpus(args.corpus)
        d = corpus_defaults(corpus, user_file=True, preset_tokenizer=kind, size=args.size, tokenizer=False)
        kind, vocab = default_tokenizer(corpus, d.tokenizer, vocab or d.vocab_size), vocab or d.vocab_size
        d = corpus_defaults(corpus, user_file=True, preset_tokenizer=d.tokenizer, size=args.size,
                            preset_max_seq_len=train.max_seq_len, tokenizer=kind)
        if "max_seq_len" not in overrides_dict(args.overrides):
            train = train_config_for(train, d)
        defaults = d.to_dict()
    return RunSpec(bert, train, corpus=corpus, corpus_spec=None if corpus is args.corpus else args.corpus,
                   tokenizer=kind, tokenizer_vocab_size=vocab, preset=args.preset, defaults=defaults,
                   skill_csv=skill_csv, runtime=rt,
                   name=name or f"{args.preset or 'cli'}, seed {train.seed}", source=f"bertcore train on {args.corpus}")


def cmd_train(args) -> int:
    if args.data is not None and args.tokenizer is not None:
        raise CliError(f"--tokenizer {args.tokenizer} does not apply with --data: the prepared folder has its own "
                       "WordPiece vocabulary (`bertcore prepare --vocab-size N` or --vocab vocab.txt); drop --tokenizer")
    if args.skills and (args.data is not None or args.resume is not None):
        raise CliError("--skills works when a run starts from --corpus (a resumed run scores the items it saved); "
                       "drop --skills")
    if args.data is not None or (args.resume is not None and is_shard_run(args.resume)):
        return cmd_train_data(args)
    refuse_data_options(args)
    from bertcore.jobs import service

    if args.resume is not None:
        given = [o for o, v in (("--out", args.out), ("--steps", args.steps), ("--seed", args.seed),
                                ("--set", args.overrides), ("--preset", args.preset)) if v]
        if args.corpus != "builtin" or args.tokenizer is not None or args.skills:
            given.append("--corpus/--tokenizer/--skills")
        if given:
            raise CliError(f"--resume continues a run with its saved settings; drop {', '.join(given)}")
        rt = runtime_of(args)  # where it goes on now: --device / --precision as given (default auto)
    else:
        spec = _train_spec(args)
        if args.out and os.path.exists(os.path.expanduser(args.out)) and not os.path.isdir(os.path.expanduser(args.out)):
            raise CliError(f"--out {args.out} exists and is a file; give a directory path")
    bar = ProgressBar(lambda tr, run_dir: (
        f"training {sum(p.numel() for p in tr.model.parameters()):,} parameters on {tr.corpus.name} "
        f"({len(tr.corpus)} pairs, vocab {tr.tokenizer.vocab_size}) for {tr.config.steps} steps into {run_dir} "
        f"({tr.runtime.label})"),
        quiet=args.quiet)
    try:
        if args.resume is not None:
            result = service.resume(args.resume, callbacks=bar.callbacks, runtime=rt)
        else:
            out = os.path.expanduser(args.out) if args.out else None
            spec.callbacks = bar.callbacks
            result = service.train(spec, out)
    finally:
        bar.close()
    trainer, out = result.trainer, result.run_dir
    last = trainer.history.last_eval()
    if last:
        base = trainer.unigram_baseline
        ratio = f" = {last['eval_mlm_acc'] / base:.2f}x the unigram baseline" if base > 0 else ""
        print(f"held-out after step {last['step']}: masked-token accuracy {last['eval_mlm_acc']:.3f}{ratio} "
              f"({base:.3f}), NSP accuracy {last['eval_nsp_acc']:.3f}, MLM loss {last['eval_mlm_loss']:.3f}, "
              f"NSP loss {last['eval_nsp_loss']:.3f}")
    else:
        print(f"no held-out evaluation yet; unigram baseline {trainer.unigram_baseline:.3f}")
    if result.interrupted:
        print(f"interrupted at step {trainer.step_count}/{trainer.config.steps}; saved the model trained so far to "
              f"{out} (continue with `python -m bertcore train --resume {out}`)", file=sys.stderr)
        return 130
    if result.status == "failed":  # a NaN stop keeps the last good weights; a failed write, its last checkpoint
        kept = (f". The last good weights were saved to {out}" if trainer.error
                else f" (python -m bertcore train --resume {out})")
        print(f"error: {result.reason}{kept}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"saved checkpoint to {out}")
    return 0


def cmd_fill_mask(args) -> int:
    from bertcore.analysis.inference import fill_mask

    b = load_bundle(args.dir)
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

    b = load_bundle(args.dir)
    p = nsp_probability(b.model, b.tokenizer, args.a, args.b)
    print(json.dumps({"is_next": p}) if args.json else f"P(IsNext) = {p:.4f}")
    return 0


def cmd_inspect(args) -> int:
    from bertcore.analysis.inference import inspect_pair

    b = load_bundle(args.dir)
    r = inspect_pair(b.model, b.tokenizer, args.a, args.b)
    if args.json:
        print(json.dumps({"tokens": r.tokens, "segment_ids": list(r.segment_ids),
                          "embedded_segment_ids": list(r.embedded_segment_ids), "attentions": r.attentions.tolist()}))
        return 0
    if r.truncated:
        print("note: the input was truncated to the model's maximum length", file=sys.stderr)
    print("tokens:     " + " ".join(r.tokens))
    if r.embedded_segment_ids:  # the rows the model embeds, which differ from the API's 0/1 for a 1/2 model
        conv = "1 = A, 2 = B, 0 = padding" if b.model.config.segment_ids == "1/2" else "0 = A, 1 = B"
        print("segment ids:" + " ".join(str(s) for s in r.embedded_segment_ids) + f"   (embedded rows: {conv})")
    else:
        print("segment ids: none (the model has no segment embedding)")
    L, H, T, _ = r.attentions.shape
    print(f"attentions: {L} layers x {H} heads x {T} x {T}; most-attended token per head (from [CLS]):")
    for layer in range(L):
        row = [r.tokens[int(r.attentions[layer, h, 0].argmax())] for h in range(H)]
        print(f"  layer {layer}: " + "  ".join(row))
    return 0


def cmd_mask(args) -> int:
    from bertcore.config import TrainConfig, split_overrides
    from bertcore.data.corpora import get_corpus
    from bertcore.data.pretraining import MaskingRates, PretrainingData, masking_stats
    from bertcore.data.tokenization import WordTokenizer

    bert_kw, train_kw = split_overrides(overrides_dict(args.overrides))
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
    from bertcore.io.hf_interop import export_hf, export_notes

    if os.path.isfile(os.path.join(os.path.expanduser(args.dir), "classifier.json")):  # a fine-tuned classifier
        from bertcore.finetune.models import load_classifier
        from bertcore.io.hf_interop import export_hf_classifier

        model, tok, _ = load_classifier(args.dir)
        out = export_hf_classifier(model, tok, os.path.expanduser(args.out))
        print(f"wrote a transformers directory to {out} (load it with BertForSequenceClassification.from_pretrained)")
        for note in export_notes(model.config):
            print(f"note: {note}")
        return 0
    b = load_bundle(args.dir)
    out = export_hf(b, os.path.expanduser(args.out))
    print(f"wrote a transformers directory to {out} (load it with BertForPreTraining.from_pretrained)")
    for note in export_notes(b.model.config):
        print(f"note: {note}")
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
    from bertcore.presets import PRESET_NOTES, PRESET_SIZES, PRESETS, SEED_FILES, preset, preset_tokenizer

    out = []
    for name in PRESETS:
        for size in [args.size] if args.size else PRESET_SIZES:
            b, t = preset(name, size)
            bert, train = BertConfig(**b), TrainConfig(**t)
            out.append({"name": name, "size": size, "seeds": SEED_FILES[name], "tokenizer": preset_tokenizer(name, size),
                        "bert": bert.to_dict(),
                        "train": train.to_dict(), "params_at_vocab_size": estimate(bert)["params"],
                        "notes": PRESET_NOTES[name]})
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    default = BertConfig().to_dict()
    for p in out:
        diff = {k: v for k, v in p["bert"].items() if default[k] != v}
        seeds = ", ".join(p["seeds"]) if p["seeds"] else "BERT paper / HF transformers"
        print(f"{p['name']} [{p['size']}] (seeds: {seeds}; tokenizer {p['tokenizer']}; "
              f"{p['params_at_vocab_size']:,} parameters at vocab_size={p['bert']['vocab_size']})")
        print("  " + (", ".join(f"{k}={v}" for k, v in diff.items()) or "the BertConfig defaults"))
    return 0


COMMANDS = {"prepare": cmd_prepare, "train": cmd_train, "fill-mask": cmd_fill_mask, "nsp": cmd_nsp,
            "inspect": cmd_inspect, "explain": cmd_explain, "ablate": cmd_ablate, "mask": cmd_mask,
            "presets": cmd_presets, "export-hf": cmd_export_hf, "import-hf": cmd_import_hf,
            "finetune": cmd_finetune, "classify": cmd_classify, "heads": cmd_heads,
            "probe": cmd_probe, "skills": cmd_skills, "lens": cmd_lens, "patch": cmd_patch,
            "trace": cmd_trace, "sae": cmd_sae, "features": cmd_features, "steer": cmd_steer}


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    if getattr(args, "preset", None) is not None or getattr(args, "size", None) is not None:
        from bertcore.presets import resolve_preset  # light: no torch

        name, size, notice = resolve_preset(getattr(args, "preset", None), getattr(args, "size", None) or "tiny")
        if hasattr(args, "preset"):
            args.preset = name
        if getattr(args, "size", None) is not None:
            args.size = size
        if notice:
            print(f"note: {notice}", file=sys.stderr)
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
