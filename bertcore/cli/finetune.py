"""`finetune` and `classify`: downstream classifiers on a pretrained encoder (BERT §4, bertcore.finetune.tuner)."""
from __future__ import annotations

import json
import os
import sys

from bertcore.cli.common import CliError, add_runtime_args, int_in, runtime_of
from bertcore.finetune.sweep import SWEEP_STEPS


def add_finetune_parsers(sub) -> None:
    """`finetune` and `classify` (BERT §4.1: fine-tuning on a downstream classification task)."""
    ft = sub.add_parser("finetune", help="fine-tune a classifier from a checkpoint, MiniLM or random initial weights")
    ft.add_argument("--from", dest="source", default=None, metavar="DIR|minilm|scratch",
                    help="starting point: a run/checkpoint directory, 'minilm', or 'scratch' (random initial "
                         "weights of the default pretraining architecture)")
    ft.add_argument("--task", default=None, metavar="NAME|FILE.csv",
                    help="a built-in task (see --list-tasks) or a CSV with text,label or text_a,text_b,label")
    ft.add_argument("--labels", type=int_in(0, 10_000_000, "--labels"), default=64,
                    help="labelled training examples to use (0 = all); default 64")
    ft.add_argument("--steps", type=int_in(1, 100_000, "--steps"), default=None, help="optimizer steps")
    ft.add_argument("--seed", type=int_in(0, 2**63 - 1, "--seed"), default=0)
    ft.add_argument("--lr", type=float, default=None, help="peak learning rate (default 3e-4; 5e-5 for minilm)")
    ft.add_argument("--head-lr", type=float, default=None,
                    help="peak learning rate of the new classifier layer (default 1e-2)")
    ft.add_argument("--probe", action="store_true", help="freeze the encoder and train only a linear probe")
    ft.add_argument("--out", metavar="DIR", help="run directory to write (default: a new folder below the runs "
                    "root, env BERTCORE_RUNS_DIR)")
    ft.add_argument("--sweep", metavar="N,N,...,all", default=None,
                    help="the label sweep: fine-tune --from and the same architecture from random initial weights at "
                         "every label count (e.g. 16,64,256,all) and print both final held-out accuracies; "
                         f"--steps per point defaults to {SWEEP_STEPS}; with --out, DIR is the sweep's study folder "
                         "(study.json, one fine-tune run directory per point and start)")
    ft.add_argument("--json", action="store_true", help='print {"eval_accuracy": x, ...} (with --sweep: '
                    '{"points": [{"labels", "labels_used", "pretrained", "random_init"}, ...], ...})')
    ft.add_argument("--list-tasks", action="store_true", help="print the built-in task names, one a line")
    add_runtime_args(ft)

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
    rt = runtime_of(args)  # --device cuda without a GPU: one error line, before anything is loaded
    import math
    import time

    from bertcore.data.tasks import get_task
    from bertcore.finetune.models import MINILM_LR, start_model
    from bertcore.finetune.tuner import FinetuneConfig, FineTuner

    task = get_task(args.task, seed=0)
    if args.sweep is not None:
        return _sweep(args, task, out, rt)
    model, tok, desc = start_model(args.source, task, seed=args.seed)
    cfg = FinetuneConfig(**_config_kw(args, MINILM_LR, FinetuneConfig.lr))
    tuner = FineTuner(model, tok, task, cfg, runtime=rt)
    print(f"fine-tuning {desc} on {task.name} ({len(tuner.examples)} labelled examples, "
          f"{len(task.held_out)} held out) for {cfg.steps} steps ({rt.label})", file=sys.stderr)
    from bertcore.finetune import route

    t0 = time.perf_counter()
    res = route.finetune(tuner, out, source=desc)  # the training service: run.json, atomic writes
    out = str(res.run_dir)
    if res.status == "failed":
        raise CliError(f"{res.reason}; the run was saved to {out}")
    acc = tuner.eval_accuracy
    result = {"eval_accuracy": acc, "task": task.name, "labels": task.labels, "labels_used": len(tuner.examples),
              "steps": tuner.step_count, "source": desc, "out": out, "status": res.status,
              "train_seconds": time.perf_counter() - t0}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"held-out accuracy {acc:.3f} on {len(task.held_out)} examples (chance "
              f"{1 / task.num_labels:.3f}); saved the classifier to {out}" if not math.isnan(acc) else
              f"no held-out evaluation; saved to {out}")
    return 130 if res.interrupted else 0


