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
    python -m bertcore lab     --study NAME [--seeds N] [--steps N] [--corpus FILE] --out DIR [--json] | --list

Bad input prints ``error: <what and how to fix>`` on stderr and exits with status 2, never a traceback.
Heavy imports (torch) happen inside the commands so ``--help`` is instant.
"""
from __future__ import annotations

import argparse
import sys

from bertcore import settings
from bertcore.cli.common import (
    EXIT_BAD_INPUT,
    CliError,
    Parser,
    add_runtime_args,
    int_in,
    key_value,
    tokenizer_kind,
)
from bertcore.cli.data import add_data_args, add_prepare_parser, cmd_prepare
from bertcore.cli.explain import add_explain_parsers, cmd_ablate, cmd_explain
from bertcore.cli.finetune import add_finetune_parsers, cmd_classify, cmd_finetune
from bertcore.cli.heads import add_heads_parser, cmd_heads
from bertcore.cli.lab import add_lab_parser, cmd_lab
from bertcore.cli.probe import add_probe_parser, cmd_probe
from bertcore.cli.skills import add_skills_parser, cmd_skills
from bertcore.cli.lens import add_lens_parsers, cmd_lens, cmd_patch
from bertcore.cli.trace import add_trace_parser, cmd_trace
from bertcore.cli.sae import add_sae_parsers, cmd_features, cmd_sae, cmd_steer
from bertcore.cli.hf import cmd_export_hf, cmd_import_hf
from bertcore.cli.predict import cmd_fill_mask, cmd_inspect, cmd_mask, cmd_nsp
from bertcore.cli.train import cmd_presets, cmd_train

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
    t.add_argument("--tokenizer", type=tokenizer_kind, choices=("word", "wordpiece", "bert_pytorch"),
                   help="vocabulary kind: word (default), wordpiece, or bert_pytorch (BERT-pytorch's: <pad> <unk> "
                   "<eos> <sos> <mask>, whitespace words, case kept; the default of --preset 'BERT-pytorch (codertimo)' "
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
    add_lab_parser(sub)
    return p


COMMANDS = {"prepare": cmd_prepare, "train": cmd_train, "fill-mask": cmd_fill_mask, "nsp": cmd_nsp,
            "inspect": cmd_inspect, "explain": cmd_explain, "ablate": cmd_ablate, "mask": cmd_mask,
            "presets": cmd_presets, "export-hf": cmd_export_hf, "import-hf": cmd_import_hf,
            "finetune": cmd_finetune, "classify": cmd_classify, "heads": cmd_heads,
            "probe": cmd_probe, "skills": cmd_skills, "lens": cmd_lens, "patch": cmd_patch,
            "trace": cmd_trace, "sae": cmd_sae, "features": cmd_features, "steer": cmd_steer, "lab": cmd_lab}


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    bad = settings.check_all(settings.CLI)  # a bad BERTCORE_* value: one line each, before any work
    if bad:
        for line in bad:
            print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
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
        if settings.flag("BERTCORE_DEBUG"):  # checked above, so it reads
            raise
        return _fail(f"unexpected {type(e).__name__}: {e} (re-run with BERTCORE_DEBUG=1 for details and report it)")
