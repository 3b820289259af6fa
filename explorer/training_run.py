"""Background training runner of the explorer (no streamlit here: the thread never calls ``st.*``).

``TrainingRun`` drives the one training route, ``bertcore.training.service`` (``train`` / ``resume``), for one or
more ``Job`` s, one after the other, in a plain ``threading.Thread``: each job becomes a run directory below
``runs_dir`` (the browser's workspace), written while it trains. Runs are also registered per workspace
(``find_live``), so a reloaded tab of the same workspace finds the run still training and keeps polling it. The UI polls ``snapshot()``, which doubles as a heartbeat: a run nobody polled for
``BERTCORE_ABANDON_SECONDS`` (default 10 s) stops itself, because its tab was closed. At most
``BERTCORE_MAX_TRAININGS`` (default 2) runs train at once in this server process; the next ``start()``
raises ``ServerBusy`` with a "try again" message. Trainers build their own model, so the shared untrained
model is never touched.
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

import bertcore  # noqa: F401,E402 - sets OMP_WAIT_POLICY before torch is imported
from bertcore.errors import BertcoreError
from bertcore.settings import env_number
from bertcore.training import runs, service
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import StopSignal
from bertcore.training.history import History
from explorer.i18n import mark

TRAINED_LABEL = mark("trained in this session")  # the runs' source (run.json); pages show tr(TRAINED_LABEL)


# ----------------------------------------------------------------------------- limits
def abandon_seconds() -> float:
    """Seconds without a poll after which a training thread stops itself (env BERTCORE_ABANDON_SECONDS)."""
    return env_number("BERTCORE_ABANDON_SECONDS", 10, minimum=0.1)


def training_nice() -> int:
    """Niceness of a training thread (env BERTCORE_TRAINING_NICE, default 10, 0 = as the server). Pages then
    win the CPU when both want it: a class keeps quick pages while trainings use what is left."""
    return env_number("BERTCORE_TRAINING_NICE", 10, minimum=0, maximum=19, integer=True)


def lower_this_threads_priority(nice: int) -> None:
    """Linux: setpriority on a thread id changes only that thread. Elsewhere (or if refused) nothing happens."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), nice))
    except OSError:
        pass


def max_trainings() -> int:
    """Concurrent trainings allowed in this server process (env BERTCORE_MAX_TRAININGS, default 2)."""
    return env_number("BERTCORE_MAX_TRAININGS", 2, minimum=1, integer=True)


# ----------------------------------------------------------------------------- runner
class ServerBusy(RuntimeError):
    """Raised by TrainingRun.start when the process-wide cap on trainings is reached (``running`` of ``cap``; the
    page words it in the session's language, explorer.state)."""

    def __init__(self, message: str, running: int = 0, cap: int = 0):
        super().__init__(message)
        self.running, self.cap = running, cap


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
                "set by BERTCORE_MAX_TRAININGS). Try again in a minute.", n, cap
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
    preset: str | None = None
    resume_dir: Any = None  # a stopped run directory to continue instead of a new run
    probe: Any = "default"  # bertcore.analysis.live_probe.Probe, "default" (from the corpus) or None
    model: Any = None  # a prepared initial model (Compare: same initial weights); None builds one from the seed
    skill_csv: Any = None  # (name, bytes) of the user's own skill items (text,right,wrong), scored with the built-in
    defaults: dict | None = None  # what bertcore.data.corpus_defaults chose for the corpus (recorded in run.json)


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
    histories: list  # one History per job (bertcore.training.history; the trainer's own, read-only here)
    labels: list
    message: str | None
    errors: list  # Trainer.error per job (NaN stop etc.)
    run_dirs: list = field(default_factory=list)  # one run directory (or None) per job
    probes: list = field(default_factory=list)  # Trainer.probe_history rows per job
    baselines: list = field(default_factory=list)  # Trainer.unigram_baseline per job (None before it exists)
    skills: list = field(default_factory=list)  # Trainer.skills_history per job (a History, or None: no skills)

    @property
    def progress(self) -> float:
        return min(1.0, self.total_done / self.total_steps) if self.total_steps else 0.0


