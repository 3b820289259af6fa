"""The CLI's commands for pre-training beyond the laptop: ``prepare`` and ``train --data``
(also ``--resume`` of such a run, under torchrun or ``--nproc-per-node``). Kept apart from bertcore/cli.py,
which dispatches here; see docs/PRETRAINING.md."""
from __future__ import annotations

import json
import os
import sys

from bertcore.cli.common import EXIT_BAD_INPUT, CliError, ProgressBar, int_in, runtime_of, train_configs


def add_prepare_parser(sub) -> None:
    """The ``prepare`` command's parser."""

    pr = sub.add_parser("prepare", help="tokenize a large text corpus into shards for `train --data`")
    pr.add_argument("--corpus", required=True, metavar="FILE|DIR",
                    help="a UTF-8 text file or a folder of them; documents are separated by blank lines")
    pr.add_argument("--out", required=True, metavar="DATA", help="folder for the vocabulary and token shards")
    v = pr.add_mutually_exclusive_group()
    v.add_argument("--vocab-size", type=int_in(16, 1 << 20, "--vocab-size"), default=8000,
                   help="train a WordPiece vocabulary of this size (default 8000; BERT used 30522)")
    v.add_argument("--vocab", metavar="vocab.txt", help="use this BERT vocab.txt instead of training one")
    pr.add_argument("--shard-tokens", type=int_in(1000, 1 << 31, "--shard-tokens"), default=1 << 24,
                    help="token ids per shard file (default 16777216)")
    pr.add_argument("--quiet", action="store_true", help="no progress bar")


def add_data_args(t) -> None:
    """``train`` options for pre-training from prepared shards; see docs and ``cmd_train_data``."""

    t.add_argument("--deterministic", action="store_true", help="the same seed gives the same curve on a GPU too, "
                   "bit for bit (deterministic CUDA kernels: slower; a CPU run is deterministic already)")
    g = t.add_argument_group("training from prepared shards (python -m bertcore prepare)")
    g.add_argument("--data", metavar="DATA", help="a folder written by `prepare`: train on its shards instead of "
                   "--corpus (works under torchrun: each process trains on its own slice of every batch)")
    g.add_argument("--grad-accum", type=int_in(1, 4096, "--grad-accum"), default=1, metavar="N",
                   help="micro-batches per optimizer step; global batch = batch_size x N x processes")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (slow start, faster steps)")
    g.add_argument("--nproc-per-node", type=int_in(1, 1024, "--nproc-per-node"), default=1, metavar="N",
                   help="start N training processes on this machine (as torchrun --nproc_per_node=N)")


def refuse_data_options(args) -> None:
    """``train --corpus`` runs in one process (on the device --device picks): say so instead of ignoring the
    options of shard training."""

    given = [o for o, v in (("--grad-accum", args.grad_accum != 1), ("--compile", args.compile),
                            ("--nproc-per-node", args.nproc_per_node != 1)) if v]
    if given:
        raise CliError(f"{', '.join(given)} work with --data only; run `python -m bertcore prepare` on your corpus "
                       "and train with --data DATA")


def is_shard_run(run_dir) -> bool:
    from bertcore.training.run_corpus import SHARDS_PREFIX

    try:
        meta = json.loads(open(os.path.join(os.path.expanduser(run_dir), "run.json"), encoding="utf-8").read())
        return str(meta.get("corpus_spec", "")).startswith(SHARDS_PREFIX)
    except (OSError, ValueError, AttributeError):
        return False


def cmd_prepare(args) -> int:
    from bertcore.data.shards import prepare

    meta = prepare(args.corpus, args.out, vocab=args.vocab, vocab_size=args.vocab_size,
                   shard_tokens=args.shard_tokens, quiet=args.quiet)
    n = {k: sum(s[k] for s in meta["shards"]) for k in ("tokens", "sentences", "documents")}
    print(f"{args.out}: {n['tokens']:,} tokens, {n['sentences']:,} sentences, {n['documents']:,} documents in "
          f"{len(meta['shards'])} shard(s), vocabulary {meta['vocab_size']:,}; train with "
          f"`python -m bertcore train --data {args.out} --out RUN_DIR`")
    return 0


