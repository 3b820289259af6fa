"""Saved "what pretraining buys" comparisons (``finetune_compare.PretrainingComparison``) as folders on disk, so a
reload, a closed tab or a server restart loses nothing::

    <dir>/comparison.json  kind "finetune-comparison", name, created, status (running / finished / stopped /
                           failed + reason), task, source, labels_used, steps, steps_done, seed, mode,
                           accuracies {label: held-out accuracy}, summary, pid of the training process
    <dir>/pretrained/      a fine-tune run directory (``finetune.save_finetune_run``): from pretrained weights
    <dir>/random-init/     the same architecture from random initial weights

``history.csv`` of both models is rewritten at every held-out evaluation while they train; the weights are
written when the comparison ends (finished or stopped). Every file is written atomically. Reading never raises:
a damaged folder is listed with ``damaged`` set, and a "running" comparison whose process is gone reads as
"stopped" (interrupted). No UI code here.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bertcore.errors import InputError
from bertcore.io.checkpoint import atomic_write
from bertcore.training import runs
from bertcore.training.finetune import HISTORY_COLUMNS, save_finetune_run

COMPARISON_FILE = "comparison.json"
PRETRAINED, SCRATCH = "pretrained", "random init"  # the two models of a comparison (finetune_compare)
FOLDERS = {PRETRAINED: "pretrained", SCRATCH: "random-init"}


def _write_meta(d: Path, meta: dict) -> None:
    atomic_write(d / COMPARISON_FILE, json.dumps(meta, indent=2, allow_nan=False) + "\n")


def _acc(h: pd.DataFrame | None) -> float | None:
    """The last held-out accuracy in a history, or None."""
    if h is None or "eval_accuracy" not in h or not len(h):
        return None
    ev = pd.to_numeric(h["eval_accuracy"], errors="coerce").dropna()
    return float(ev.iloc[-1]) if len(ev) else None


def _with_status(meta: dict, histories: dict[str, pd.DataFrame], status: str, reason: str | None) -> dict:
    """comparison.json's content: the fixed part plus status, steps done and the last held-out accuracies."""
    accs = {label: _acc(h) for label, h in histories.items()}
    steps_done = min((int(h["step"].max()) if len(h) else 0) for h in histories.values()) if histories else 0
    return {**meta, "status": status, "reason": reason, "steps_done": steps_done, "accuracies": accs,
            "pid": os.getpid()}


def write_progress(d: str | Path, meta: dict, histories: dict[str, pd.DataFrame], status: str = "running",
                   reason: str | None = None) -> dict:
    """comparison.json and both history.csv files (called at every held-out evaluation and on failure)."""
    d = Path(d)
    for label, h in histories.items():
        sub = d / FOLDERS[label]
        sub.mkdir(parents=True, exist_ok=True)
        atomic_write(sub / "history.csv", h.to_csv(index=False))
    meta = _with_status(meta, histories, status, reason)
    _write_meta(d, meta)
    return meta


def write_final(d: str | Path, meta: dict, tuners: dict, status: str, reason: str | None = None) -> dict:
    """Both fine-tune run directories (weights, history, ...), then comparison.json with the final status."""
    d = Path(d)
    for label, tuner in tuners.items():
        save_finetune_run(d / FOLDERS[label], tuner, meta.get("source", ""), status=status,
                          name=f"{meta.get('name', 'fine-tune')} · {label}")
    meta = _with_status(meta, {k: t.history for k, t in tuners.items()}, status, reason)
    _write_meta(d, meta)
    return meta


@dataclass
class SavedComparison:
    """What the Fine-tune page shows of a saved comparison (read from disk; never raises)."""

    path: Path
    id: str
    meta: dict = field(default_factory=dict)
    histories: dict = field(default_factory=dict)  # label -> DataFrame (HISTORY_COLUMNS)
    status: str = "damaged"
    reason: str | None = None
    damaged: str | None = None

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or self.id)

    @property
    def created(self) -> str:
        return str(self.meta.get("created") or "")

    @property
    def has_models(self) -> bool:
        return self.damaged is None and all((self.path / f / "model.safetensors").is_file()
                                            for f in FOLDERS.values())

    def accuracy(self, label: str) -> float | None:
        return _acc(self.histories.get(label))


def _read_history(p: Path) -> pd.DataFrame:
    try:
        h = pd.read_csv(p)
    except (OSError, ValueError):
        return pd.DataFrame(columns=HISTORY_COLUMNS)
    return h.reindex(columns=HISTORY_COLUMNS)


def read_comparison(d: str | Path, live: bool = False) -> SavedComparison:
    """A ``SavedComparison`` for folder ``d``. ``live``: a training thread of this process still writes it."""
    d = Path(d)
    s = SavedComparison(path=d, id=d.name)
    try:
        meta = json.loads((d / COMPARISON_FILE).read_text(encoding="utf-8"))
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        s.damaged = f"{COMPARISON_FILE} is missing"
        return s
    except (OSError, UnicodeDecodeError, ValueError) as e:
        s.damaged = f"{COMPARISON_FILE} cannot be read ({e})"
        return s
    s.meta, s.status, s.reason = meta, str(meta.get("status")), meta.get("reason")
    s.histories = {label: _read_history(d / f / "history.csv") for label, f in FOLDERS.items()}
    if s.status not in runs.STATUSES:
        s.status, s.damaged = "damaged", f"unknown status {s.status!r}"
    elif s.status == "running" and not live:
        pid = meta.get("pid")
        if pid == os.getpid() or not (isinstance(pid, int) and runs._pid_alive(pid)):
            s.status = "stopped"
            s.reason = f"interrupted at step {meta.get('steps_done', 0)} (the training process ended)"
    return s


def list_comparisons(parent: str | Path, live: set[str] | None = None) -> list[SavedComparison]:
    """Every comparison folder directly below ``parent``, newest first. ``live``: folder paths still training."""
    parent, live = Path(parent), live or set()
    if not parent.is_dir():
        return []
    out = [read_comparison(d, live=str(d) in live) for d in parent.iterdir()
           if d.is_dir() and not d.name.startswith(".") and runs.RUN_ID_RE.fullmatch(d.name)]
    return sorted(out, key=lambda s: (s.created, s.id), reverse=True)


def load_models(saved: SavedComparison):
    """({label: classifier}, tokenizer) of a finished or stopped comparison (JSON + safetensors only)."""
    from bertcore.training.finetune import load_classifier

    if not saved.has_models:
        raise InputError(f"“{saved.name}” has no saved weights ({saved.reason or saved.status}); fine-tune again")
    models, tok = {}, None
    for label, f in FOLDERS.items():
        models[label], t, _ = load_classifier(saved.path / f)
        tok = tok or t
    return models, tok


def new_meta(name: str, task, source: str, config, labels_used: int) -> dict:
    """The fixed part of comparison.json for a new comparison."""
    return {"format": 1, "kind": "finetune-comparison", "name": name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "task": task.name,
            "task_description": task.description, "task_labels": list(task.labels), "pair": bool(task.pair),
            "source": source, "labels_used": int(labels_used), "steps": int(config.steps), "seed": int(config.seed),
            "mode": "linear probe (frozen encoder)" if config.freeze_encoder else "full fine-tuning",
            "finetune_config": config.to_dict()}
