"""Driving a training to its end while its run directory stays current: the machinery every route shares.

``drive`` is the context in which the one step loop (``loop.run_steps``) steps anything Trainer-shaped
(pretraining's ``Trainer``, fine-tuning's ``FineTuner``) to its end, a ``StopSignal``, a NaN stop or Ctrl-C; it
keeps run.json's status lifecycle (running with this pid, then finished / stopped / failed with a reason), rewrites
the run directory at every held-out evaluation and fires ``start``, ``checkpoint`` and ``end`` on the trainer's
callbacks (``bertcore.training.callbacks``; the step loop fires ``step`` and ``eval``). A route says what one kind
of training keeps in its folder (``save``, ``metrics``, ``bundle``: pretraining's is its
``bertcore.analysis.records.TrainingRecords``, fine-tuning's a ``Route``, ``bertcore.finetune.route.FINETUNE``);
``open_run_dir`` is the one place a run directory is created. Layout of the folder: ``bertcore.training.runs``.
While it trains, ``drive`` holds the run's lock (``bertcore.training.locks``), so no other process or server replica
trains the same folder. A checkpoint that cannot be written (a full disk) ends the training as "failed" with the
reason; every file keeps its last complete version and the run resumes from there.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.training import locks, runs
from bertcore.training.loop import run_steps


STOPPED_BY_USER = Message("stopped by the user")  # the reason of a Stop button (study.json and run.json keep it)


class StopSignal(threading.Event):
    """A stop event that carries why: ``request("abandoned: the tab was closed")``."""

    reason: str | None = None

    def request(self, reason: str = STOPPED_BY_USER) -> None:
        if not self.is_set():
            self.reason = reason
        self.set()


@dataclass
class RunResult:
    run_dir: Path
    status: str  # finished | stopped | failed
    reason: str | None
    trainer: Any
    bundle: Any
    interrupted: bool = False  # Ctrl-C


@dataclass
class Route:
    """What one kind of training keeps in its run directory; ``drive`` does the rest (status, run.json, callbacks).

    ``save(trainer, run_dir, meta)`` writes every file but run.json, atomically (meta["status"] is "running" while
    it trains, the final status at the end); ``metrics(trainer)`` is run.json's "metrics"; a history row whose
    ``eval_key`` is finite is a held-out evaluation, after which the directory is rewritten; ``bundle(trainer,
    meta)`` is RunResult.bundle. Fine-tuning's route is ``bertcore.finetune.route.FINETUNE``."""

    save: Callable[[Any, Path, dict], None]
    metrics: Callable[[Any], dict]
    bundle: Callable[[Any, dict], Any]


def write_run_dir(trainer, run_dir: Path, meta: dict, route: Route) -> dict:
    """Rewrite the run directory for the trainer's current step (every file atomically, run.json last), then
    fire ``checkpoint``. OSError (a full disk ...) leaves every file as it was or new, run.json as it was."""
    route.save(trainer, run_dir, meta)
    meta.update(steps_done=int(trainer.step_count), metrics=route.metrics(trainer) or None, updated=runs.now())
    runs.write_run_json(run_dir, meta)
    trainer.callbacks.fire("checkpoint", trainer, run_dir=run_dir, meta=dict(meta))
    return meta


def record_write_failure(run_dir: Path, meta: dict, step: int, err: OSError) -> None:
    """The run directory could not be rewritten after ``step`` (a full disk, a quota, a share gone read-only):
    run.json says failed, why, and that it resumes from its last complete checkpoint (meta["steps_done"]).
    Nothing else is touched, so that checkpoint stays as it was; if even run.json cannot be written it keeps
    "running" and reads as interrupted once this process is gone, resumable all the same."""
    meta.update(status="failed", failure=runs.WRITE_FAILURE, updated=runs.now(),
                reason=Message("could not write the checkpoint after step {step} ({err}); the checkpoint of step "
                               "{saved} is kept: free disk space, then resume the run", step=int(step),
                               err=err.strerror or str(err), saved=int(meta.get("steps_done") or 0)))
    try:
        runs.write_run_json(run_dir, meta)
    except OSError:
        pass


