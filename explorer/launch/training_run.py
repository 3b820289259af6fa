"""Background training runner of the explorer (no streamlit here: the thread never calls ``st.*``).

``TrainingRun`` (a ``bertcore.training.job.BackgroundJob``) drives the one training route,
``bertcore.launch.service`` (``train`` / ``resume``), for one or more jobs, each a ``bertcore.launch.service.RunSpec``
(``resume_from`` set: a resume), one after the other: each becomes a run directory below ``runs_dir`` (the
browser's workspace), written while it trains. By default ``start()`` writes the jobs to a launch folder and starts
a child process that trains them (``bertcore.launch.worker``: its own interpreter lock, so a class's page scripts do
not slow it down); the job's thread only relays the child's events into the run's records
(``BERTCORE_TRAINING_PROCESS=0``: the thread trains them itself, and its events go through the same relay).
Runs are also registered per workspace (``find_live``), so a reloaded tab of the same workspace finds the run still
training and keeps polling it. The UI polls ``snapshot()``, which doubles as a heartbeat: a run nobody polled for
``BERTCORE_ABANDON_SECONDS`` (default 10 s) stops itself, because its tab was closed. At most
``BERTCORE_MAX_TRAININGS`` (default 2) runs train at once per server process; the next ``start()`` raises
``ServerBusy`` with a "try again" message (the limits: ``explorer.launch.training_slots``). Trainers build their own model,
so the shared untrained model is never touched. Every run trains where ``training_slots.training_runtime`` says
(the GPU when torch sees one); the Runtime goes to the child in the launch folder, and ``snapshot().runtime`` names it.
"""
from __future__ import annotations

import math
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import bertcore  # noqa: F401,E402 - sets OMP_WAIT_POLICY before torch is imported
from bertcore.analysis.live_probe import Probe
from bertcore.errors import BertcoreError
from bertcore.io.checkpoint import load_checkpoint
from bertcore.training import runs
from bertcore.launch import worker
from bertcore.training.job import BackgroundJob
from bertcore.training.history import History
from explorer.session import client_limits
from explorer.i18n import mark
from explorer.launch.training_slots import (
    ServerBusy,
    abandon_seconds,
    acquire_slot,
    lower_this_threads_priority,
    own_process,
    release_slot,
    training_nice,
    training_runtime,
)

TRAINED_LABEL = mark("trained in this session")  # the runs' source (run.json); pages show tr(TRAINED_LABEL)


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
    probes: list = field(default_factory=list)  # TrainingRecords.probe_history rows per job
    baselines: list = field(default_factory=list)  # Trainer.unigram_baseline per job (None before it exists)
    skills: list = field(default_factory=list)  # TrainingRecords.skills_history per job (a History, or None: no skills)
    runtime: str = ""  # where it trains, e.g. "cuda:0, bf16" (bertcore.training.device.Runtime.label)

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


