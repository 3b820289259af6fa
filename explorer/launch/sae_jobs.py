"""SAE training in the background for the Features page (no streamlit here: the thread never calls ``st.*``).

An ``SAEJob`` runs ``bertcore.analysis.sae_runs.train_run_sae`` (one SAE) or ``saes_over_training`` (one per chosen
saved step) as a background job (``bertcore.training.job.BackgroundJob``) with one torch thread, at a lower priority than the pages. Its state is
plain values behind a lock; the page polls ``snapshot()`` from a fragment. The SAEs land in the run directory, so
a reload (a new session) finds them on disk; a job still running is found again through ``job_for(workspace)``
(one job per workspace at a time, and at most ``training_slots.max_trainings()`` in the server). An SAE is a short
job and its result is kept on disk, so a job whose tab was closed simply finishes.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from bertcore.analysis.sae_runs import SAESpec, saes_over_training, train_run_sae
from bertcore.errors import BertcoreError
from bertcore.io.sae_io import SAES_DIR
from bertcore.training.job import LIVE, BackgroundJob
from bertcore.message import Message
from explorer.launch import training_slots

STAGES = ("data", "train", "measure", "label", "done")


@dataclass
class JobSnapshot:
    status: str  # preparing | running | finished | stopped | error
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
        return self.status in LIVE

    @property
    def progress(self) -> float:
        """0..1 over all the job's SAEs (each: data 10%, training 70%, measuring and labelling 20%)."""
        within = {"data": 0.0, "train": 0.1 + 0.7 * self.fraction, "measure": 0.8, "label": 0.9, "done": 1.0}
        part = within.get(self.stage, 0.0)
        return min(1.0, (self.done + (part if self.done < self.total else 0.0)) / max(1, self.total))


class SAEJob(BackgroundJob):
    """One SAE (or one per saved step) of ``run_dir``, trained as a background job
    (``bertcore.training.job.BackgroundJob``); its state is kept in ``run_dir/saes/job.json``."""

    kind = "SAE training"

    def __init__(self, run_dir: str | Path, spec: SAESpec, over_training: bool = False):
        super().__init__(state_dir=Path(run_dir) / SAES_DIR)  # never abandoned: an SAE is quick and kept on disk
        self.run_dir, self.spec, self.over_training = Path(run_dir), spec, over_training
        self._stage, self._fraction = "data", 0.0
        self._done, self._total = 0, 5 if over_training else 1
        self._result: list = []

    def snapshot(self) -> JobSnapshot:
        self.heartbeat()
        with self._lock:
            return JobSnapshot(self._status, "over_training" if self.over_training else "one", self._stage,
                               self._fraction, self._done, self._total, self.elapsed, self._message,
                               list(self._result), self.spec)

    def progress(self) -> float:
        return self.snapshot().progress

    def failure(self, e: Exception):
        if isinstance(e, BertcoreError):
            return e.args[0] if e.args and isinstance(e.args[0], Message) else str(e)
        return Message("training the SAE failed: {kind}: {err}", kind=type(e).__name__, err=str(e))

    # -- the job's thread: never calls st.* --
    def _one(self, stage: str, fraction: float) -> None:
        with self._lock:
            self._stage, self._fraction = stage, float(fraction)

    def _many(self, done: int, total: int, stage: str, fraction: float) -> None:
        with self._lock:
            self._done, self._total, self._stage, self._fraction = done, total, stage, float(fraction)

    def work(self) -> None:
        torch.set_num_threads(1)
        training_slots.lower_this_threads_priority(training_slots.training_nice())
        self.set_status("running")
        stop = self.stop_signal.is_set
        if self.over_training:
            dirs = saes_over_training(self.run_dir, self.spec, progress=self._many, stop=stop)
        else:
            dirs = [train_run_sae(self.run_dir, self.spec, progress=self._one, stop=stop)]
        with self._lock:
            self._result = [str(d) for d in dirs]
            if not stop():
                self._done = self._total


_JOBS_LOCK = threading.Lock()
_JOBS: dict[str, SAEJob] = {}


class JobBusy(BertcoreError):
    """This workspace already trains an SAE."""


def start_job(workspace: str, run_dir: str | Path, spec: SAESpec, over_training: bool = False) -> SAEJob:
    """Start an SAE job for ``workspace``; JobBusy when it has one running. The job takes one of the server's
    training slots (BERTCORE_MAX_TRAININGS, shared with trainings and studies): ``training_slots.ServerBusy``, the
    one *Server busy* message (``busy_message``), when they are all taken."""
    with _JOBS_LOCK:
        old = _JOBS.get(workspace)
        if old is not None and old.snapshot().running:
            raise JobBusy(Message("this workspace is already training an SAE; wait for it (or press Stop)"))
        job = SAEJob(run_dir, spec, over_training)
        training_slots.acquire_slot(id(job))
        try:
            job.start(on_exit=lambda: training_slots.release_slot(id(job)))
        except BaseException:
            training_slots.release_slot(id(job))
            raise
        _JOBS[workspace] = job
        return job  # started under the lock: a second Start sees it running


def job_for(workspace: str) -> SAEJob | None:
    """The latest SAE job of ``workspace`` (running or ended)."""
    with _JOBS_LOCK:
        return _JOBS.get(workspace)


def forget(workspace: str) -> None:
    with _JOBS_LOCK:
        _JOBS.pop(workspace, None)
