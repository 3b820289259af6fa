"""Run directories and workspaces: where trainings are kept (like HF Trainer's output_dir or a TensorBoard logdir).

A *run directory* is a checkpoint directory (``bertcore.io.checkpoint``: config.json, train_config.json,
vocab.txt / tokenizer.json, model.safetensors, history.csv, snapshots.safetensors, bundle.json) plus::

    run.json              name, created, status, reason, steps_done, total_steps, seed, preset, corpus,
                          corpus_spec, tokenizer, metrics (final held-out MLM/NSP), pid of the training process,
                          failure ("write" when a checkpoint could not be written: resumable)
    .lock                 held (flock) by the process that trains the run (bertcore.training.locks)
    resume.safetensors    weights + AdamW state + RNG states for ``--resume`` (bertcore.training.resume)
    corpus.tsv            the corpus as A<TAB>B lines when it cannot be rebuilt from a spec (an upload)
    probe.csv             ``TrainingRecords.probe_history`` rows (bertcore.analysis.records), when the run has them

The root of all runs is env ``BERTCORE_RUNS_DIR``, else ``$XDG_DATA_HOME/bertcore/runs``, else
``~/.local/share/bertcore/runs``::

    <root>/runs/<run id>/                 CLI runs without --out
    <root>/workspaces/<ws id>/workspace.json   the workspace's active model
    <root>/workspaces/<ws id>/<run id>/   the runs of one browser workspace
    <root>/workspaces/<ws id>/finetunes/<id>/   its fine-tune comparisons (study folders: explorer.launch.finetunes)

Workspace ids are ``secrets.token_urlsafe(16)`` strings and are checked against ``WORKSPACE_ID_RE`` before
they become a path, so no id can name a folder outside the root. Reading never raises: a damaged or
half-written run, or one whose weights are unreadable or hold NaN/inf, is listed with ``damaged`` set to the
reason. A run reads as "running" while its lock is held, so every server replica sharing the root agrees.
"""
from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from bertcore.errors import BertcoreError, InputError
from bertcore.message import Message, reason
from bertcore.io.checkpoint import atomic_write, weights_problem
from bertcore import settings
from bertcore.settings import runs_root
from bertcore.training import locks
from bertcore.training.resume import RESUME_FILE, read_resume_step

RUN_FILE = "run.json"
WORKSPACE_FILE = "workspace.json"
STATUSES = ("running", "finished", "stopped", "failed")
WORKSPACE_ID_RE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_NAME_LEN = 80
FINETUNES_DIR = "finetunes"  # <workspace>/finetunes/<id>/: the Fine-tune page's comparisons (explorer.launch.finetunes)
# run.json "kind" -> the files a finished run of that kind has (default: a pretraining or fine-tune checkpoint);
# (finetune-comparison: a comparison of earlier versions, its two models in sub-folders)
KIND_FILES = {"finetune-comparison": (), "study": ("study.json",)}  # a study: bertcore.launch.study
WRITE_FAILURE = "write"  # run.json "failure" of a run whose checkpoint could not be written (drive): resumable


class RunLimitError(BertcoreError):
    """A workspace is at its cap on runs or disk; the message names what to delete."""


# ----------------------------------------------------------------------------- places
def _inside(path: Path, root: Path) -> Path:
    path = path.resolve()
    if path != root and root not in path.parents:
        raise InputError(Message("{path} is outside the runs folder {root}; refusing to touch it", path=path,
                                 root=root))
    return path


def valid_workspace_id(ws: object) -> bool:
    return isinstance(ws, str) and bool(WORKSPACE_ID_RE.fullmatch(ws))


def new_workspace_id() -> str:
    """An unguessable workspace id (22 URL-safe characters)."""
    return secrets.token_urlsafe(16)


def workspace_dir(ws: str, create: bool = True) -> Path:
    """The folder of workspace ``ws``; InputError for an id that is not a valid workspace id."""
    if not valid_workspace_id(ws):
        raise InputError(Message("that workspace id is not valid (it must be 16-64 letters, digits, '-' or '_'); "
                                 "open the app without ?ws= to get a new workspace"))
    root = runs_root() / "workspaces"
    d = _inside(root / ws, root.resolve() if root.exists() else root)
    if create:
        d.mkdir(parents=True, exist_ok=True)
    return d