_LIVE_LOCK = threading.Lock()
_LIVE: dict[tuple[str, str], "TrainingRun"] = {}  # (workspace id, slot) -> the workspace's latest run


LIVE_KEEP_SECONDS = 600.0  # a finished run stays findable by a reloaded tab this long (then only its run dir)


def register_live(workspace: str, slot: str, run: "TrainingRun | None") -> None:
    with _LIVE_LOCK:
        now = time.monotonic()
        for k, r in list(_LIVE.items()):  # forget long-finished runs, so their models can be freed
            if r._finished is not None and now - r._finished > LIVE_KEEP_SECONDS:
                del _LIVE[k]
        if run is None:
            _LIVE.pop((workspace, slot), None)
        else:
            _LIVE[(workspace, slot)] = run


def find_live(workspace: str, slot: str) -> "TrainingRun | None":
    """The latest run a session of ``workspace`` started in ``slot`` (it may have ended since)."""
    with _LIVE_LOCK:
        return _LIVE.get((workspace, slot))


class TrainingRun:
    """One background training of one or more jobs (run one after the other), each into its own run directory.

    ``runs_dir``: the folder new run directories go to (default: ``bertcore.training.runs.cli_runs_dir()``).
    ``corpus_spec``: how to rebuild ``corpus`` for a resume ("builtin", "tutorial"; None stores its pairs).
    ``on_end(run_dir)``: called in the thread after the last job with a usable checkpoint (e.g. remember it
    as the workspace's active model)."""

    def __init__(self, jobs, corpus, tokenizer=None, abandon_after: float | None = None, runs_dir=None,
                 corpus_spec: str | None = None, on_end=None):
        self.jobs = list(jobs)
        self.corpus = corpus
        self.tokenizer = tokenizer
        self.corpus_spec = corpus_spec
        self.runs_dir = runs_dir
        self.on_end = on_end
        self.abandon_after = abandon_seconds() if abandon_after is None else float(abandon_after)
        self.nice = training_nice()  # read here, so a bad value is an error on Start, never in the thread
        self._lock = threading.Lock()
        self._stop = None  # the current job's StopSignal
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.histories: list[History] = [History.pretraining() for _ in self.jobs]
        self._errors: list = [None for _ in self.jobs]
        self.results: list = [None for _ in self.jobs]
        self.run_dirs: list = [None for _ in self.jobs]
        self._probes: list[list[dict]] = [[] for _ in self.jobs]
        self._baselines: list = [None for _ in self.jobs]
        self._skills: list = [None for _ in self.jobs]
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

    def stop(self, reason: str = "stopped by the user") -> None:
        with self._lock:
            self._stopped.set()
            if self._stop is not None:
                self._stop.request(reason)

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
        """A consistent copy of the state (the histories are the trainers' own, thread-safe); also the heartbeat."""
        self.last_poll = time.monotonic()
        with self._lock:
            hists = list(self.histories)
            job = self._job
            step = len(hists[job]) if self.jobs else 0
            steps = int(self.jobs[job].train_config.steps) if self.jobs else 0
            total_steps = sum(int(j.train_config.steps) for j in self.jobs)
            done = sum(len(h) for h in hists)
            status, message, errors = self._status, self._message, list(self._errors)
            end = self._finished if self._finished is not None else time.monotonic()
            dirs = list(self.run_dirs)
            probes, baselines, skills = [list(p) for p in self._probes], list(self._baselines), list(self._skills)
        elapsed = max(0.0, end - self._started) if self._started else 0.0
        eta = None
        if done and status in ("running", "preparing"):
            eta = elapsed / done * max(0, total_steps - done)
        return RunSnapshot(status, self.running, job, step, steps, done, total_steps, elapsed, eta, hists,
                           [j.label for j in self.jobs], message, errors, dirs, probes, baselines, skills)

    # -- worker thread: never calls st.* --
    def _callbacks(self, i: int) -> Callbacks:
        """What the thread listens to while job ``i`` trains (bertcore.training.callbacks)."""
        def on_start(ev):
            trainer = ev.trainer  # a resumed run starts with its history so far
            with self._lock:
                self.histories[i], self.run_dirs[i], self._status = trainer.history, ev.run_dir, "running"
                self._baselines[i] = trainer.unigram_baseline
                self.probe_objects[i] = trainer.probe
                self._probes[i] = list(trainer.probe_history)
                self._skills[i] = trainer.skills_history

        def on_eval(ev):
            with self._lock:
                self._probes[i] = list(ev.trainer.probe_history)

        def on_step(ev):
            if time.monotonic() - self.last_poll > self.abandon_after and not self._stopped.is_set():
                with self._lock:
                    self._status = "abandoned"
                self.stop("abandoned (the tab was closed)")

        return Callbacks(start=on_start, step=on_step, eval=on_eval)

    def _run(self) -> None:
        try:
            torch.set_num_threads(1)
            lower_this_threads_priority(self.nice)
            for i, job in enumerate(self.jobs):
                if self._stopped.is_set():
                    break
                stop = StopSignal()
                with self._lock:
                    self._job, self._status, self._stop = i, "preparing", stop
                    if self._stopped.is_set():
                        stop.request()
                if job.resume_dir is not None:
                    result = service.resume(job.resume_dir, stop=stop, callbacks=self._callbacks(i))
                else:
                    spec = service.RunSpec(job.model_config, job.train_config, corpus=self.corpus,
                                           corpus_spec=self.corpus_spec,
                                           tokenizer=self.tokenizer if self.tokenizer is not None else "word",
                                           preset=job.preset, name=job.label, source=TRAINED_LABEL,
                                           probe=job.probe, model=job.model, callbacks=self._callbacks(i),
                                           skill_csv=job.skill_csv, defaults=job.defaults)
                    result = service.train(spec, parent=self._parent(), stop=stop)
                self._finish_job(i, result)
                if self._errors[i]:
                    break
            with self._lock:
                if self._status != "abandoned":
                    self._status = "stopped" if self._stopped.is_set() else "finished"
            last = next((d for d, b in zip(reversed(self.run_dirs), reversed(self.results)) if b is not None), None)
            if last is not None and self.on_end is not None:
                self.on_end(last)
        except Exception as e:  # noqa: BLE001 - shown to the user as a message, never a traceback
            msg = str(e) if isinstance(e, BertcoreError) else f"training failed: {type(e).__name__}: {e}"
            with self._lock:
                self._status, self._message = "error", msg
        finally:
            with self._lock:
                self._finished = time.monotonic()
            _release_slot(id(self))

    def _parent(self):
        return self.runs_dir if self.runs_dir is not None else runs.cli_runs_dir()

    def _finish_job(self, i: int, result) -> None:
        trainer = result.trainer
        bundle = result.bundle  # its history is the trainer's, as saved (a DataFrame)
        bundle.model.eval()
        bundle.name = result.run_dir.name if not bundle.name else bundle.name
        bundle.run_dir = result.run_dir  # the app names it by its run (explorer.state.set_active)
        with self._lock:
            self.histories[i] = trainer.history  # a resumed run's history replaced the first one
            self._probes[i] = list(trainer.probe_history)
            self._skills[i] = trainer.skills_history
            self._errors[i] = trainer.error or (result.reason if result.status == "failed" else None)
            self.results[i] = bundle
            self.run_dirs[i] = result.run_dir


def fmt_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    s = int(round(s))
    return f"{s // 60}:{s % 60:02d}"