@contextlib.contextmanager
def drive(trainer, run_dir: Path, meta: dict, stop: StopSignal | None, route, held: bool = False):
    """Keep ``run_dir`` current while the caller's block steps ``trainer`` (``loop.run_steps``) to its end, a stop,
    a NaN or Ctrl-C; yields the ``RunResult``, which holds the final status once the block is left::

        with drive(trainer, run_dir, meta, stop, route) as result:
            run_steps(trainer)

    A context, not a caller of the loop, so that the way from Start to ``Trainer.step`` is one call shorter and the
    loop stays the one every trainer shares. run.json says running (with this pid) from step 0, then finished /
    stopped / failed with a reason. ``trainer`` is anything Trainer-shaped, with ``finalize``, ``error`` and
    ``model``; ``route`` has ``save``, ``metrics`` and ``bundle`` (a ``Route``, or pretraining's
    ``TrainingRecords``). The run's lock is taken here unless the caller ``held`` it already (``RunBusy`` when
    another process trains it). A checkpoint that cannot be written stops the training: the run is "failed" with
    the reason and resumes from its last complete checkpoint; Ctrl-C in the block ends it "stopped" (resumable)."""
    stop = stop if stop is not None else StopSignal()
    if not held:
        locks.hold(run_dir)
    runs.mark_active(run_dir, True)
    result = RunResult(run_dir, "running", None, trainer, None)
    failed_write: list[tuple[int, OSError]] = []  # (step, error) of a write that failed

    def save() -> bool:
        try:
            write_run_dir(trainer, run_dir, meta, route)
        except OSError as e:
            failed_write.append((int(trainer.step_count), e))
            return False
        return True

    def after_step(ev) -> None:  # registered after the caller's, so every listener has seen the row
        if stop.is_set():
            ev.trainer.stop()

    def after_eval(ev) -> None:
        if not stop.is_set() and not ev.trainer.done and not save():
            ev.trainer.stop()  # nothing after this step could be kept

    try:
        meta.update(status="running", reason=None, failure=None, pid=os.getpid())
        if save():
            trainer.callbacks.fire("start", trainer, run_dir=run_dir)
            trainer.callbacks.on("step", after_step).on("eval", after_eval)
        if stop.is_set() or failed_write:
            trainer.stop()  # the block's loop takes no step
        try:
            yield result
        except KeyboardInterrupt:
            result.interrupted = True
            stop.request("interrupted (Ctrl-C)")
            try:
                trainer.finalize()
            except KeyboardInterrupt:
                pass
        except Exception as e:  # noqa: BLE001 - recorded in run.json, then re-raised for the caller
            meta.update(status="failed", reason=f"training failed: {type(e).__name__}: {e}")
            if not save():  # at least run.json says why, if it can be written
                with contextlib.suppress(OSError):
                    runs.write_run_json(run_dir, meta)
            raise
        if not failed_write:
            if trainer.error:
                status, reason = "failed", trainer.error
            elif trainer.step_count >= trainer.config.steps:
                status, reason = "finished", None
            else:
                status = "stopped"
                reason = f"{stop.reason or 'stopped'} at step {trainer.step_count}"
            meta.update(status=status, reason=reason)
            trainer.model.eval()
            save()
        if failed_write:
            trainer.model.eval()
            record_write_failure(run_dir, meta, *failed_write[0])
    finally:
        runs.mark_active(run_dir, False)
        if not held:
            locks.release(run_dir)
    trainer.callbacks.fire("end", trainer, run_dir=run_dir, meta=dict(meta))
    result.status, result.reason, result.bundle = meta["status"], meta["reason"], route.bundle(trainer, meta)


def drive_quietly(trainer, stop: StopSignal | None) -> RunResult:
    """``drive`` for the processes of a distributed run other than rank 0: train, write nothing."""
    if stop is not None:
        trainer.callbacks.on("step", lambda ev: ev.trainer.stop() if stop.is_set() else None)
    run_steps(trainer)
    return RunResult(Path(), "finished" if trainer.step_count >= trainer.config.steps else "stopped", trainer.error,
                     trainer, None)


def open_run_dir(run_dir: str | Path | None, parent: str | Path | None, name: str) -> Path:
    """The one place a run directory is created: ``run_dir``, or a new folder below ``parent`` (default
    ``runs.cli_runs_dir()``). InputError when ``run_dir`` is a file."""
    if run_dir is None:
        return runs.new_run_dir(parent if parent is not None else runs.cli_runs_dir(), name)
    d = Path(run_dir).expanduser()
    if d.exists() and not d.is_dir():
        raise InputError(Message("{path} exists and is a file; give a directory path", path=str(d)))
    d.mkdir(parents=True, exist_ok=True)
    return d