class TrainingRun(BackgroundJob):
    """One background training of one or more jobs (run one after the other), each into its own run directory.

    ``jobs``: complete ``RunSpec``s, trained as they are (the app builds them with ``explorer.launch.launcher.
    app_spec``: the corpus, its tokenizer, the device). ``runs_dir``: the folder new run directories go to
    (default: ``bertcore.training.runs.cli_runs_dir()``).
    ``on_end(run_dir)``: called in the thread after the last job with a usable checkpoint (e.g. remember it
    as the workspace's active model). Start, stop, the heartbeat and the end's order: ``BackgroundJob``."""

    kind = "training"

    def __init__(self, jobs, abandon_after: float | None = None, runs_dir=None, on_end=None):
        super().__init__(abandon_seconds() if abandon_after is None else abandon_after)
        self.jobs = list(jobs)
        self.runs_dir = runs_dir
        self.on_end = on_end
        self.nice = training_nice()  # read here, so a bad value is an error on Start, never in the thread
        self.runtime = training_runtime()  # where a resume goes on: a bad BERTCORE_TRAINING_DEVICE says so on Start
        self.in_process = own_process()
        self._proc = None  # the child process (bertcore.launch.worker.spawn), when the run trains in its own
        self._folder: Path | None = None  # its launch folder
        self._not_started: Exception | None = None  # why the child could not be started (shown as the run's error)
        self._current: dict = {}  # in a thread: the trainer a stop request finds (worker.note_stop)
        self.stop_steps: list = [None for _ in self.jobs]  # the step a stop request found, per job
        self.histories: list[History] = [History.pretraining() for _ in self.jobs]
        self._errors: list = [None for _ in self.jobs]
        self.results: list = [None for _ in self.jobs]
        self.run_dirs: list = [None for _ in self.jobs]
        self._probes: list[list[dict]] = [[] for _ in self.jobs]
        self._baselines: list = [None for _ in self.jobs]
        self._skills: list = [None for _ in self.jobs]
        self.probe_objects: list = [None for _ in self.jobs]
        self._job = 0
        self.adopted = False

    # -- control (UI thread) --
    def start(self) -> "TrainingRun":
        """Take a training slot, start the child process (it trains at once) and the thread that listens to it."""
        client_limits.charge("start")  # ClientLimited: this client's Starts per minute (explorer.session.client_limits)
        try:
            acquire_slot(id(self))
        except ServerBusy:
            client_limits.refund("start")  # no training started: the client's Start is given back
            raise
        try:
            if self.in_process:  # the child trains from now on; the job's thread listens to it
                try:
                    self._folder = Path(tempfile.mkdtemp(prefix="bertx-job-"))
                    worker.write_job(self._folder, self.jobs, self._parent(), nice=self.nice, runtime=self.runtime)
                    self._proc = worker.spawn(self._folder)
                except Exception as e:  # noqa: BLE001 - the run ends with it as its message (in the thread)
                    self._not_started = e
            super().start(on_exit=lambda: release_slot(id(self)))
        except BaseException:
            release_slot(id(self))
            if self._proc is not None:
                self._proc.kill()
            raise
        return self

    def on_stop(self, reason: str) -> None:
        if self._proc is not None:
            worker.tell_stop(self._proc, reason)
        else:
            worker.note_stop(self._current, self.stop_signal, reason)

    def snapshot(self) -> RunSnapshot:
        """A consistent copy of the state (the histories are the trainers' own, thread-safe); also the heartbeat."""
        self.heartbeat()
        with self._lock:
            hists = list(self.histories)
            job = self._job
            step = len(hists[job]) if self.jobs else 0
            steps = int(self.jobs[job].train_config.steps) if self.jobs else 0
            total_steps = sum(int(j.train_config.steps) for j in self.jobs)
            done = sum(len(h) for h in hists)
            status, message, errors = self._status, self._message, list(self._errors)
            dirs = list(self.run_dirs)
            probes, baselines, skills = [list(p) for p in self._probes], list(self._baselines), list(self._skills)
        elapsed = self.elapsed
        eta = None
        if done and status in ("running", "preparing"):
            eta = elapsed / done * max(0, total_steps - done)
        return RunSnapshot(status, self.running, job, step, steps, done, total_steps, elapsed, eta, hists,
                           [j.name for j in self.jobs], message, errors, dirs, probes, baselines, skills,
                           self.runtime.label)

    # -- the thread: never calls st.* --
    def work(self) -> None:
        if self._not_started is not None:
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
            raise self._not_started
        if self.in_process:
            self._relay_child()
        else:  # BERTCORE_TRAINING_PROCESS=0: the same jobs in this thread, their events applied as they come
            torch.set_num_threads(1)
            lower_this_threads_priority(self.nice)
            worker.run_jobs(self.jobs, self._parent(), self._on_event,
                            self.stop_signal, self._current)
        last = next((d for d, b in zip(reversed(self.run_dirs), reversed(self.results)) if b is not None), None)
        if last is not None and self.on_end is not None and self._status != "error":
            self.on_end(last)

    def _relay_child(self) -> None:
        proc, folder = self._proc, self._folder
        try:
            said_why = False
            for ev in worker.events(proc):
                said_why = self._on_event(ev) or said_why
            rc = worker.finish(proc)
            if not said_why:
                why = worker.crash_text(folder)
                raise RuntimeError(f"the training process ended unexpectedly (exit code {rc})"
                                   + (f": {why}" if why else ""))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _on_event(self, ev: dict) -> bool:
        """Apply one event of the jobs (bertcore.launch.worker) to this run's records; True once they said how they
        ended. The one relay: the child's JSON lines and a thread's events alike."""
        kind, i = ev.get("ev"), int(ev.get("job", 0) or 0)
        if kind == "job":
            with self._lock:
                self._job = i
                if self._status != "abandoned":
                    self._status = "preparing"
        elif kind == "start":
            hist = History.pretraining()
            worker.sync_rows(hist, ev["history"])
            sk = ev.get("skills")
            skills = None
            if sk is not None:
                skills = History(sk["columns"], sk["eval_keys"])
                worker.sync_rows(skills, sk)
            with self._lock:
                self.histories[i], self.run_dirs[i] = hist, Path(ev["run_dir"])
                if self._status != "abandoned":
                    self._status = "running"
                self._baselines[i] = ev.get("baseline")
                self.probe_objects[i] = Probe(**ev["probe"]) if ev.get("probe") else None
                self._probes[i] = list(ev.get("probes") or [])
                self._skills[i] = skills
        elif kind == "rows":
            worker.sync_rows(self.histories[i], ev["history"])
            if ev.get("skills") is not None and self._skills[i] is not None:
                worker.sync_rows(self._skills[i], ev["skills"])
            if "probes" in ev:
                with self._lock:
                    self._probes[i] = list(ev["probes"])
        elif kind == "job_end":
            self.stop_steps[i] = ev.get("stop_step")
            self._finish_job(i, Path(ev["run_dir"]), ev.get("error"))
        elif kind == "error":
            with self._lock:
                self._status, self._message = "error", str(ev.get("message"))
            return True
        return kind == "done"

    def _finish_job(self, i: int, run_dir: Path, error) -> None:
        """Job ``i`` ended: its model as saved in ``run_dir`` (None if it has no checkpoint), named by its run
        (explorer.session.state.set_active), its folder and error."""
        try:
            bundle = load_checkpoint(run_dir)
        except BertcoreError as e:
            bundle, error = None, error or str(e)
        if bundle is not None:
            bundle.model.eval()
            bundle.name = bundle.name or run_dir.name
            bundle.run_dir = run_dir
        with self._lock:
            self._errors[i] = error
            self.results[i] = bundle
            self.run_dirs[i] = run_dir

    def _parent(self):
        return self.runs_dir if self.runs_dir is not None else runs.cli_runs_dir()


def fmt_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    s = int(round(s))
    return f"{s // 60}:{s % 60:02d}"
