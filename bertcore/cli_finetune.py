"""`finetune` and `classify`: downstream classifiers on a pretrained encoder (BERT §4, bertcore.training.finetune)."""
from __future__ import annotations

import json
import os
import sys

from bertcore.cli_common import CliError, _int_in, load_bundle as _load  # noqa: F401


def add_finetune_parsers(sub) -> None:
    """`finetune` and `classify` (BERT §4.1: fine-tuning on a downstream classification task)."""
    ft = sub.add_parser("finetune", help="fine-tune a classifier from a checkpoint, MiniLM or random initial weights")
    ft.add_argument("--from", dest="source", default=None, metavar="DIR|minilm|scratch",
                    help="starting point: a run/checkpoint directory, 'minilm', or 'scratch' (random initial "
                         "weights of the default pretraining architecture)")
    ft.add_argument("--task", default=None, metavar="NAME|FILE.csv",
                    help="a built-in task (see --list-tasks) or a CSV with text,label or text_a,text_b,label")
    ft.add_argument("--labels", type=_int_in(0, 10_000_000, "--labels"), default=64,
                    help="labelled training examples to use (0 = all); default 64")
    ft.add_argument("--steps", type=_int_in(1, 100_000, "--steps"), default=None, help="optimizer steps")
    ft.add_argument("--seed", type=_int_in(0, 2**63 - 1, "--seed"), default=0)
    ft.add_argument("--lr", type=float, default=None, help="peak learning rate (default 3e-4; 5e-5 for minilm)")
    ft.add_argument("--head-lr", type=float, default=None,
                    help="peak learning rate of the new classifier layer (default 1e-2)")
    ft.add_argument("--probe", action="store_true", help="freeze the encoder and train only a linear probe")
    ft.add_argument("--out", metavar="DIR", help="run directory to write (default: a new folder below the runs "
                    "root, env BERTCORE_RUNS_DIR)")
    ft.add_argument("--json", action="store_true", help='print {"eval_accuracy": x, ...}')
    ft.add_argument("--list-tasks", action="store_true", help="print the built-in task names, one a line")

    c = sub.add_parser("classify", help="class probabilities from a fine-tuned classifier directory")
    c.add_argument("dir", metavar="DIR")
    c.add_argument("a", metavar="TEXT")
    c.add_argument("b", nargs="?", metavar="TEXT_B")
    c.add_argument("--json", action="store_true")


def cmd_finetune(args) -> int:
    from bertcore.data.tasks import task_names

    if args.list_tasks:
        print("\n".join(task_names()))
        return 0
    missing = [f for f, v in (("--from", args.source), ("--task", args.task)) if v is None]
    if missing:
        raise CliError(f"finetune needs {', '.join(missing)} (e.g. --from DIR|minilm|scratch --task "
                       f"{task_names()[0]} --out DIR)")
    out = os.path.expanduser(args.out) if args.out else None
    if out is not None and os.path.exists(out) and not os.path.isdir(out):
        raise CliError(f"--out {out} exists and is a file; give a directory path")
    import math

    from bertcore.data.tasks import get_task
    from bertcore.training.finetune import MINILM_LR, FinetuneConfig, FineTuner, save_finetune_run, start_model

    task = get_task(args.task, seed=0)
    model, tok, desc = start_model(args.source, task, seed=args.seed)
    kw = dict(labels=args.labels, seed=args.seed, freeze_encoder=args.probe,
              lr=args.lr if args.lr is not None else (MINILM_LR if args.source == "minilm" else FinetuneConfig.lr))
    if args.steps is not None:
        kw["steps"] = args.steps
    if args.head_lr is not None:
        kw["head_lr"] = args.head_lr
    cfg = FinetuneConfig(**kw)
    tuner = FineTuner(model, tok, task, cfg)
    print(f"fine-tuning {desc} on {task.name} ({len(tuner.examples)} labelled examples, "
          f"{len(task.held_out)} held out) for {cfg.steps} steps", file=sys.stderr)
    status = "finished"
    import time

    t0 = time.perf_counter()
    try:
        tuner.run()
    except KeyboardInterrupt:
        tuner.finalize()
        status = "stopped"
    if out is None:  # like `train`: a new folder below the runs root (BERTCORE_RUNS_DIR)
        from bertcore.training import runs

        out = str(runs.new_run_dir(runs.cli_runs_dir(), f"finetune-{task.name}"))
    save_finetune_run(out, tuner, desc, status=status if not tuner.error else "failed")
    if tuner.error:
        raise CliError(f"{tuner.error}; the run was saved to {out}")
    acc = tuner.eval_accuracy
    result = {"eval_accuracy": acc, "task": task.name, "labels": task.labels, "labels_used": len(tuner.examples),
              "steps": tuner.step_count, "source": desc, "out": out, "train_seconds": time.perf_counter() - t0}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"held-out accuracy {acc:.3f} on {len(task.held_out)} examples (chance "
              f"{1 / task.num_labels:.3f}); saved the classifier to {out}" if not math.isnan(acc) else
              f"no held-out evaluation; saved to {out}")
    return 130 if status == "stopped" else 0


def cmd_classify(args) -> int:
    from bertcore.training.finetune import classify, load_classifier

    model, tok, meta = load_classifier(args.dir)
    if meta.get("pair") and args.b is None:
        raise CliError(f"this classifier was fine-tuned on sentence pairs ({meta.get('task')}); give TEXT and TEXT_B")
    probs = classify(model, tok, args.a, args.b)
    if args.json:
        print(json.dumps({"labels": model.labels, "probs": probs}))
    else:
        for lab, p in sorted(zip(model.labels, probs), key=lambda x: -x[1]):
            print(f"{lab:<24} {p:.4f}")
    return 0
