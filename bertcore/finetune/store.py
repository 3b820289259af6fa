"""Saved "what pretraining buys" comparisons, read back for the Fine-tune page, so a reload, a closed tab or a
server restart loses nothing. A comparison is a run directory written by the training service
(``bertcore.finetune.route.compare``)::

    <dir>/run.json         kind "finetune-comparison", name, created, status (running / finished / stopped /
                           failed + reason), task, source, labels_used, steps, steps_done, seed, mode, metrics
                           (the held-out accuracy of both models), pid of the training process
    <dir>/pretrained/      a fine-tune run directory: from pretrained weights
    <dir>/random-init/     the same architecture from random initial weights
    <dir>/sweep.json       the label sweep, when one was run (``bertcore.finetune.sweep``)

Status is read by ``runs.read_run`` like any run's (a "running" comparison whose process is gone reads as
"stopped", interrupted). Folders saved before comparisons were run directories hold ``comparison.json`` instead
of run.json; they are read too. Reading never raises: a damaged folder is listed with ``damaged`` set.
No UI code here.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bertcore.errors import InputError
from bertcore.finetune.models import load_classifier
from bertcore.finetune.route import FOLDERS
from bertcore.message import Message
from bertcore.training import runs
from bertcore.training.history import FINETUNE_COLUMNS, FINETUNE_EVAL_KEYS, History

COMPARISON_FILE = "comparison.json"  # the metadata file of comparisons saved before they were run directories
KIND = "finetune-comparison"


@dataclass
class SavedComparison:
    """What the Fine-tune page shows of a saved comparison (read from disk; never raises)."""

    path: Path
    id: str
    meta: dict = field(default_factory=dict)
    histories: dict = field(default_factory=dict)  # label -> History (bertcore.training.history)
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

    @property
    def meta_file(self) -> Path:
        """The file whose change means the comparison changed (run.json, or an old folder's comparison.json)."""
        return self.path / (runs.RUN_FILE if (self.path / runs.RUN_FILE).is_file() else COMPARISON_FILE)

    def accuracy(self, label: str) -> float | None:
        h = self.histories.get(label)
        return h.last_eval().get("eval_accuracy") if h is not None else None


def _read_history(p: Path) -> History:
    """A fine-tune's history.csv as a History (empty when it is missing or cannot be read)."""
    try:
        frame = pd.read_csv(p)
    except (OSError, ValueError):
        frame = None
    return History.read_frame(frame, FINETUNE_COLUMNS, FINETUNE_EVAL_KEYS)


def _read_legacy(d: Path, s: "SavedComparison") -> "SavedComparison":
    """An old folder with comparison.json (same fields, no run.json)."""
    try:
        meta = json.loads((d / COMPARISON_FILE).read_text(encoding="utf-8"))
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        s.damaged = f"{runs.RUN_FILE} is missing"
        return s
    except (OSError, UnicodeDecodeError, ValueError) as e:
        s.damaged = f"{COMPARISON_FILE} cannot be read ({e})"
        return s
    s.meta, s.status, s.reason = meta, str(meta.get("status")), meta.get("reason")
    if s.status not in runs.STATUSES:
        s.status, s.damaged = "damaged", f"unknown status {s.status!r}"
    elif s.status == "running":
        pid = meta.get("pid")
        if pid == os.getpid() or not (isinstance(pid, int) and runs.pid_alive(pid)):
            s.status = "stopped"
            s.reason = f"interrupted at step {meta.get('steps_done', 0)} (the training process ended)"
    return s


def read_comparison(d: str | Path) -> SavedComparison:
    """A ``SavedComparison`` for folder ``d`` (status as ``runs.read_run`` reads it; never raises)."""
    d = Path(d)
    s = SavedComparison(path=d, id=d.name)
    if (d / runs.RUN_FILE).is_file():
        info = runs.read_run(d)
        try:
            s.meta = runs.read_run_json(d)
        except InputError:
            s.meta = {}
        s.status, s.reason, s.damaged = info.status, info.reason, info.damaged
        if s.meta.get("kind") != KIND:
            s.status, s.damaged = "damaged", f"not a fine-tune comparison (kind {s.meta.get('kind')!r})"
    else:
        _read_legacy(d, s)
    if s.meta:
        s.histories = {label: _read_history(d / f / "history.csv") for label, f in FOLDERS.items()}
    return s


def list_comparisons(parent: str | Path) -> list[SavedComparison]:
    """Every comparison folder directly below ``parent``, newest first."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    out = [read_comparison(d) for d in parent.iterdir()
           if d.is_dir() and not d.name.startswith(".") and runs.RUN_ID_RE.fullmatch(d.name)]
    return sorted(out, key=lambda s: (s.created, s.id), reverse=True)


def load_models(saved: SavedComparison):
    """({label: classifier}, tokenizer) of a finished or stopped comparison (JSON + safetensors only)."""
    if not saved.has_models:
        raise InputError(Message("“{name}” has no saved weights ({reason}); fine-tune again", name=saved.name,
                                 reason=saved.reason or saved.status))
    models, tok = {}, None
    for label, f in FOLDERS.items():
        models[label], t, _ = load_classifier(saved.path / f)
        tok = tok or t
    return models, tok
