"""`skills`: the share of each skill's items a run's model passes, at one saved step or at all of them
(bertcore.analysis.skills; items: bertcore.data.skill_items). ``train --skills FILE`` adds a user's own items."""
from __future__ import annotations

import json
from pathlib import Path


def add_skills_parser(sub) -> None:
    s = sub.add_parser("skills", help="skills with known answers (verb agreement, a/an, this/these, pronoun gender "
                       "across the pair, selection, topic place, NSP same/other topic): share of items passed")
    s.add_argument("dir", metavar="RUN")
    when = s.add_mutually_exclusive_group()
    when.add_argument("--step", type=int, help="a saved step (default: the final model)")
    when.add_argument("--all-steps", action="store_true", help="every saved step of the run")
    s.add_argument("--items", metavar="FILE", help="score these items instead of the run's skills_items.jsonl: "
                   "a CSV text,right,wrong (one [MASK] per text) or a skills_items.jsonl")
    s.add_argument("--per-item", action="store_true", help="also each item's margin and pass/fail (JSON)")
    s.add_argument("--json", action="store_true")


def load_items(path: str, tokenizer) -> list:
    """Items from a user's CSV (text,right,wrong) or a skills_items.jsonl."""
    from bertcore.data.skill_items import parse_skill_csv, read_items_jsonl
    from bertcore.errors import InputError

    p = Path(path).expanduser()
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {p}: {e.strerror or e}; check the path") from None
    if p.suffix == ".jsonl":
        return read_items_jsonl(data.decode("utf-8", errors="replace"))
    return parse_skill_csv(data, p.name, tokenizer)


def cmd_skills(args) -> int:
    from bertcore.analysis.skills import SkillSuite, first_passes
    from bertcore.errors import InputError
    from bertcore.io.checkpoint import load_checkpoint
    from bertcore.io.steps import list_steps, load_step
    from bertcore.launch.service import read_skills_csv, run_skills

    base = load_checkpoint(args.dir)
    max_len = int((base.train_config or {}).get("max_seq_len") or base.model.config.max_position_embeddings)
    if args.items:
        suite = SkillSuite(load_items(args.items, base.tokenizer), base.tokenizer, max_len)
    else:
        suite = run_skills(args.dir, base.tokenizer, max_len)
        if suite is None:
            raise InputError(f"{args.dir} has no skills_items.jsonl (it was not trained on the built-in grammar, or "
                             "before skills were scored); pass --items FILE (a CSV text,right,wrong)")
    if not suite.items:
        raise InputError("none of the items can be scored by this model (each right/wrong word must be one token "
                         "of its vocabulary and each text must keep its [MASK] within the maximum length)")
    if args.all_steps:
        steps = list_steps(args.dir)
        if not steps:
            raise InputError(f"{args.dir} has no saved steps (steps/); score the final model without --all-steps")
    else:
        steps = [args.step]
    rows = []
    for step in steps:
        model = base.model if step is None else load_step(args.dir, step, bundle=base).model
        margins = suite.margins(model)
        row = {"step": step, **suite.summarise(margins)}
        if args.per_item:
            row["items"] = [{"skill": it.skill, "margin": m, "passed": m > 0} for it, m in zip(suite.items, margins)]
        rows.append(row)
    out = {"skills": suite.describe(), "rule": "an MLM item passes when logit(right) > logit(wrong) at its [MASK] "
           "(P(right) > P(wrong)); an NSP item when P(IsNext | A, true B) > P(IsNext | A, wrong B)",
           "scores": rows}
    recorded = read_skills_csv(args.dir)
    if recorded is not None and not args.items:
        rec = recorded.frame().to_dict("records")
        out["first_passes"] = first_passes(rec, suite.names, seconds={int(r["step"]): r["seconds"] for r in rec})
    if args.json:
        print(json.dumps(out))
        return 0
    names = suite.names
    print("step    " + "  ".join(f"{n[:14]:>14}" for n in names))
    for r in rows:
        print(f"{'final' if r['step'] is None else r['step']:<7} " + "  ".join(f"{r[n]:>14.3f}" for n in names))
    for fp in out.get("first_passes", []):
        secs = f" ({fp['seconds']:.0f} s)" if fp["seconds"] is not None else ""
        print(f"{fp['skill'].replace('_', ' ')} passed {fp['level']} at step {fp['step']}{secs}")
    return 0
