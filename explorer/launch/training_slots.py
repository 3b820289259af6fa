"""The server's training slots and limits, shared by every background job of the explorer (pretraining runs,
fine-tune comparisons, SAE jobs): how many may run at once, how long an unpolled one lives, its priority,
whether a training runs in its own process, and on which device. No streamlit here.
"""
from __future__ import annotations

import os
import threading


import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported
from bertcore import settings
from bertcore.errors import ConfigError
from bertcore.training.device import Runtime, resolve_runtime
from explorer.i18n import ntr, using


def abandon_seconds() -> float:
    """Seconds without a poll after which a training thread stops itself (env BERTCORE_ABANDON_SECONDS)."""
    return settings.number("BERTCORE_ABANDON_SECONDS")


def training_nice() -> int:
    """Niceness of a training (env BERTCORE_TRAINING_NICE, default 5, 0 = as the server). Pages then win the CPU
    when both want it: a class keeps quick pages while trainings use most of what is left (nice 10 left them too
    little once the pages needed less, docs/BENCH-HISTORY.md "One torch thread for the pages")."""
    return settings.whole("BERTCORE_TRAINING_NICE")


def lower_this_threads_priority(nice: int) -> None:
    """Linux: setpriority on a thread id changes only that thread. Elsewhere (or if refused) nothing happens."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), nice))
    except OSError:
        pass


def own_process() -> bool:
    """Whether a training runs in its own process (env BERTCORE_TRAINING_PROCESS, default 1; 0 = a thread of the
    server). Its own process has its own interpreter lock, so a class's page scripts cannot starve it
    (docs/BENCH-HISTORY.md, "Trainings in their own processes")."""
    return settings.flag("BERTCORE_TRAINING_PROCESS")


def training_runtime() -> Runtime:
    """Where the app's trainings run: env BERTCORE_TRAINING_DEVICE, ``auto`` (default: the GPU when torch sees one,
    ``cuda:0``, else the CPU), ``cpu`` or ``cuda``; precision ``auto`` (bf16 on a GPU that supports it, else fp32).
    Every training of the server shares that one GPU (each is a process of its own, with its own CUDA context). On
    a GPU machine, asking the GPU for bf16 support starts CUDA in the server process once."""
    name = settings.device("BERTCORE_TRAINING_DEVICE")  # ConfigError naming the variable for a name not offered
    # BERTCORE_DETERMINISTIC=1: every training as `train --deterministic` (bertcore.training.determinism)
    det = settings.flag("BERTCORE_DETERMINISTIC")
    try:
        return resolve_runtime(name, "auto", deterministic=det)
    except ConfigError as e:
        raise ConfigError(f"BERTCORE_TRAINING_DEVICE={name}: {e}") from None


def max_trainings() -> int:
    """Concurrent trainings allowed in this server process (env BERTCORE_MAX_TRAININGS, default 2)."""
    return settings.whole("BERTCORE_MAX_TRAININGS")


# ----------------------------------------------------------------------------- runner
class ServerBusy(RuntimeError):
    """Raised by TrainingRun.start when the process-wide cap on trainings is reached (``running`` of ``cap``); its
    text is English, a page shows ``busy_message`` in the session's language."""

    def __init__(self, running: int, cap: int):
        with using("en"):
            super().__init__(_busy_text(running, cap))
        self.running, self.cap = running, cap


def busy_message(e: ServerBusy) -> str:
    """The one Server busy message, in the session's language (the slots are the server's: trainings and studies)."""
    return _busy_text(e.running, e.cap)


def _busy_text(running: int, cap: int) -> str:
    return ntr("Server busy: {n} training running (the limit is {cap}, set by BERTCORE_MAX_TRAININGS). Try again in "
               "a minute.", "Server busy: {n} trainings running (the limit is {cap}, set by BERTCORE_MAX_TRAININGS). "
               "Try again in a minute.", running, cap=cap)


_SLOT_LOCK = threading.Lock()
_RUNNING: set[int] = set()


def running_trainings() -> int:
    with _SLOT_LOCK:
        return len(_RUNNING)


def acquire_slot(run_id: int) -> None:
    with _SLOT_LOCK:
        n, cap = len(_RUNNING), max_trainings()
        if n >= cap:
            raise ServerBusy(n, cap)
        _RUNNING.add(run_id)


def release_slot(run_id: int) -> None:
    with _SLOT_LOCK:
        _RUNNING.discard(run_id)
