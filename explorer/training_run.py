"""Background training runner of the explorer (no streamlit here: the thread never calls ``st.*``).

``TrainingRun`` runs ``bertcore.training.trainer.Trainer`` for one or more ``Job`` s, one after the other, in a plain
``threading.Thread``. The UI polls ``snapshot()``, which doubles as a heartbeat: a run nobody polled for
``BERTCORE_ABANDON_SECONDS`` (default 10 s) stops itself, because its tab was closed. At most
``BERTCORE_MAX_TRAININGS`` (default 2) runs train at once in this server process; the next ``start()``
raises ``ServerBusy`` with a "try again" message. Trainers build their own model, so the shared untrained
model is never touched.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported (see bertcore/__init__.py)

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

TRAINED_LABEL = "trained in this session"


# ----------------------------------------------------------------------------- limits
def abandon_seconds() -> float:
    """Seconds without a poll after which a training thread stops itself (env BERTCORE_ABANDON_SECONDS)."""
    try:
        return max(0.1, float(os.environ.get("BERTCORE_ABANDON_SECONDS", "10")))
    except ValueError:
        return 10.0


def max_trainings() -> int:
    """Concurrent trainings allowed in this server process (env BERTCORE_MAX_TRAININGS, default 2)."""
    try:
        return max(1, int(os.environ.get("BERTCORE_MAX_TRAININGS", "2")))
    except ValueError:
        return 2


def max_model_mb() -> float:
    """Training-memory budget per run in MB (env BERTCORE_MAX_MODEL_MB, default 1024)."""
    try:
        return max(1.0, float(os.environ.get("BERTCORE_MAX_MODEL_MB", "1024")))
    except ValueError:
        return 1024.0



# ----------------------------------------------------------------------------- bundles
@dataclass
class _StandInBundle:
    """Used only if bertcore.io.checkpoint is missing; same fields as ModelBundle."""

    model: Any
    tokenizer: Any
    history: Any = None
    name: str = ""
    source: str = ""
    snapshots: list = field(default_factory=list)
    probe_tokens: list = field(default_factory=list)


def make_bundle(**kw):
    try:
        from bertcore.io.checkpoint import ModelBundle
    except ImportError:
        return _StandInBundle(**kw)
    return ModelBundle(**kw)



# ----------------------------------------------------------------------------- runner
class ServerBusy(RuntimeError):
    """Raised by TrainingRun.start when the process-wide cap on trainings is reached."""


_SLOT_LOCK = threading.Lock()
_RUNNING: set[int] = set()


def running_trainings() -> int:
    with _SLOT_LOCK:
        return len(_RUNNING)


def _acquire_slot(run_id: int) -> None:
    with _SLOT_LOCK:
        n, cap = len(_RUNNING), max_trainings()
        if n >= cap:
            raise ServerBusy(
                f"Server busy: {n} training{'s' if n != 1 else ''} running (the limit is {cap}, "
                "set by BERTCORE_MAX_TRAININGS). Try again in a minute."
            )
        _RUNNING.add(run_id)


def _release_slot(run_id: int) -> None:
    with _SLOT_LOCK:
        _RUNNING.discard(run_id)


_WARM = threading.Event()


def warmup_optimizer() -> None:
    """The first torch optimizer in a process lazily imports torch._dynamo (~1.5 s): pay it at start-up."""
    if _WARM.is_set():
        return
    _WARM.set()

    def _go():
        # Best effort: it can race with the main thread's own first torch imports, and then the
        # first real optimizer simply pays the import itself.
        try:
            import torch

            p = torch.zeros(1, requires_grad=True)
            p.grad = torch.zeros(1)
            torch.optim.AdamW([p], lr=1e-3).step()
        except Exception:  # noqa: BLE001
            pass

    threading.Thread(target=_go, name="bx-optim-warmup", daemon=True).start()


@dataclass
class Job:
    model_config: Any
    train_config: Any
    label: str = "model"
    probe: Any = "default"  # bertcore.analysis.probe.Probe, "default" (from the corpus) or None
    model: Any = None  # a prepared initial model (Compare: same initial weights); None builds one from the seed


@dataclass
class RunSnapshot:
    status: str  # idle | preparing | running | finished | stopped | abandoned | error
    running: bool
    job_index: int
    step: int  # steps done in the current job
    steps: int  # steps of the current job
    total_done: int
    total_steps: int
    elapsed: float
    eta: float | None
    histories: list  # one DataFrame per job
    labels: list
    message: str | None
    errors: list  # Trainer.error per job (NaN stop etc.)
    probes: list = field(default_factory=list)  # Trainer.probe_history rows per job
    baselines: list = field(default_factory=list)  # Trainer.unigram_baseline per job (None before it exists)

    @property
    def progress(self) -> float:
        return min(1.0, self.total_done / self.total_steps) if self.total_steps else 0.0


_HISTORY_COLUMNS = ["step", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "lr", "tokens_per_s",
                    "eval_mlm_loss", "eval_nsp_loss", "eval_mlm_acc", "eval_nsp_acc"]


def _clean_row(row) -> dict:
    out = {}
    for k, v in dict(row or {}).items():
        if isinstance(v, bool):
            continue
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


class TrainingRun:
    """One background training of one or more jobs (run one after the other)."""

    def __init__(self, jobs, corpus, tokenizer=None, abandon_after: float | None = None):
        self.jobs = list(jobs)
        self.corpus = corpus
        self.tokenizer = tokenizer
        self.abandon_after = abandon_seconds() if abandon_after is None else float(abandon_after)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rows: list[list[dict]] = [[] for _ in self.jobs]
        self._final_hist: list = [None for _ in self.jobs]
        self._errors: list = [None for _ in self.jobs]
        self.results: list = [None for _ in self.jobs]
        self._probes: list[list[dict]] = [[] for _ in self.jobs]
        self._baselines: list = [None for _ in self.jobs]
        self.probe_objects: list = [None for _ in self.jobs]
        self._status = "idle"
        self._message: str | None = None
        self._job = 0
        self._started = 0.0
        self._finished: float | None = None
        self.last_poll = time.monotonic()
        self.adopted = False

    # -- control (UI thread) --
    def start(self) -> "TrainingRun":
        _acquire_slot(id(self))
        self._status = "preparing"
        self._started = time.monotonic()
        self.last_poll = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"bx-train-{id(self):x}", daemon=True)
        try:
            self._thread.start()
        except BaseException:
            _release_slot(id(self))
            raise
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def status(self) -> str:
        return self._status

    def snapshot(self) -> RunSnapshot:
        """A consistent copy of the state (plain floats / DataFrames); also the heartbeat."""
        self.last_poll = time.monotonic()
        with self._lock:
            hists = []
            for i, rows in enumerate(self._rows):
                if self._final_hist[i] is not None:
                    hists.append(self._final_hist[i].copy())
                else:
                    hists.append(pd.DataFrame(rows, columns=None if rows else _HISTORY_COLUMNS))
            job = self._job
            step = len(self._rows[job]) if self.jobs else 0
            steps = int(self.jobs[job].train_config.steps) if self.jobs else 0
            total_steps = sum(int(j.train_config.steps) for j in self.jobs)
            done = sum(len(r) for r in self._rows)
            status, message, errors = self._status, self._message, list(self._errors)
            end = self._finished if self._finished is not None else time.monotonic()
            probes, baselines = [list(p) for p in self._probes], list(self._baselines)
        elapsed = max(0.0, end - self._started) if self._started else 0.0
        eta = None
        if done and status in ("running", "preparing"):
            eta = elapsed / done * max(0, total_steps - done)
        return RunSnapshot(status, self.running, job, step, steps, done, total_steps, elapsed, eta, hists,
                           [j.label for j in self.jobs], message, errors, probes, baselines)

    # -- worker thread: never calls st.* --
    def _run(self) -> None:
        try:
            import torch

            torch.set_num_threads(1)
            from bertcore.training.trainer import Trainer

            for i, job in enumerate(self.jobs):
                if self._stop.is_set():
                    break
                with self._lock:
                    self._job, self._status = i, "preparing"
                trainer = Trainer(job.model_config, job.train_config, self.corpus, tokenizer=self.tokenizer,
                                  model=job.model, probe=job.probe)
                with self._lock:
                    self._status = "running"
                    self._baselines[i] = trainer.unigram_baseline
                    self.probe_objects[i] = trainer.probe
                    self._probes[i] = list(trainer.probe_history)
                steps = int(job.train_config.steps)
                while not getattr(trainer, "done", False) and trainer.step_count < steps:
                    if self._stop.is_set():
                        break
                    if time.monotonic() - self.last_poll > self.abandon_after:
                        with self._lock:
                            self._status = "abandoned"
                        self._stop.set()
                        break
                    row = _clean_row(trainer.step())
                    with self._lock:
                        self._rows[i].append(row)
                        if len(trainer.probe_history) != len(self._probes[i]):
                            self._probes[i] = list(trainer.probe_history)
                    if getattr(trainer, "error", None):
                        break
                if not getattr(trainer, "done", True) and hasattr(trainer, "finalize"):
                    trainer.finalize()  # stopped early: evaluate the weights we keep, last snapshot
                self._finish_job(i, job, trainer)
                if self._errors[i]:
                    break
            with self._lock:
                if self._status != "abandoned":
                    self._status = "stopped" if self._stop.is_set() else "finished"
        except Exception as e:  # noqa: BLE001 - shown to the user as a message, never a traceback
            from bertcore.errors import BertcoreError

            msg = str(e) if isinstance(e, BertcoreError) else f"training failed: {type(e).__name__}: {e}"
            with self._lock:
                self._status, self._message = "error", msg
        finally:
            with self._lock:
                self._finished = time.monotonic()
            _release_slot(id(self))

    def _finish_job(self, i: int, job: Job, trainer) -> None:
        hist = trainer.history
        if not isinstance(hist, pd.DataFrame):
            hist = pd.DataFrame(hist)
        model = trainer.model
        model.eval()
        bundle = make_bundle(model=model, tokenizer=trainer.tokenizer, history=hist.copy(), name=job.label,
                             source=TRAINED_LABEL, snapshots=list(getattr(trainer, "snapshots", []) or []),
                             probe_tokens=list(getattr(trainer, "probe_tokens", []) or []))
        with self._lock:
            self._probes[i] = list(getattr(trainer, "probe_history", []))
            self._final_hist[i] = hist.copy()
            self._errors[i] = getattr(trainer, "error", None)
            self.results[i] = bundle



def fmt_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    s = int(round(s))
    return f"{s // 60}:{s % 60:02d}"
