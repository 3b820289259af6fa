"""The Fine-tune page's comparisons in this browser's workspace (``<workspace>/finetunes/<id>/``).

A comparison is a fine-tune study (``bertcore.lab.studies.finetune_study``: the same fine-tune from the pretrained
weights and from random initial weights, one seed) run by the one study runner (``bertcore.launch.study`` through
``explorer.launch.studies``), so its folder is a study folder::

    study.json, run.json (kind "study"), table.csv, curves.svg
    runs/from-pretrained-weights-seed<k>/    a fine-tune run directory (bertcore.finetune.route): classify it
    runs/from-random-init-weights-seed<k>/
    start/                                   the starting model, when it was held only in the session (an upload)
    <name>.csv                               an uploaded task
    sweep/                                   its label sweep: a study folder of its own

The runs keep their histories on disk as they train, so a reload, a deep link in a new tab or a server restart
finds everything again; while it runs here, the live StudyRun (``studies.live``) gives the rows as they come, and
the sidebar's heartbeat keeps it alive on other pages. Threads here never call ``st.*``.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import streamlit as st

from bertcore.data.tasks import task_names
from bertcore.errors import BertcoreError, InputError
from bertcore.finetune.models import LABEL_OF_INIT, PRETRAINED, SCRATCH, load_classifier
from bertcore.finetune.sweep import DEFAULT_POINTS, planned_points, sweep_config
from bertcore.io.checkpoint import atomic_write, save_checkpoint
from bertcore.launch import study as S
from bertcore.lab.studies import finetune_study, slug
from bertcore.message import Message
from bertcore.training import runs
from bertcore.training.history import FINETUNE_COLUMNS, FINETUNE_EVAL_KEYS, History
from bertcore.training.runs import FINETUNES_DIR
from explorer.i18n import tr
from explorer.page_errors import error_text
from explorer.session import workspace
from explorer.launch import studies

SLOT = "bx_finetune_run"  # session-state key and live-registry slot of this workspace's comparison (a StudyRun)
SWEEP_SLOT = "bx_finetune_sweep"  # ... and of its label sweep
SWEEP_DIR = "sweep"  # <comparison>/sweep/: the label sweep's study folder
START_DIR = "start"  # <comparison>/start/: a starting model that was held only in the session
_K_LOADED = "finetune_loaded"  # (folder, mtime, models, tokenizer) of the saved comparison opened last


@dataclass
class SavedComparison:
    """What the Fine-tune page shows of a comparison folder (read from disk; never raises)."""

    path: Path
    id: str
    meta: dict = field(default_factory=dict)  # run.json of the study folder
    data: dict | None = None  # study.json (bertcore.launch.study.read_study)
    status: str = "damaged"
    reason: str | None = None
    damaged: str | None = None
    run_dirs: dict = field(default_factory=dict)  # PRETRAINED / SCRATCH -> its fine-tune run directory
    histories: dict = field(default_factory=dict)  # PRETRAINED / SCRATCH -> History (history.csv)
    classifier: dict = field(default_factory=dict)  # classifier.json of its runs: labels, pair, task

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or self.id)

    @property
    def created(self) -> str:
        return str(self.meta.get("created") or "")

    @property
    def base(self) -> dict:
        return dict((self.data or {}).get("base") or {})

    @property
    def source(self) -> str:
        return str(self.base.get("source") or "")

    @property
    def seed(self) -> int:
        return int((self.data or {}).get("first_seed") or 0)

    @property
    def steps(self) -> int:
        return int((self.data or {}).get("steps") or 0)

    @property
    def task(self) -> str:
        return str(self.classifier.get("task") or Path(str(self.base.get("task") or "")).name)

    @property
    def task_labels(self) -> list:
        return [str(x) for x in self.classifier.get("labels") or []]

    @property
    def pair(self) -> bool:
        return bool(self.classifier.get("pair"))

    @property
    def chance(self) -> float:
        return 1 / max(2, len(self.task_labels))

    def _run_json(self, label: str) -> dict:
        try:
            return runs.read_run_json(self.run_dirs[label])
        except (InputError, KeyError):
            return {}

    @property
    def labels_used(self) -> int:
        return int(self._run_json(PRETRAINED).get("labels_used") or 0)

    @property
    def steps_done(self) -> int:
        return min((int(self._run_json(k).get("steps_done") or 0) for k in (PRETRAINED, SCRATCH)), default=0)

    @property
    def has_models(self) -> bool:
        return (self.damaged is None and self.status != "running" and set(self.run_dirs) == {PRETRAINED, SCRATCH}
                and all((d / "model.safetensors").is_file() for d in self.run_dirs.values()))

    @property
    def stamp(self) -> int:
        """The version of the folder (study.json is rewritten at each run's end)."""
        try:
            return (self.path / S.STUDY_FILE).stat().st_mtime_ns
        except OSError:
            return 0

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


def cell_labels(data: dict) -> dict:
    """(variant, seed) -> PRETRAINED / SCRATCH of a comparison's study data (its first seed's runs)."""
    seed = int(data.get("first_seed") or 0)
    return {(v["name"], seed): LABEL_OF_INIT[v["settings"]["init"]] for v in data.get("variants") or []
            if (v.get("settings") or {}).get("init") in LABEL_OF_INIT}


def read_comparison(d) -> SavedComparison:
    """A ``SavedComparison`` for folder ``d`` (its status as ``runs.read_run`` reads it; never raises)."""
    d = Path(d)
    s = SavedComparison(path=d, id=d.name)
    info = runs.read_run(d)
    s.status, s.reason, s.damaged = info.status, info.reason, info.damaged
    try:
        s.meta = runs.read_run_json(d)
    except InputError:
        s.meta = {}
    data = S.read_study(d)
    if data is None or data.get("kind") != "finetune" or planned_points(data):
        if s.damaged is None:
            s.status, s.damaged = "damaged", tr("not a fine-tune comparison (no fine-tune study.json in it)")
        return s
    s.data = data
    for (variant, seed), label in cell_labels(data).items():  # below this folder, wherever the workspace is now
        s.run_dirs[label] = d / S.RUNS_DIR / f"{slug(variant)}-seed{seed}"
    s.histories = {label: _read_history(p / "history.csv") for label, p in s.run_dirs.items()}
    for p in s.run_dirs.values():
        try:
            got = json.loads((p / "classifier.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(got, dict):
            s.classifier = got
            break
    return s


def folder() -> Path:
    return workspace.workspace_path() / FINETUNES_DIR


def saved() -> list[SavedComparison]:
    """Every comparison of this workspace, newest first."""
    parent = folder()
    if not parent.is_dir():
        return []
    out = [read_comparison(d) for d in parent.iterdir()
           if d.is_dir() and not d.name.startswith(".") and runs.RUN_ID_RE.fullmatch(d.name)]
    return sorted(out, key=lambda s: (s.created, s.id), reverse=True)


# ----------------------------------------------------------------------------- the live studies
def live():
    """This workspace's comparison (a StudyRun) started in this server process (running or ended), or None."""
    return studies.live(SLOT)


def sweep_run():
    """This workspace's label sweep (a StudyRun) started in this server process, or None."""
    return studies.live(SWEEP_SLOT)


def running() -> bool:
    return studies.running(SLOT)


def sweeping() -> bool:
    return studies.running(SWEEP_SLOT)


def by_label(run, values: dict) -> dict:
    """A StudyRun's per-run ``values`` ({(variant, seed): x}, e.g. its snapshot's histories) by PRETRAINED /
    SCRATCH."""
    labels = cell_labels({"first_seed": run.plan.first_seed, "variants": [v.to_dict() for v in run.plan.study.variants]})
    return {label: values[key] for key, label in labels.items() if key in values}


# ----------------------------------------------------------------------------- start, sweep, open, delete
def _start_of(key: str, am, out: Path) -> str:
    """The starting model as the training process finds it: a run / checkpoint folder as it is, "minilm", or a
    model held only in this session (an upload) saved into the comparison's folder first."""
    if key == "minilm":
        return "minilm"
    d = getattr(am.bundle, "run_dir", None)
    if (key.startswith(("run:", "dir:", "share:")) and am.kind != "pretrained" and d is not None
            and (Path(d) / "model.safetensors").is_file()):
        return str(Path(d).resolve())
    save_checkpoint(am.bundle, out / START_DIR)
    return str(out / START_DIR)


def _task_of(task, upload, out: Path) -> str:
    """A built-in task's name, or an uploaded CSV kept in the comparison's folder (the runs and a later sweep read
    that file)."""
    if task.name in task_names() or upload is None:
        return task.name
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(upload.name)).name).strip("._") or "task"
    name = name if name.lower().endswith(".csv") else f"{name}.csv"
    atomic_write(out / name, upload.getvalue())
    return str(out / name)


def start(label: str, task, cfg, upload=None) -> str | None:
    """Start a comparison from the model called ``label`` in the model switcher (``upload``: the task's CSV file
    when it was uploaded); an error message or None."""
    if running() or sweeping():
        return tr("A fine-tuning is already running in this workspace; stop it first.")
    kept = saved()
    cap = runs.max_runs_per_workspace()
    if len(kept) >= cap:
        oldest = ", ".join(f"“{s.name}”" for s in kept[-3:])
        return tr("This workspace keeps at most {cap} fine-tunes (BERTCORE_MAX_RUNS_PER_WORKSPACE) and has {n}; delete "
                  "one first (under “Saved fine-tunes”), e.g. {oldest}. Nothing is deleted automatically.", cap=cap,
                  n=len(kept), oldest=oldest)
    try:
        runs.check_capacity(workspace.workspace_path(create=True), new_runs=0)
        models = workspace.list_models()
        am, key = models[label], models.keys_by_label[label]
    except (BertcoreError, OSError, KeyError) as e:
        return tr("That model cannot be used: {error}", error=error_text(e) if isinstance(e, BertcoreError) else e)
    try:
        out = runs.new_run_dir(folder(), task.name)
    except (BertcoreError, OSError) as e:
        return tr("Cannot create a folder for the fine-tune: {error}", error=error_text(e))
    try:
        study = finetune_study(_start_of(key, am, out), label, _task_of(task, upload, out), cfg.to_dict())
        plan = S.plan(study, out, seeds=1, first_seed=int(cfg.seed))
        plan.name = f"{task.name}, {cfg.labels or 'all'} labels, from {label}"
        S.write_study(plan)  # listed and named from now on, before the runner's thread has started
        err = studies.start(plan, SLOT)
    except (BertcoreError, OSError) as e:
        err = tr("The fine-tune cannot start: {error}", error=error_text(e) if isinstance(e, BertcoreError) else e)
    if err:
        shutil.rmtree(out, ignore_errors=True)
    return err


def start_sweep(c: SavedComparison) -> str | None:
    """Start (or finish) the label sweep of comparison ``c`` into ``c.path / "sweep"``; an error message or None."""
    if running() or sweeping():
        return tr("A fine-tuning is already running in this workspace; wait for it or stop it first.")
    base = c.base
    start_at, task = str(base.get("start") or ""), str(base.get("task") or "")
    if start_at != "minilm" and not Path(start_at).is_dir():
        return tr("The starting model of this comparison is gone ({path}); start a new comparison to sweep it.",
                  path=start_at)
    if task not in task_names() and not Path(task).is_file():
        return tr("The task file of this comparison is gone ({path}); start a new comparison to sweep it.", path=task)
    try:
        study = finetune_study(start_at, c.source, task, sweep_config(base.get("finetune") or {}),
                               points=DEFAULT_POINTS)
        plan = S.plan(study, c.path / SWEEP_DIR, seeds=1, first_seed=c.seed)
        plan.name = f"label sweep: {c.name}"
        return studies.start(plan, SWEEP_SLOT)
    except (BertcoreError, OSError) as e:
        return tr("The sweep cannot start: {error}", error=error_text(e) if isinstance(e, BertcoreError) else e)


def open_models(c: SavedComparison):
    """({PRETRAINED: classifier, SCRATCH: classifier}, tokenizer) of a comparison, loaded once per session and
    folder version (JSON + safetensors only)."""
    if not c.has_models:
        raise InputError(Message("“{name}” has no saved weights ({reason}); fine-tune again", name=c.name,
                                 reason=c.reason or c.status))
    stamp = (str(c.path), c.stamp)
    got = st.session_state.get(_K_LOADED)
    if got is not None and got[0] == stamp:
        return got[1], got[2]
    models, tok = {}, None
    for label in (PRETRAINED, SCRATCH):
        models[label], t, _ = load_classifier(c.run_dirs[label])
        tok = tok or t
    st.session_state[_K_LOADED] = (stamp, models, tok)
    return models, tok


def _inside(run, path: Path) -> bool:
    return run is not None and (Path(run.out_dir) == path or path in Path(run.out_dir).parents)


def delete(c: SavedComparison) -> None:
    """Remove a comparison with its sweep (refused while either trains; nothing outside the workspace can be
    named)."""
    here = [slot for slot in (SLOT, SWEEP_SLOT) if _inside(studies.live(slot), Path(c.path))]
    if any(studies.live(slot).running for slot in here):
        raise InputError(Message("this fine-tune is still training; stop it first, then delete it"))
    runs.delete_run(c.path, root=folder())
    st.session_state.pop(_K_LOADED, None)
    for slot in here:  # forget it here too
        studies.forget(slot)
