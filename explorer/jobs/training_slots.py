"""The server's training slots and limits, shared by every background job of the explorer (pretraining runs,
fine-tune comparisons, SAE jobs): how many may run at once, how long an unpolled one lives, its priority,
whether a training runs in its own process, and on which device. No streamlit here.
"""
from __future__ import annotations

import gc
import os
import sys
import threading

import torch

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported
from bertcore.errors import ConfigError
from bertcore.settings import env_number
from bertcore.training.device import DEVICES, Runtime, resolve_runtime
from explorer.i18n import ntr, using


def abandon_seconds() -> float:
    """Seconds without a poll after which a training thread stops itself (env BERTCORE_ABANDON_SECONDS)."""
    return env_number("BERTCORE_ABANDON_SECONDS", 10, minimum=0.1)


def training_nice() -> int:
    """Niceness of a training (env BERTCORE_TRAINING_NICE, default 5, 0 = as the server). Pages then win the CPU
    when both want it: a class keeps quick pages while trainings use most of what is left (nice 10 left them too
    little once the pages needed less, docs/BENCH.md "One torch thread for the pages")."""
    return env_number("BERTCORE_TRAINING_NICE", 5, minimum=0, maximum=19, integer=True)


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
    server). Its own process has its own interpreter lock: beside a class of page scripts a thread got about a
    third of its solo speed, a process about four fifths (docs/BENCH.md, "Trainings in their own processes")."""
    return bool(env_number("BERTCORE_TRAINING_PROCESS", 1, minimum=0, maximum=1, integer=True))


def training_runtime() -> Runtime:
    """Where the app's trainings run: env BERTCORE_TRAINING_DEVICE, ``auto`` (default: the GPU when torch sees one,
    ``cuda:0``, else the CPU), ``cpu`` or ``cuda``; precision ``auto`` (bf16 on a GPU that supports it, else fp32).
    Every training of the server shares that one GPU (each is a process of its own, with its own CUDA context). On
    a GPU machine, asking the GPU for bf16 support starts CUDA in the server process once."""
    name = os.environ.get("BERTCORE_TRAINING_DEVICE", "auto").strip().lower() or "auto"
    if name not in DEVICES:
        raise ConfigError(f"BERTCORE_TRAINING_DEVICE={name!r} is unknown; set it to one of {', '.join(DEVICES)}")
    # BERTCORE_DETERMINISTIC=1: every training as `train --deterministic` (bertcore.training.determinism)
    det = bool(env_number("BERTCORE_DETERMINISTIC", 0, minimum=0, maximum=1, integer=True))
    try:
        return resolve_runtime(name, "auto", deterministic=det)
    except ConfigError as e:
        raise ConfigError(f"BERTCORE_TRAINING_DEVICE={name}: {e}") from None


def max_trainings() -> int:
    """Concurrent trainings allowed in this server process (env BERTCORE_MAX_TRAININGS, default 2)."""
    return env_number("BERTCORE_MAX_TRAININGS", 2, minimum=1, integer=True)


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


def server_threads() -> int:
    """torch's intra-op threads for the server's own work, the pages' forwards (env BERTCORE_SERVER_THREADS,
    default 1). Each page script is a thread of its own: with more than one, every torch op of every session
    starts a team of OpenMP threads, and a class's sessions and the trainings' processes then fight for the cores
    (docs/BENCH.md, "One torch thread for the pages")."""
    return env_number("BERTCORE_SERVER_THREADS", 1, minimum=1, maximum=64, integer=True)


def switch_interval() -> float:
    """Seconds a Python thread of the server may hold the interpreter lock while others wait (env
    BERTCORE_SWITCH_INTERVAL, default 0.001; Python's own is 0.005). Every torch op lets go of the lock and must
    win it back: beside a class's busy page scripts a forward of a few hundred ops waited up to the full interval
    for each, so a page heavy in torch (Predict's attributions) took seconds (docs/BENCH.md, "One torch thread
    for the pages")."""
    return env_number("BERTCORE_SWITCH_INTERVAL", 0.001, minimum=0.0001, maximum=0.1)


GC_THRESHOLD0 = 10_000  # allocations between young collections (Python's own: 700)


def _quiet_collector() -> None:
    """The cyclic garbage collector's full passes stop every thread of the server: with a class's sessions, about
    every 15 s for 0.3-0.6 s, most of it walking the half million objects of torch, Streamlit and plotly that live
    as long as the process. ``gc.freeze`` sets those aside (they are made before the first page, and are never
    garbage), so a full pass walks only what the sessions made; fewer young passes promote less (docs/BENCH.md,
    "One torch thread for the pages"). Env BERTCORE_GC_FREEZE=0 keeps Python's defaults."""
    if not env_number("BERTCORE_GC_FREEZE", 1, minimum=0, maximum=1, integer=True):
        return
    gc.collect()
    gc.freeze()
    _, g1, g2 = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD0, g1, g2)


_WARM = threading.Event()
_TUNED = threading.Event()


def tune_server_process() -> None:
    """Once per server process: its torch threads (``server_threads``), its switch interval (``switch_interval``)
    and its garbage collector (``_quiet_collector``). Process-wide, so app.py calls it only in a real server
    (a test process running the app through AppTest keeps its own settings)."""
    if _TUNED.is_set():
        return
    _TUNED.set()
    torch.set_num_threads(server_threads())
    sys.setswitchinterval(switch_interval())
    _quiet_collector()
    print(f"bertcore: server process tuned: {torch.get_num_threads()} torch thread(s), switch interval "
          f"{sys.getswitchinterval() * 1000:g} ms, {gc.get_freeze_count():,} objects set aside from the collector",
          file=sys.stderr, flush=True)


def warmup_optimizer() -> None:
    """The first torch optimizer in a process lazily imports torch._dynamo (~1.5 s): pay it at start-up, in the
    background."""
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
