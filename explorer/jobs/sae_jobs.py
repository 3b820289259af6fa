"""SAE training in the background for the Features page (no streamlit here: the thread never calls ``st.*``).

An ``SAEJob`` runs ``bertcore.analysis.sae_runs.train_run_sae`` (one SAE) or ``saes_over_training`` (one per chosen
saved step) in a plain ``threading.Thread`` with one torch thread, at a lower priority than the pages. Its state is
plain values behind a lock; the page polls ``snapshot()`` from a fragment. The SAEs land in the run directory, so
a reload (a new session) finds them on disk; a job still running is found again through ``job_for(workspace)``
(one job per workspace at a time, and at most ``training_slots.max_trainings()`` in the server). An SAE trains in
about half a minute and its result is kept on disk, so a job whose tab was closed simply finishes.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from bertcore.analysis.sae_runs import SAESpec, saes_over_training, train_run_sae
from bertcore.errors import BertcoreError
from bertcore.message import Message
from explorer.jobs import training_slots

STAGES = ("data", "train", "measure", "label", "done")


@dataclass
class JobSnapshot:
    status: str  # running | finished | stopped | error
    kind: str  # "one" | "over_training"
    stage: str
    fraction: float  # of the current SAE's stage "train"; the overall progress is ``progress``
    done: int  # SAEs finished
    total: int  # SAEs to train
    elapsed: float
    message: str | None
    result: list  # the SAE folders written
    spec: SAESpec

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def progress(self) -> float:
        """0..1 over all the job's SAEs (each: data 10%, training 70%, measuring and labelling 20%)."""
        within = {"data": 0.0, "train": 0.1 + 0.7 * self.fraction, "measure": 0.8, "label": 0.9, "done": 1.0}
        part = within.get(self.stage, 0.0)
        return min(1.0, (self.done + (part if self.done < self.total else 0.0)) / max(1, self.total))


class SAEJob:
    def __init__(self, run_dir: str | Path, spec: SAESpec, over_training: bool = False):
        self.run_dir, self.spec, self.over_training = Path(run_dir), spec, over_training
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._status, self._stage, self._fraction = "running", "data", 0.0
        self._done, self._total = 0, 1
        self._message: str | None = None
        self._result: list = []
        self._started = time.monotonic()
        self._ended: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"bx-sae-{id(self):x}", daemon=True)

    def start(self) -> SAEJob:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def snapshot(self) -> JobSnapshot:
        with self._lock:
            end = self._ended if self._ended is not None else time.monotonic()
            return JobSnapshot(self._status, "over_training" if self.over_training else "one", self._stage,
                               self._fraction, self._done, self._total, end - self._started, self._message,
                               list(self._result), self.spec)

    # -- worker thread: never calls st.* --
    def _one(self, stage: str, fraction: float) -> None:
        with self._lock:
            self._stage, self._fraction = stage, float(fraction)

    def _many(self, done: int, total: int, stage: str, fraction: float) -> None:
        with self._lock:
            self._done, self._total, self._stage, self._fraction = done, total, stage, float(fraction)

    def _run(self) -> None:
        torch.set_num_threads(1)
        training_slots.lower_this_threads_priority(training_slots.training_nice())
        try:
            if self.over_training:
                with self._lock:
                    self._total = 5
                dirs = saes_over_training(self.run_dir, self.spec, progress=self._many, stop=self._stop.is_set)
            else:
                dirs = [train_run_sae(self.run_dir, self.spec, progress=self._one, stop=self._stop.is_set)]
            with self._lock:
                self._result = [str(d) for d in dirs]
                self._status = "stopped" if self._stop.is_set() else "finished"
                self._done = self._total if not self._stop.is_set() else self._done
        except BertcoreError as e:
            with self._lock:
                self._status, self._message = "error", e.args[0] if e.args and isinstance(e.args[0], Message) else str(e)
        except Exception as e:  # noqa: BLE001 - shown to the user as a message, never a traceback
            with self._lock:
                self._status = "error"
                self._message = Message("training the SAE failed: {kind}: {err}", kind=type(e).__name__, err=str(e))
        finally:
            with self._lock:
                self._ended = time.monotonic()


_JOBS_LOCK = threading.Lock()
_JOBS: dict[str, SAEJob] = {}


class JobBusy(BertcoreError):
    """This workspace already trains an SAE, or the server trains as many as it allows (the message says which)."""


def start_job(workspace: str, run_dir: str | Path, spec: SAESpec, over_training: bool = False) -> SAEJob:
    """Start an SAE job for ``workspace``; JobBusy when it has one running or when ``max_trainings()`` SAE jobs
    (BERTCORE_MAX_TRAININGS, as for trainings) run in this server already."""
    with _JOBS_LOCK:
        old = _JOBS.get(workspace)
        if old is not None and old.snapshot().running:
            raise JobBusy(Message("this workspace is already training an SAE; wait for it (or press Stop)"))
        running, cap = sum(j.snapshot().running for j in _JOBS.values()), training_slots.max_trainings()
        if running >= cap:
            raise JobBusy(Message("Server busy: {n} SAEs are training (the limit is {cap}, set by "
                                  "BERTCORE_MAX_TRAININGS). Try again in a minute.", n=running, cap=cap))
        job = SAEJob(run_dir, spec, over_training)
        _JOBS[workspace] = job
    return job.start()


def job_for(workspace: str) -> SAEJob | None:
    """The latest SAE job of ``workspace`` (running or ended)."""
    with _JOBS_LOCK:
        return _JOBS.get(workspace)


def forget(workspace: str) -> None:
    with _JOBS_LOCK:
        _JOBS.pop(workspace, None)
