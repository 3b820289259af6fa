"""At most a few page scripts of this server process run at once; the others wait their turn on a semaphore.

Why: Streamlit's event loop (one thread) sends every session's messages, and it yields once per message. Each time,
it has to win the interpreter lock back from the page scripts running meanwhile. With a handful of page scripts busy
at once, a page's many messages waited in the queue *after* its script had finished, and every page that finished
meanwhile waited with it: the class's whole-server stalls (docs/BENCH-HISTORY.md, "The class's stalls: messages
waiting for the event loop").

A script that waits here waits on a semaphore, not for the interpreter lock, so the event loop competes with at
most ``page_slots()`` scripts. The pages' total work is the same (one interpreter lock runs one script at a time
anyway); it is done in turn instead of in slices of the server's switch interval, and the finished pages'
messages go out at once.

app.py takes a slot after the client caps (a refused run's wait holds none) and around the page itself. A fragment's
own reruns (a training's progress every second) are not counted: they are small and must not wait behind a page.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from bertcore import settings

MAX_WAIT = 10.0  # a script that waited this long runs anyway: one stuck script can never hold up the server

_made = threading.Lock()
_semaphore: threading.BoundedSemaphore | None = None
_size = -1  # the semaphore's size (0: no limit); read once per process, as the switch interval is


def page_slots() -> int:
    """Page scripts that may run at once (env BERTCORE_PAGE_SLOTS, default 2; 0 = no limit)."""
    return settings.whole("BERTCORE_PAGE_SLOTS")


def semaphore() -> threading.BoundedSemaphore | None:
    """This process's semaphore (None: no limit), made at its first page; ConfigError when the setting is not a
    whole number."""
    global _semaphore, _size
    with _made:
        if _size < 0:
            _size = page_slots()
            _semaphore = threading.BoundedSemaphore(_size) if _size > 0 else None
        return _semaphore


@contextlib.contextmanager
def page_slot(max_wait: float = MAX_WAIT) -> Iterator[bool]:
    """Hold one of the slots while the block runs (True), or run without one (False) when none came free within
    ``max_wait`` seconds or there is no limit. Released however the block ends (st.rerun, st.stop, an error)."""
    sem = semaphore()
    got = sem is not None and sem.acquire(timeout=max_wait)
    try:
        yield got
    finally:
        if got:
            sem.release()


def reset() -> None:
    """Read BERTCORE_PAGE_SLOTS again at the next page (tests)."""
    global _semaphore, _size
    with _made:
        _semaphore, _size = None, -1
