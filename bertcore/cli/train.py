"""``train`` (BERT §3.1 MLM + §3.2 NSP pretraining, from a corpus or, through bertcore.cli.data, from prepared
shards; ``--resume``) and ``presets`` (the seed presets' full configs)."""
from __future__ import annotations

import json
import os
import sys

from bertcore.cli.common import (
    EXIT_BAD_INPUT,
    CliError,
    ProgressBar,
    overrides_dict,
    runtime_of,
    train_configs,
)
from bertcore.cli.data import cmd_train_data, is_shard_run, refuse_data_options


def train_spec(args):
    """The RunSpec ``train --corpus ...`` trains: the preset's configs with ``--set``, and for a corpus file the
    tokenizer, vocabulary and length the Train page would pick for it (bertcore.data.corpus_defaults)."""
    from bertcore.presets import preset_tokenizer
    from bertcore.launch.service import RunSpec

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
    from bertcore.launch import service

    if args.resume is not None:
        given = [o for o, v in (("--out", args.out), ("--steps", args.steps), ("--seed", args.seed),
                                ("--set", args.overrides), ("--preset", args.preset)) if v]
        if args.corpus != "builtin" or args.tokenizer is not None or args.skills:
            given.append("--corpus/--tokenizer/--skills")
        if given:
            raise CliError(f"--resume continues a run with its saved settings; drop {', '.join(given)}")
        rt = runtime_of(args)  # where it goes on now: --device / --precision as given (default auto)
    else:
        spec = train_spec(args)
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
            result = service.train(spec, out, callbacks=bar.callbacks)
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


def cmd_presets(args) -> int:
    """Each preset's full BertConfig (vocab_size comes from the tokenizer at training time) and TrainConfig."""
    from bertcore.config import BertConfig, TrainConfig, estimate
    from bertcore.presets import PRESET_NOTES, PRESET_SIZES, PRESETS, TUTORIAL_FILES, preset, preset_tokenizer

    out = []
    for name in PRESETS:
        for size in [args.size] if args.size else PRESET_SIZES:
            b, t = preset(name, size)
            bert, train = BertConfig(**b), TrainConfig(**t)
            out.append({"name": name, "size": size, "seeds": TUTORIAL_FILES[name], "tokenizer": preset_tokenizer(name, size),
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
