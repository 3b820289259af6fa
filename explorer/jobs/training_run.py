"""Background training runner of the explorer (no streamlit here: the thread never calls ``st.*``).

``TrainingRun`` drives the one training route, ``bertcore.jobs.service`` (``train`` / ``resume``), for one or
more jobs, each a ``bertcore.jobs.service.RunSpec`` (``resume_from`` set: a resume), one after the other: each
becomes a run directory below ``runs_dir`` (the browser's workspace), written while it trains. By default the jobs train in a child process (``bertcore.jobs.worker``: its own
interpreter lock, so a class's page scripts do not slow it down) and a plain ``threading.Thread`` relays its
events into the same records a training thread fills (``BERTCORE_TRAINING_PROCESS=0``: they train in that thread).
Runs are also registered per workspace (``find_live``), so a reloaded tab of the same workspace finds the run still
training and keeps polling it. The UI polls ``snapshot()``, which doubles as a heartbeat: a run nobody polled for
``BERTCORE_ABANDON_SECONDS`` (default 10 s) stops itself, because its tab was closed. At most
``BERTCORE_MAX_TRAININGS`` (default 2) runs train at once per server process; the next ``start()`` raises
``ServerBusy`` with a "try again" message (the limits: ``explorer.jobs.training_slots``). Trainers build their own model,
so the shared untrained model is never touched. Every run trains where ``training_slots.training_runtime`` says
(the GPU when torch sees one); the Runtime goes to the child in the job folder, and ``snapshot().runtime`` names it.
"""
from __future__ import annotations

import math
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

