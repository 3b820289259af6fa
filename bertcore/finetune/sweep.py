"""The label sweep: final held-out accuracy against the number of labelled examples, for a model fine-tuned from
pretrained weights and the same architecture from random initial weights (BERT §4-§5: pretraining matters most
when labels are few; d2l §14.8).

A sweep is a fine-tune study (``bertcore.lab.studies.finetune_study(..., points=...)``: both starting points at
every label count, run by the one study runner ``bertcore.launch.study``), each run evaluated once, at its end, on
the task's fixed held-out split. The labelled subsets are seeded prefixes (``data.tasks.labelled_subset``), so a
larger point contains the smaller ones. This module parses the label counts, sets a sweep's config and reads its
points back from the study's data.
"""
from __future__ import annotations

from pathlib import Path

from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.training import runs

DEFAULT_POINTS = (16, 64, 256, 0)  # 0 = every labelled example of the task's pool
SWEEP_STEPS = 60  # steps per point by default (each point fine-tunes two models)
MAX_POINTS = 12
_KEYS = {"pretrained": "pretrained", "random": "random_init"}  # FinetuneSpec init -> a point's key


def parse_points(text: str) -> list[int]:
    """"16,64,256,all" -> [16, 64, 256, 0]; InputError that says what to type for anything else."""
    out: list[int] = []
    for part in str(text).split(","):
        p = part.strip().lower()
        if p in ("all", "0"):
            n = 0
        elif p.isdigit() and 1 <= int(p) <= 10_000_000:
            n = int(p)
        else:
            raise InputError(Message("--sweep {text}: {part} is not a number of labels; give a comma-separated list "
                                     "of counts from 1 and/or 'all', e.g. --sweep 16,64,256,all", text=repr(text),
                                     part=repr(part.strip())))
        if n not in out:
            out.append(n)
    if not 1 <= len(out) <= MAX_POINTS:
        raise InputError(Message("--sweep takes 1 to {limit} label counts, e.g. --sweep 16,64,256,all",
                                 limit=MAX_POINTS))
    return out


def sweep_config(config: dict, steps: int | None = None) -> dict:
    """A comparison's FinetuneConfig fields as a sweep's: ``steps`` (default SWEEP_STEPS) and one held-out
    evaluation, at the end (the labels are each point's own)."""
    return {**dict(config), "steps": int(steps or SWEEP_STEPS), "eval_every": 0}


def planned_points(data: dict) -> list[int]:
    """The label counts of a sweep's study data (bertcore.launch.study), in order (0 = all)."""
    out: list[int] = []
    for v in data.get("variants") or []:
        n = (v.get("settings") or {}).get("labels")
        if n is not None and int(n) not in out:
            out.append(int(n))
    return out


def _labels_used(run_dir) -> int | None:
    try:
        n = runs.read_run_json(Path(run_dir)).get("labels_used")
    except InputError:
        return None
    return int(n) if isinstance(n, int) else None


def sweep_points(data: dict) -> list[dict]:
    """The finished points of a sweep's study data, in label order: {labels, labels_used, steps, pretrained,
    random_init} (held-out accuracies) for every label count whose two runs are scored (the first seed's)."""
    got: dict[int, dict] = {}
    for v in data.get("variants") or []:
        settings = v.get("settings") or {}
        key = _KEYS.get(settings.get("init", "pretrained"))
        scored = [r for r in v.get("runs") or [] if r.get("status") == "scored" and r.get("metrics")]
        if key is None or settings.get("labels") is None or not scored:
            continue
        n, r = int(settings["labels"]), min(scored, key=lambda r: int(r["seed"]))
        p = got.setdefault(n, {"labels": n, "labels_used": None, "steps": int(data.get("steps") or 0)})
        p[key] = r["metrics"].get("accuracy")
        p["labels_used"] = p["labels_used"] or _labels_used(r["dir"])
    return [got[n] for n in planned_points(data) if n in got and all(k in got[n] for k in _KEYS.values())]


def sweep_table(points: list[dict]) -> str:
    """The sweep as plain-text lines (the CLI's output)."""
    def acc(x) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    lines = [f"{'labels':>8} {'pretrained':>11} {'random init':>12} {'points':>7}"]
    for p in points:
        pre, rnd = p["pretrained"], p["random_init"]
        gap = "n/a" if pre is None or rnd is None else f"{100 * (pre - rnd):+.1f}"
        lines.append(f"{p['labels_used'] or p['labels']:>8} {acc(pre):>11} {acc(rnd):>12} {gap:>7}")
    return "\n".join(lines)