def cli_runs_dir() -> Path:
    """Where ``python -m bertcore train`` puts a run when ``--out`` is not given."""
    return runs_root() / "runs"


def new_run_dir(parent: str | Path, name: str = "") -> Path:
    """A new, empty run folder below ``parent`` named ``<UTC time>-<name slug>-<random>``."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:24] or "run"
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        d = parent / f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{slug}-{secrets.token_hex(3)}"
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue
    raise InputError(Message("cannot create a new run folder in {path}; remove old runs", path=parent))


# ----------------------------------------------------------------------------- run.json
def now() -> str:
    """The time run.json records (created, updated): UTC, ISO 8601 to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def run_meta(name: str, *, kind: str = "pretraining", status: str = "running", total_steps: int = 0,
             steps_done: int = 0, seed: int | None = None, preset: str | None = None, corpus: str = "",
             source: str = "", reason: str | None = None, **extra) -> dict:
    """A new run.json (format 1): the one place its common fields and its creation time are set; ``extra`` adds
    a kind's own fields (a fine-tune's task, a pretraining's corpus_spec ...)."""
    name = " ".join(str(name).split())[:MAX_NAME_LEN]
    return {"format": 1, "kind": kind, "name": name, "created": now(), "status": status, "reason": reason,
            "steps_done": int(steps_done), "total_steps": int(total_steps), "seed": seed, "preset": preset,
            "corpus": corpus, "source": source, "metrics": None, **extra}


_ACTIVE_LOCK = threading.Lock()
_ACTIVE: set[str] = set()  # run dirs training in this process


def mark_active(run_dir: str | Path, active: bool) -> None:
    """Record that this process is (no longer) training ``run_dir`` (see ``RunInfo.live``)."""
    key = str(Path(run_dir).resolve())
    with _ACTIVE_LOCK:
        (_ACTIVE.add if active else _ACTIVE.discard)(key)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def write_run_json(run_dir: str | Path, data: dict) -> None:
    atomic_write(Path(run_dir) / RUN_FILE, json.dumps(data, indent=2, allow_nan=False) + "\n")


def read_run_json(run_dir: str | Path) -> dict:
    """run.json as a dict; InputError when it is missing or not a JSON object."""
    p = Path(run_dir) / RUN_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(Message("{name} has no run.json; it is not a bertcore run", name=p.parent.name)) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(Message("run.json cannot be read ({err})", err=str(e))) from None
    if not isinstance(data, dict):
        raise InputError(Message("run.json does not hold a JSON object"))
    return data


def update_run_json(run_dir: str | Path, **changes) -> dict:
    data = read_run_json(run_dir)
    data.update(changes)
    write_run_json(run_dir, data)
    return data


CPU_RUNTIME = "cpu, fp32"  # bertcore.training.device.Runtime.label of a CPU run at full precision


@dataclass
class RunInfo:
    """What the run list shows about one run directory (read from run.json; never raises)."""

    path: Path
    id: str
    name: str = ""
    created: str = ""
    status: str = "damaged"  # running | finished | stopped | failed | damaged (the effective status)
    reason: str | None = None
    steps_done: int = 0
    total_steps: int = 0
    seed: int | None = None
    preset: str | None = None
    corpus: str = ""
    metrics: dict = field(default_factory=dict)
    damaged: str | None = None
    resumable: bool = False
    size_bytes: int = 0
    kind: str = "pretraining"  # run.json "kind": pretraining | finetune | finetune-comparison
    runtime: str = ""  # run.json "runtime": where it trained, e.g. "cuda:0, bf16" ("" before it was recorded)

    @property
    def live(self) -> bool:
        return self.status == "running"

    @property
    def loadable(self) -> bool:
        return self.damaged is None and (self.path / "model.safetensors").is_file()

    def summary(self) -> str:
        """One line: status, steps and the final held-out metrics."""
        if self.damaged:
            return f"damaged: {self.damaged}"
        if self.kind == "study":  # steps are its runs (bertcore.launch.study)
            return f"study, {self.status}: {self.steps_done}/{self.total_steps} runs scored"
        if self.status == "stopped":
            head = f"stopped at step {self.steps_done}/{self.total_steps}"
        elif self.status == "running":
            head = f"running, step {self.steps_done}/{self.total_steps}"
        else:
            head = f"{self.status}, {self.steps_done}/{self.total_steps} steps"
        if self.runtime and self.runtime != CPU_RUNTIME:  # a CPU run's card stays as it was
            head += f" · {self.runtime}"
        m = self.metrics or {}
        if m.get("eval_mlm_acc") is not None and m.get("eval_nsp_acc") is not None:
            head += f" · held-out MLM acc {m['eval_mlm_acc']:.3f}, NSP acc {m['eval_nsp_acc']:.3f}"
        elif m.get("eval_mlm_acc") is not None:  # no sentence task (sentence_task=none)
            head += f" · held-out MLM acc {m['eval_mlm_acc']:.3f}"
        elif m.get("eval_accuracy") is not None:  # a fine-tune
            head += f" · held-out accuracy {m['eval_accuracy']:.3f}"
        return head