import bertcore  # noqa: F401,E402 - sets OMP_WAIT_POLICY before torch is imported
from bertcore.analysis.live_probe import Probe
from bertcore.analysis.records import TrainingRecords
from bertcore.errors import BertcoreError
from bertcore.io.checkpoint import load_checkpoint
from bertcore.training import runs
from bertcore.jobs import service, worker
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import StopSignal
from bertcore.training.history import History
from explorer.session import client_limits
from explorer.i18n import mark
from explorer.jobs.training_slots import (
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
        self.runtime = training_runtime()  # the same: a bad BERTCORE_TRAINING_DEVICE says so on Start
        self.in_process = own_process()
        self._proc: worker.TrainingProcess | None = None  # the child, when the run trains in its own process
        self._stop_reason = "stopped by the user"
        self.stop_steps: list = [None for _ in self.jobs]  # in its own process: the step a stop request found
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
        client_limits.charge("start")  # ClientLimited: this client's Starts per minute (explorer.session.client_limits)
        try:
            acquire_slot(id(self))
        except ServerBusy:
            client_limits.refund("start")  # no training started: the client's Start is given back
            raise
        self._status = "preparing"
        self._started = time.monotonic()
        self.last_poll = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"bx-train-{id(self):x}", daemon=True)
        try:
            self._thread.start()
        except BaseException:
            release_slot(id(self))
            raise
        return self

    def stop(self, reason: str = "stopped by the user", wait: float = 0.0) -> bool:
        """Ask the run to stop: the step under way completes (in its own process the child then saves and exits).
        ``wait`` > 0: wait up to that many seconds for the run's end, an event (``join``): a stop takes a step and a
        checkpoint, longer on a slow machine. True once the run has ended (its slot free, its status final)."""
        with self._lock:
            if not self._stopped.is_set():
                self._stop_reason = reason
            self._stopped.set()
            if self._stop is not None:
                self._stop.request(reason)
            if self._proc is not None:
                self._proc.stop(reason)
        if wait > 0 and threading.current_thread() is not self._thread:  # its own thread never waits for itself
            return self.join(wait)
        return not self.running

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
                           [j.name for j in self.jobs], message, errors, dirs, probes, baselines, skills,
                           self.runtime.label)

    # -- worker thread: never calls st.* --
    def _callbacks(self, i: int, records: TrainingRecords) -> Callbacks:
        """What the thread listens to while job ``i`` trains (bertcore.training.callbacks); ``records``: where the
        training route keeps its probe rows and skills (bertcore.analysis.records)."""
        def on_start(ev):
            trainer = ev.trainer  # a resumed run starts with its history so far
            with self._lock:
                self.histories[i], self.run_dirs[i], self._status = trainer.history, ev.run_dir, "running"
                self._baselines[i] = trainer.unigram_baseline
                self.probe_objects[i] = records.probe
                self._probes[i] = list(records.probe_history)
                self._skills[i] = records.skills_history

        def on_eval(ev):
            with self._lock:
                self._probes[i] = list(records.probe_history)

        def on_step(ev):
            if time.monotonic() - self.last_poll > self.abandon_after and not self._stopped.is_set():
                with self._lock:
                    self._status = "abandoned"
                self.stop("abandoned (the tab was closed)")

        return Callbacks(start=on_start, step=on_step, eval=on_eval)

    def _spec(self, job: service.RunSpec, callbacks=None, records: TrainingRecords | None = None) -> service.RunSpec:
        """``job`` as ``service`` trains it here: this run's corpus and tokenizer, the server's device, the app's
        source label, and this thread's listeners."""
        if job.resume_from is not None:
            return replace(job, callbacks=callbacks, records=records, runtime=self.runtime)
        return replace(job, corpus=self.corpus, corpus_spec=self.corpus_spec,
                       tokenizer=self.tokenizer if self.tokenizer is not None else "word", source=TRAINED_LABEL,
                       callbacks=callbacks, records=records, runtime=self.runtime)

    def _run(self) -> None:
        failed = "the training thread ended unexpectedly"  # or the message of the error that ended the run
        try:
            if self.in_process:
                self._run_in_process()
            else:
                self._run_in_thread()
            last = next((d for d, b in zip(reversed(self.run_dirs), reversed(self.results)) if b is not None), None)
            if last is not None and self.on_end is not None and self._status != "error":
                self.on_end(last)
            failed = None
        except Exception as e:  # noqa: BLE001 - shown to the user as a message, never a traceback
            failed = str(e) if isinstance(e, BertcoreError) else f"training failed: {type(e).__name__}: {e}"
        finally:
            # The end, in this order: the slot is free before the status is final and the thread ends, so whoever
            # sees the end (a poll, stop(wait=...), join) can start the next training at once.
            release_slot(id(self))
            with self._lock:
                if failed is not None:
                    self._status, self._message = "error", failed
                elif self._status not in ("abandoned", "error"):
                    self._status = "stopped" if self._stopped.is_set() else "finished"
                self._finished = time.monotonic()

    def _run_in_thread(self) -> None:
        torch.set_num_threads(1)
        lower_this_threads_priority(self.nice)
        for i, job in enumerate(self.jobs):
            if self._stopped.is_set():
                break
            stop = StopSignal()
            with self._lock:
                self._job, self._status, self._stop = i, "preparing", stop
                if self._stopped.is_set():
                    stop.request(self._stop_reason)
            records = TrainingRecords()
            spec = self._spec(job, self._callbacks(i, records), records)
            if spec.resume_from is not None:
                result = service.resume(spec.resume_from, stop=stop, callbacks=spec.callbacks, runtime=spec.runtime,
                                        records=records)
            else:
                result = service.train(spec, parent=self._parent(), stop=stop)
            self._finish_job(i, result, records)
            if self._errors[i]:
                break

    # -- the same in a child process (bertcore.jobs.worker): this thread only relays its events --
    def _run_in_process(self) -> None:
        folder = Path(tempfile.mkdtemp(prefix="bertx-job-"))
        try:
            worker.write_job(folder, [self._spec(job) for job in self.jobs], self._parent(), nice=self.nice,
                             runtime=self.runtime)
            with self._lock:
                if self._stopped.is_set():
                    return
                proc = self._proc = worker.TrainingProcess(folder)
            said_why = False
            for ev in proc.events():
                said_why = self._on_event(ev) or said_why
                if time.monotonic() - self.last_poll > self.abandon_after and not self._stopped.is_set():
                    with self._lock:
                        self._status = "abandoned"
                    self.stop("abandoned (the tab was closed)")
            rc = proc.wait()
            if not said_why:
                why = proc.crash_text()
                raise RuntimeError(f"the training process ended unexpectedly (exit code {rc})"
                                   + (f": {why}" if why else ""))
        finally:
            with self._lock:
                self._proc = None
            shutil.rmtree(folder, ignore_errors=True)

    def _on_event(self, ev: dict) -> bool:
        """Apply one event of the child to this run's records; True once the child said how it ended."""
        kind, i = ev.get("ev"), int(ev.get("job", 0) or 0)
        if kind == "job":
            with self._lock:
                self._job, self._status = i, "preparing"
        elif kind == "start":
            hist = History.pretraining()
            worker.sync_rows(hist, ev["history"])
            sk = ev.get("skills")
            skills = None
            if sk is not None:
                skills = History(sk["columns"], sk["eval_keys"])
                worker.sync_rows(skills, sk)
            with self._lock:
                self.histories[i], self.run_dirs[i], self._status = hist, Path(ev["run_dir"]), "running"
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
            self._finish_job_dir(i, Path(ev["run_dir"]), ev.get("error"))
        elif kind == "error":
            with self._lock:
                self._status, self._message = "error", str(ev.get("message"))
            return True
        return kind == "done"

    def _finish_job_dir(self, i: int, run_dir: Path, error) -> None:
        """Job ``i`` ended in its own process: its model as saved in ``run_dir`` (None if it has no checkpoint)."""
        try:
            bundle = load_checkpoint(run_dir)
        except BertcoreError as e:
            bundle, error = None, error or str(e)
        self._keep(i, bundle, run_dir, error)

    def _parent(self):
        return self.runs_dir if self.runs_dir is not None else runs.cli_runs_dir()

    def _finish_job(self, i: int, result, records: TrainingRecords) -> None:
        """Job ``i`` ended in this process's thread: the trainer's history, the run's records and model."""
        trainer = result.trainer
        with self._lock:
            self.histories[i] = trainer.history  # a resumed run's history replaced the first one
            self._probes[i] = list(records.probe_history)
            self._skills[i] = records.skills_history
        error = trainer.error or (result.reason if result.status == "failed" else None)
        self._keep(i, result.bundle, result.run_dir, error)  # the bundle's history is the trainer's, as saved

    def _keep(self, i: int, bundle, run_dir: Path, error) -> None:
        """Job ``i``'s end, either way: its model (named by its run: explorer.session.state.set_active), folder and error."""
        if bundle is not None:
            bundle.model.eval()
            bundle.name = bundle.name or run_dir.name
            bundle.run_dir = run_dir
        with self._lock:
            self._errors[i] = error
            self.results[i] = bundle
            self.run_dirs[i] = run_dir


def fmt_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    s = int(round(s))
    return f"{s // 60}:{s % 60:02d}"
