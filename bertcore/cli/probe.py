"""`probe`: linear probes per layer with control tasks (bertcore.analysis.probing; Hewitt & Liang 2019).

    python -m bertcore probe RUN --property position|number|topic|category|labels [--step N | --all-steps]
                             [--labels FILE.csv] [--no-cache] [--json]

Without --step the run's final checkpoint is probed; --step N probes the saved weights of step N (the numbers the
app's Probes page shows at that step); --all-steps every saved step (the page's layer x step heat map).
Layers are 0-based (0 = the embedding output).
"""
from __future__ import annotations

import json
from pathlib import Path

from bertcore.cli.common import CliError, int_in


def add_probe_parser(sub) -> None:
    p = sub.add_parser("probe", help="linear probes per layer (with a control task) for a property of the tokens")
    p.add_argument("dir", metavar="RUN", help="a run or checkpoint directory")
    p.add_argument("--property", required=True, metavar="NAME",
                   help="position, number (subject number at the masked verb), topic (at [CLS]), category (word "
                        "category), or labels (the labels of --labels FILE.csv)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--step", type=int_in(0, 10**9, "--step"), help="probe the saved weights of this step")
    g.add_argument("--all-steps", action="store_true", help="probe every saved step (a layer x step matrix)")
    p.add_argument("--labels", metavar="FILE.csv", help="token labels: a CSV with header text,labels (one label "
                   "per whitespace-separated word, '_' skips a word)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the derived-data cache (<runs root>/derived; never the run folder)")
    p.add_argument("--json", action="store_true")


def _layers_text(r) -> list[str]:
    lines = [f"  layer  accuracy  control  selectivity  chance   (n train {r.n_train}, n test {r.n_test})"]
    for lp in r.layers:
        lines.append(f"  {lp.layer:>5}  {lp.accuracy:8.3f}  {lp.control_accuracy:7.3f}  {lp.selectivity:11.3f}  "
                     f"{lp.chance:6.3f}")
    return lines


def cmd_probe(args) -> int:
    import torch

    from bertcore.analysis.probing import probe_over_steps, probe_step
    from bertcore.data.probe_sets import PROPERTIES

    torch.set_num_threads(1)
    if args.property not in PROPERTIES:
        raise CliError(f"--property {args.property!r} is unknown; choose one of {', '.join(PROPERTIES)}")
    run = Path(args.dir).expanduser()
    if not run.is_dir():
        raise CliError(f"{args.dir} is not a directory; give a run or checkpoint directory")
    labels = None
    if args.labels is not None:
        try:
            labels = Path(args.labels).expanduser().read_bytes()
        except IsADirectoryError:
            raise CliError(f"--labels {args.labels} is a directory; give a CSV file") from None
    disk = not args.no_cache
    if args.all_steps:
        over = probe_over_steps(run, args.property, labels, disk=disk)
        out = {"run": str(run), "property": args.property, "steps": over.steps,
               "accuracy": over.matrix("accuracy").round(6).tolist(),
               "control_accuracy": over.matrix("control_accuracy").round(6).tolist(),
               "results": [r.to_dict() for r in over.results]}
        if args.json:
            print(json.dumps(out, indent=2))
            return 0
        for s, r in zip(over.steps, over.results):
            print(f"{args.property} at step {s}:" if s >= 0 else f"{args.property} (final checkpoint):")
            print("\n".join(_layers_text(r)))
        return 0
    r = probe_step(run, args.step, args.property, labels, disk=disk)
    out = {"run": str(run), **r.to_dict()}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    where = f"step {args.step}" if args.step is not None else "the final checkpoint"
    print(f"{args.property} probes of {run.name} at {where} (layer 0 = embeddings):")
    print("\n".join(_layers_text(r)))
    if r.note:
        print(f"note: {r.note}")
    return 0