def _config_kw(args, minilm_lr: float, default_lr: float) -> dict:
    kw = dict(labels=args.labels, seed=args.seed, freeze_encoder=args.probe,
              lr=args.lr if args.lr is not None else (minilm_lr if args.source == "minilm" else default_lr))
    if args.steps is not None:
        kw["steps"] = args.steps
    if args.head_lr is not None:
        kw["head_lr"] = args.head_lr
    return kw


def _sweep(args, task, out, rt) -> int:
    """`finetune --sweep`: final held-out accuracy against the number of labels, from --from and from random initial
    weights: a fine-tune study (bertcore.lab.studies.finetune_study) in the study runner, two runs side by side."""
    import shutil
    import tempfile
    import time

    from bertcore.data.tasks import task_names
    from bertcore.finetune.models import MINILM_LR, start_model
    from bertcore.finetune.sweep import parse_points, sweep_config, sweep_points, sweep_table
    from bertcore.finetune.tuner import FinetuneConfig
    from bertcore.launch import study as S
    from bertcore.lab.studies import finetune_study

    points = parse_points(args.sweep)
    if args.source == "scratch":
        raise CliError("--sweep compares a pretrained model with random initial weights; give --from DIR or minilm")
    _, _, desc = start_model(args.source, task, seed=args.seed)  # a bad --from says so now, before any process
    cfg = FinetuneConfig(**sweep_config(_config_kw(args, MINILM_LR, FinetuneConfig.lr), args.steps))
    start = args.source if args.source == "minilm" else os.path.abspath(os.path.expanduser(args.source))
    task_spec = args.task if args.task in task_names() else os.path.abspath(os.path.expanduser(args.task))
    study = finetune_study(start, desc, task_spec, cfg.to_dict(), points=points)
    folder = out if out is not None else tempfile.mkdtemp(prefix="bertcore-sweep-")
    print(f"label sweep of {desc} vs random initial weights on {task.name}: "
          f"{', '.join(str(p or 'all') for p in points)} labels, {cfg.steps} steps each ({rt.label})",
          file=sys.stderr)
    said: list[int] = []

    def on_event(ev: dict) -> None:  # each point once both of its runs are scored
        if ev.get("ev") != "study":
            return
        for p in sweep_points(ev["data"]):
            if p["labels"] not in said:
                said.append(p["labels"])
                print(f"  {p['labels_used']} labels: {p['pretrained']:.3f} vs {p['random_init']:.3f}", file=sys.stderr)

    t0 = time.perf_counter()
    try:
        plan = S.plan(study, folder, seeds=1, first_seed=args.seed)
        data = S.run(plan, lanes=2, on_event=on_event, runtime=rt)
    finally:
        if out is None:
            shutil.rmtree(folder, ignore_errors=True)
    if data["status"] == "failed":
        raise CliError(f"the sweep failed: {data.get('reason')}" + (f"; its runs are in {out}" if out else ""))
    result = {"task": task.name, "source": desc, "steps": cfg.steps, "seed": cfg.seed, "chance": 1 / task.num_labels,
              "points": sweep_points(data), "train_seconds": time.perf_counter() - t0, "status": data["status"]}
    if out is not None:
        result["out"] = out
    print(json.dumps(result) if args.json else sweep_table(result["points"]))
    return 0 if data["status"] == "finished" else 130


def cmd_classify(args) -> int:
    from bertcore.finetune.models import classify, load_classifier

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