def cmd_train_data(args) -> int:
    """``train --data`` / ``--resume`` of a shard run, in this process or as one rank of torchrun's world."""
    from bertcore.training import distributed

    rank, world, local = distributed.env_world()
    if args.nproc_per_node > 1 and world == 1:
        argv = list(getattr(args, "argv", None) or sys.argv[1:])
        for k, a in enumerate(argv):  # the children must not launch again
            if a.startswith("--nproc-per-node"):
                del argv[k:k + (1 if "=" in a else 2)]
                break
        return distributed.launch(args.nproc_per_node, argv)
    from bertcore.launch import service

    try:
        rt = runtime_of(args, local, grad_accum=args.grad_accum, compile=args.compile, rank=rank, world_size=world)
        device = rt.device
        if args.resume is not None and args.data is not None and is_shard_run(args.resume):
            meta = json.loads(open(os.path.join(os.path.expanduser(args.resume), "run.json"), encoding="utf-8").read())
            trained_on = meta["corpus_spec"].split(":", 1)[1]
            if os.path.realpath(os.path.expanduser(args.data)) != os.path.realpath(trained_on):
                raise CliError(f"--resume {args.resume} was trained on --data {trained_on}, not {args.data}; give "
                               "that folder (or leave --data out), or start a new run with --out")
        if args.resume is not None and (args.overrides or args.steps or args.seed is not None or args.preset
                                        or args.out):
            raise CliError("--resume continues a run with its saved model and training settings; drop --set, "
                           "--steps, --seed, --preset and --out (or start a new run with --out)")
        distributed.init(device, world)
        bar = ProgressBar(lambda tr, run_dir: (
            f"training {sum(p.numel() for p in tr.model.parameters()):,} parameters on {device} ({rt.precision}, "
            f"{world} process(es), global batch {tr.data.global_batch_size} = {tr.config.batch_size} x "
            f"{rt.grad_accum} x {world}) for {tr.config.steps} steps into {run_dir}"), quiet=args.quiet)
        try:
            if args.resume is not None:
                result = service.resume(args.resume, callbacks=bar.callbacks, runtime=rt)
            else:
                bert, train, _ = train_configs(args)
                out = os.path.expanduser(args.out) if args.out else None
                name = os.path.basename(os.path.normpath(out)) if out else f"shards, seed {train.seed}"
                spec = service.RunSpec(bert, train, preset=args.preset, name=name, data=args.data, runtime=rt,
                                       source=f"bertcore train --data {args.data}")
                result = service.train(spec, out, callbacks=bar.callbacks)
        finally:
            bar.close()
    except (CliError, ValueError, OSError) as e:
        if world > 1:
            raise CliError(f"rank {rank} of {world}: {e}") from None
        raise
    except RuntimeError as e:  # a collective failed: another process died or the network went away
        if world > 1:
            raise CliError(f"rank {rank} of {world} lost contact with the other training processes ({e}); see the "
                           "first error above") from None
        raise
    finally:
        distributed.shutdown()
    if not rt.is_main:
        return 0
    if result.status == "failed":
        kept = "The last good weights were saved to" if result.trainer.error else "Resume it with --resume"
        print(f"error: {result.reason}. {kept} {result.run_dir}", file=sys.stderr)
        return EXIT_BAD_INPUT
    ev = result.trainer.history.last_eval()
    if ev:
        print(f"held-out after step {ev['step']}: masked-token accuracy {ev['eval_mlm_acc']:.3f} (unigram baseline "
              f"{result.trainer.unigram_baseline:.3f}), NSP accuracy {ev['eval_nsp_acc']:.3f}")
    print(f"{result.status}: run saved to {result.run_dir}; try `python -m bertcore fill-mask {result.run_dir} "
          "\"the [MASK] is here.\"`")
    return 130 if result.interrupted else 0
