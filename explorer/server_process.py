"""The server process's own tuning, once at start-up: its torch threads, its interpreter switch interval, its
garbage collector, and the optimizer import paid in the background. No streamlit here; app.py calls it."""
from __future__ import annotations

import gc
import sys
import threading

import torch

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported
from bertcore import settings


def server_threads() -> int:
    """torch's intra-op threads for the server's own work, the pages' forwards (env BERTCORE_SERVER_THREADS,
    default 1). Each page script is a thread of its own: with more than one, every torch op of every session
    starts a team of OpenMP threads, and a class's sessions and the trainings' processes then fight for the cores
    (docs/BENCH-HISTORY.md, "One torch thread for the pages")."""
    return settings.whole("BERTCORE_SERVER_THREADS")


def switch_interval() -> float:
    """Seconds a Python thread of the server may hold the interpreter lock while others wait (env
    BERTCORE_SWITCH_INTERVAL, default 0.001; Python's own is 0.005). Every torch op lets go of the lock and must
    win it back: beside a class's busy page scripts a forward of a few hundred ops waited up to the full interval
    for each (docs/BENCH-HISTORY.md, "One torch thread for the pages")."""
    return settings.number("BERTCORE_SWITCH_INTERVAL")


GC_THRESHOLD0 = 10_000  # allocations between young collections (Python's own: 700)


def _quiet_collector() -> None:
    """The cyclic garbage collector's full passes stop every thread of the server: with a class's sessions, often,
    most of it walking the half million objects of torch, Streamlit and plotly that live
    as long as the process. ``gc.freeze`` sets those aside (they are made before the first page, and are never
    garbage), so a full pass walks only what the sessions made; fewer young passes promote less (docs/BENCH-HISTORY.md,
    "One torch thread for the pages"). Env BERTCORE_GC_FREEZE=0 keeps Python's defaults."""
    if not settings.flag("BERTCORE_GC_FREEZE"):
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
    """The first torch optimizer in a process lazily imports torch._dynamo, which is slow: pay it at
    start-up, in the background."""
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
