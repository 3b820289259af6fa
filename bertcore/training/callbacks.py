"""One callback registry for every kind of training (pretraining, fine-tuning, a fine-tune comparison).

minGPT-style: a trainer owns a ``Callbacks`` and fires named events; whoever wants to know registers a function
for an event, and the function gets one ``Event``. The CLI's progress bar, the app's training thread, torchrun's
rank 0 and the run-directory writer (``bertcore.training.drive``) all listen the same way::

    start       the run directory exists and training begins         (trainer, run_dir)
    step        after every optimizer step                           (trainer, row)
    eval        after a step that ran a held-out evaluation          (trainer, row)
    evaluated   inside ``evaluate()``: held-out metrics measured     (trainer, row = the metrics)
    done        the trainer stopped changing the weights (last step,  (trainer)
                a stop's ``finalize``, a failure)
    checkpoint  after the run directory was rewritten                (trainer, run_dir, meta = run.json)
    end         training ended (finished, stopped or failed)         (trainer, run_dir, meta)

``step`` and ``eval`` come from the step loop (``run_steps``), so a trainer run without a run directory (a
notebook, a benchmark) fires them too; ``evaluated`` and ``done`` from the trainer itself (what a run records
besides its curve listens to them: bertcore.analysis.records); the other three from ``drive``. A callback may call
``event.trainer.stop()``; the loop ends after that step.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVENTS = ("start", "step", "eval", "evaluated", "done", "checkpoint", "end")


@dataclass
class Event:
    name: str
    trainer: Any
    row: dict | None = None  # step, eval: the history row of that step
    run_dir: Path | None = None  # start, checkpoint, end
    meta: dict | None = None  # checkpoint, end: run.json as written


class Callbacks:
    """Functions per event, called in the order they were added. ``Callbacks(step=f, end=g)`` adds one each."""

    def __init__(self, **handlers: Callable[[Event], None]):
        self._handlers: dict[str, list[Callable[[Event], None]]] = {e: [] for e in EVENTS}
        for name, fn in handlers.items():
            self.on(name, fn)

    def on(self, event: str, fn: Callable[[Event], None]) -> Callbacks:
        if event not in self._handlers:
            raise ValueError(f"unknown training event {event!r}; use one of {', '.join(EVENTS)}")
        self._handlers[event].append(fn)
        return self

    def fire(self, event: str, trainer, **info) -> None:
        handlers = self._handlers[event]
        if handlers:
            ev = Event(event, trainer, **info)
            for fn in list(handlers):
                fn(ev)

    def copy(self) -> Callbacks:
        """A registry with the same functions (a trainer keeps its own, so a caller's stays as it gave it)."""
        new = Callbacks()
        for e, fns in self._handlers.items():
            new._handlers[e] = list(fns)
        return new