def dir_size(path: str | Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def read_run(run_dir: str | Path) -> RunInfo:
    """A ``RunInfo`` for ``run_dir``; a broken folder comes back with ``damaged`` set, never an exception.

    A run.json that says "running" while no process trains it (killed server, closed CLI) reads as
    "stopped" with the reason "interrupted"."""
    d = Path(run_dir)
    info = RunInfo(path=d, id=d.name, name=d.name)
    try:
        info.size_bytes = dir_size(d)
        data = read_run_json(d)
    except InputError as e:
        info.damaged = str(e)
        return info
    try:
        info.name = str(data.get("name") or d.name)[:MAX_NAME_LEN]
        info.created = str(data.get("created") or "")
        info.status = str(data.get("status"))
        info.reason = data.get("reason")
        info.steps_done = int(data.get("steps_done") or 0)
        info.total_steps = int(data.get("total_steps") or 0)
        info.seed = data.get("seed")
        info.preset = data.get("preset")
        info.corpus = str(data.get("corpus") or "")
        info.kind = str(data.get("kind") or "pretraining")
        info.runtime = str(data.get("runtime") or "")
        info.metrics = {k: float(v) for k, v in (data.get("metrics") or {}).items() if v is not None}
    except (TypeError, ValueError, AttributeError) as e:
        info.status, info.damaged = "damaged", f"run.json has a bad field ({e})"
        return info
    if info.status not in STATUSES:
        info.status, info.damaged = "damaged", f"run.json has an unknown status {info.status!r}"
        return info
    if info.status == "running" and not _trains_now(d, data.get("pid")):
        info.status = "stopped"
        info.reason = f"interrupted at step {info.steps_done} (the training process ended)"
    needed = KIND_FILES.get(info.kind, ("config.json", "model.safetensors"))
    missing = [f for f in needed if not (d / f).is_file()]
    if missing and info.status != "running":
        info.damaged = f"{' and '.join(missing)} missing (the run was cut off before its first checkpoint)"
        info.status = "damaged"
        return info
    problem = weights_problem(d) if info.status != "running" else None
    if problem:  # unreadable, NaN or inf weights: never offered as a model
        info.status, info.damaged = "damaged", problem
        return info
    can_resume = info.status == "stopped" or (info.status == "failed" and data.get("failure") == WRITE_FAILURE)
    info.resumable = (can_resume and info.steps_done < info.total_steps
                      and read_resume_step(d / RESUME_FILE) is not None)
    return info


def _trains_now(d: Path, pid) -> bool:
    """Whether some process trains run ``d`` now: its lock is held (by another process, or by a training of this
    one); for a run without a lock file (older versions) whether run.json's pid is alive and not this process."""
    with _ACTIVE_LOCK:
        if str(d.resolve()) in _ACTIVE:
            return True
    held = locks.is_held(d)
    if held is not None:
        return held and not locks.held_here(d)  # held here but not training: a resume setting up
    return pid != os.getpid() and isinstance(pid, int) and pid_alive(pid)


def list_runs(parent: str | Path) -> list[RunInfo]:
    """Every run folder directly below ``parent``, newest first (damaged ones included)."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    out = []
    for d in parent.iterdir():
        if (d.is_dir() and not d.name.startswith(".") and RUN_ID_RE.fullmatch(d.name)
                and d.name != FINETUNES_DIR):
            out.append(read_run(d))
    return sorted(out, key=lambda r: (r.created, r.id), reverse=True)


def find_run(parent: str | Path, run_id: str) -> Path | None:
    """The folder of run ``run_id`` below ``parent``, or None (ids are validated; no path escapes)."""
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        return None
    d = Path(parent) / run_id
    return d if d.is_dir() else None


# ----------------------------------------------------------------------------- management
def rename_run(run_dir: str | Path, name: str) -> None:
    """Set the run's display name (the folder keeps its id)."""
    name = " ".join(str(name).split())
    if not name:
        raise InputError(Message("the name is empty; type a name for the run"))
    if len(name) > MAX_NAME_LEN:
        raise InputError(Message("the name has {n} characters; use at most {limit}", n=len(name), limit=MAX_NAME_LEN))
    try:
        update_run_json(run_dir, name=name)
    except InputError as e:
        raise InputError(Message("cannot rename a damaged run ({err}); delete it instead",
                                 err=reason(e))) from None


def delete_run(run_dir: str | Path, root: str | Path | None = None) -> None:
    """Remove a run folder (damaged ones too). Refuses folders outside ``root`` (default: the runs root)
    and runs that are training in this process."""
    root = Path(root).resolve() if root is not None else runs_root()
    d = _inside(Path(run_dir), root)
    if d == root:
        raise InputError(Message("refusing to delete the runs folder itself"))
    with _ACTIVE_LOCK:
        active = str(d) in _ACTIVE
    if active or locks.is_held(d):  # training here, or in another process or server replica
        raise InputError(Message("this run is still training; stop it first, then delete it"))
    shutil.rmtree(d, ignore_errors=True)


def zip_run(run_dir: str | Path) -> bytes:
    """The run folder as a zip in memory (loadable by the app's checkpoint upload)."""
    d = Path(run_dir)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(d.iterdir()):
            if f.is_file() and not f.name.startswith("."):
                z.write(f, arcname=f.name)
    return buf.getvalue()


# ----------------------------------------------------------------------------- workspaces
def read_workspace(ws: str) -> dict:
    """workspace.json of ``ws`` ({} when missing or damaged)."""
    try:
        data = json.loads((workspace_dir(ws, create=False) / WORKSPACE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, InputError):
        return {}
    return data if isinstance(data, dict) else {}


def write_workspace(ws: str, **changes) -> dict:
    """Merge ``changes`` into workspace.json under the workspace's lock (replicas may write it at once)."""
    d = workspace_dir(ws)
    with locks.exclusive(d):
        data = {**read_workspace(ws), **changes}
        atomic_write(d / WORKSPACE_FILE, json.dumps(data, indent=2) + "\n")
    return data


def max_runs_per_workspace() -> int:
    """Runs one workspace may keep (env BERTCORE_MAX_RUNS_PER_WORKSPACE, default 20)."""
    return settings.whole("BERTCORE_MAX_RUNS_PER_WORKSPACE")


def max_workspace_mb() -> float:
    """Disk one workspace may use in MB (env BERTCORE_MAX_WORKSPACE_MB, default 500)."""
    return settings.number("BERTCORE_MAX_WORKSPACE_MB")


def check_capacity(parent: str | Path, new_runs: int = 1) -> None:
    """RunLimitError, naming runs to delete, when ``new_runs`` more runs would pass a workspace cap."""
    runs = list_runs(parent)
    cap_n, cap_mb = max_runs_per_workspace(), max_workspace_mb()
    used_mb = (sum(r.size_bytes for r in runs) + dir_size(Path(parent) / FINETUNES_DIR)) / 2**20
    if len(runs) + new_runs <= cap_n and used_mb < cap_mb:
        return
    oldest = sorted(runs, key=lambda r: (r.damaged is None, r.created))[:3]
    names = ", ".join(f"“{r.name}”" for r in oldest) or Message("old runs")
    if len(runs) + new_runs > cap_n:
        what = Message("this workspace keeps at most {cap} runs (BERTCORE_MAX_RUNS_PER_WORKSPACE) and has {n}",
                       cap=cap_n, n=len(runs))
    else:
        what = Message("this workspace uses {used} MB of its {cap} MB (BERTCORE_MAX_WORKSPACE_MB)",
                       used=f"{used_mb:,.0f}", cap=f"{cap_mb:,.0f}")
    raise RunLimitError(Message("{what}; delete a run first (in the sidebar under “Runs”), e.g. {names}. "
                                "Nothing is deleted automatically.", what=what, names=names))
