"""The step loop every trainer shares (pretraining's ``Trainer``, fine-tuning's ``FineTuner``).

``run_steps`` steps a trainer until its configured number of steps, ``n`` more, a ``stop()`` or a NaN stop, and
fires ``step`` (and ``eval`` after an evaluated step) on the trainer's ``Callbacks``
(``bertcore.training.callbacks``). While it runs, torch uses ``config.num_threads`` threads: the count is
process-wide, so the baseline comes back when the last running loop ends.

A trainer may offer two more things, and pretraining's does: ``running_ahead(target)``, a context in which the
batches of the coming steps are made ahead (bertcore.training.prefetch; it ends, with its thread, however the loop
ends), and ``flush()``, which brings rows whose numbers are still on the GPU into the history when the loop ends.
A step's row may be a ``PendingRow`` (bertcore.training.history): reading its numbers costs a host read, so the
loop never does; an evaluated step always returns a plain dict.
"""
from __future__ import annotations

import contextlib
import math
import threading

import pandas as pd
import torch


class Stoppable:
    """``stop()`` from any thread and ``stopped`` for the step loop: what every trainer shares. A subclass makes
    ``self._stop = threading.Event()`` in its ``__init__``."""

    _stop: threading.Event

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Ask ``run`` to return after the current step (thread-safe)."""
        self._stop.set()


_THREADS_LOCK = threading.Lock()
_THREADS_STATE = {"active": 0, "baseline": None}


def run_steps(trainer, n: int | None = None) -> pd.DataFrame:
    """``n`` more steps (default: until ``config.steps``), or until ``stop()`` or ``done``; ``finalize()`` when
    stopped early. Returns the history as a DataFrame."""
    target = trainer.config.steps if n is None else min(trainer.config.steps, trainer.step_count + int(n))
    eval_key = trainer.history.eval_keys[-1]
    ahead = getattr(trainer, "running_ahead", None)
    acquire_threads(trainer.config.num_threads)
    try:
        with ahead(target) if ahead is not None else contextlib.nullcontext():
            while not trainer.done and trainer.step_count < target and not trainer.stopped:
                row = trainer.step()
                trainer.callbacks.fire("step", trainer, row=row)
                if isinstance(row, dict) and math.isfinite(row.get(eval_key, math.nan)):
                    trainer.callbacks.fire("eval", trainer, row=row)
        if hasattr(trainer, "flush"):
            trainer.flush()
        if trainer.stopped and not trainer.done:
            trainer.finalize()
    finally:
        release_threads()
    return trainer.history.frame()


def acquire_threads(n: int) -> None:
    with _THREADS_LOCK:
        if _THREADS_STATE["active"] == 0:
            _THREADS_STATE["baseline"] = torch.get_num_threads()
        _THREADS_STATE["active"] += 1
        torch.set_num_threads(int(n))


def release_threads() -> None:
    with _THREADS_LOCK:
        _THREADS_STATE["active"] -= 1
        if _THREADS_STATE["active"] == 0 and _THREADS_STATE["baseline"]:
            torch.set_num_threads(_THREADS_STATE["baseline"])
