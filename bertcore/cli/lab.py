"""``bertcore lab``: rerun a paper's ablation table over seeds (bertcore.lab, the runner bertcore.launch.study)."""
from __future__ import annotations

import json
import os
import sys

from bertcore.cli.common import CliError, int_in, key_value, overrides_dict


def add_lab_parser(sub) -> None:
    p = sub.add_parser("lab", help="rerun an ablation of the BERT paper (or its successors) over seeds: variants x "
                       "seeds as run directories, scored and tabled with their spread")
    p.add_argument("--study", help="bert-table-5, bert-table-8, mask-rate, sentence-task, masking-unit or custom "
                   "(with --vary)")
    p.add_argument("--list", action="store_true", help="list the studies with their variants and sources")
    p.add_argument("--seeds", type=int_in(1, 10, "--seeds"), default=3, help="seeds per variant (default 3)")
    p.add_argument("--steps", type=int_in(1, 1_000_000, "--steps"),
                   help="pretraining steps per run (default 300: the reference reaches NSP >= 0.9 on every seed)")
    p.add_argument("--corpus", default="builtin", help="builtin (default) or a text file (pairs or prose)")
    p.add_argument("--out", metavar="DIR", help="the study folder (started again, it finishes what is missing)")
    p.add_argument("--vary", metavar="KEY=V1,V2,...", help="custom: the switch to vary, first value the reference")
    p.add_argument("--set", dest="overrides", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="custom: a setting every variant shares (repeatable)")
    p.add_argument("--tokenizer", choices=("word", "wordpiece"), default="word", help="custom: the vocabulary kind")
    p.add_argument("--parallel", type=int_in(1, 16, "--parallel"),
                   help="training processes side by side (default: 2, or 1 on a one-core machine)")
    p.add_argument("--json", action="store_true", help="print the study as JSON (the same as DIR/study.json)")


def _study(args):
    from bertcore.lab.studies import custom_study, get_study

    if args.study == "custom":
        if not args.vary:
            raise CliError("--study custom needs --vary KEY=V1,V2,... (e.g. --vary mlm_probability=0.15,0.4)")
        return custom_study(args.vary, overrides_dict(args.overrides), args.tokenizer)
    if args.vary or args.overrides:
        raise CliError("--vary and --set are for --study custom; a named study has its own variants")
    return get_study(args.study)


def _list() -> int:
    from bertcore.lab.studies import STUDIES

    for s in STUDIES.values():
        print(f"{s.name}: {s.title} ({s.source})")
        for v in s.variants:
            mark = " (reference)" if v.name == s.reference else ""
            print(f"    {v.name}{mark}: {json.dumps(v.settings) if v.settings else 'the base configuration'}")
    print("custom: --vary KEY=V1,V2,... [--set KEY=VALUE ...]")
    return 0


def cmd_lab(args) -> int:
    if args.list:
        return _list()
    if not args.study or not args.out:
        raise CliError("give --study NAME and --out DIR (see `bertcore lab --list`)")
    from bertcore.data.corpora import get_corpus
    from bertcore.launch import study as S
    from bertcore.lab import table as T

    study = _study(args)
    if args.corpus != "builtin":
        get_corpus(args.corpus)  # a bad file says so before anything is trained
    p = S.plan(study, args.out, args.seeds, args.steps, args.corpus)
    lanes = args.parallel or max(1, min(2, os.cpu_count() or 1))
    todo = len(p.todo)
    print(f"lab {study.name}: {len(study.variants)} variants x {p.seeds} seeds at {p.steps} steps into {p.out} "
          f"({todo} of {len(p.cells)} runs to do, {min(lanes, max(todo, 1))} side by side)", file=sys.stderr)

    def progress(ev: dict) -> None:
        if ev.get("ev") == "evaluated":
            m = (ev.get("evaluation") or {}).get("metrics") or {}
            shown = ", ".join(f"{k} {v:.3f}" for k, v in m.items() if v is not None)
            print(f"  {ev['variant']} seed {ev['seed']}: {ev.get('error') or shown}", file=sys.stderr)
        elif ev.get("ev") == "job_end" and ev.get("status") == "failed":
            print(f"  {ev['variant']} seed {ev['seed']} failed: {ev.get('error')}", file=sys.stderr)

    data = S.run(p, lanes, on_event=progress)
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        print(T.text_table(data, study))
        print(f"\n{data['status']}: {p.out / S.STUDY_FILE}, table.csv, curves.svg" +
              (f" ({data['reason']})" if data.get("reason") else ""))
    return 0 if data["status"] == "finished" else 1
