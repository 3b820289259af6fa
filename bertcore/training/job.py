"""One background job: what the app's training, the fine-tune comparison, the label sweep and the SAE jobs share.

A job is started once, runs ``work()`` in a plain thread (which never touches a UI), and ends in one of five ways:
finished, stopped (someone asked), abandoned (nobody polled it for ``abandon_after`` seconds: its tab was closed),
or error (the message says why; a traceback never reaches the user). Its state is a few plain values behind a
lock: ``status``, ``message``, ``progress()`` and whatever result the subclass keeps. With a ``state_dir`` the
job keeps that state on disk as ``job.json`` (atomically, at every change of status), so a page opened after a
reload or a server restart can say how the job ended; ``read_state`` reads it back, and a job whose process is
gone reads as stopped.

The end is an event, in this order: ``on_exit`` (e.g. the server-wide training slot is given back), then the final
status, then the thread ends. So whoever sees the end (``join``, ``stop(wait=...)``, a poll) can start the next job
at once. A subclass writes ``work()`` and, where it has one, ``progress()``; it calls ``set_status("running")``
when the real work begins and watches ``stop_signal`` (a ``StopSignal``) between its steps.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

from bertcore.errors import BertcoreError
from bertcore.io.checkpoint import atomic_write
from bertcore.training.drive import STOPPED_BY_USER, StopSignal
from bertcore.training.runs import now, pid_alive

JOB_FILE = "job.json"
LIVE = ("preparing", "running")  # the statuses of a job that has not ended
INTERRUPTED = "interrupted (the process that ran it ended)"


class BackgroundJob:
    """start / stop / join, status, message, progress and ``job.json`` of one job run in a thread."""

    kind = "job"  # names the thread and job.json's "kind"
    abandoned_reason = "abandoned (the tab was closed)"  # the stop reason when nobody polls any more

    def __init__(self, abandon_after: float | None = None, state_dir: str | Path | None = None):
        self.abandon_after = None if abandon_after is None else float(abandon_after)  # None: never abandoned
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.stop_signal = StopSignal()
        self._lock = threading.Lock()
        self._status, self._message = "idle", None
        self._thread: threading.Thread | None = None
        self._on_exit = None
        self._started = 0.0
        self._finished: float | None = None  # monotonic time the job ended (explorer's live registry reads it)
        self.last_poll = time.monotonic()

    # -- what a subclass writes --
    def work(self) -> None:
        raise NotImplementedError

    def progress(self) -> float:
        """0..1 of the job's work."""
        return 0.0

    def failure(self, e: Exception) -> str:
        """The message an exception that ended ``work`` becomes."""
        return str(e) if isinstance(e, BertcoreError) else f"{self.kind} failed: {type(e).__name__}: {e}"

    def on_stop(self, reason: str) -> None:
        """Called by ``stop`` after the stop signal is set (a training also tells its child process)."""

    # -- control, from any thread --
    def start(self, on_exit=None):
        """Run ``work`` in a new thread; ``on_exit()`` runs when it ends, before the final status is set."""
        self._on_exit = on_exit
        self._started = self.last_poll = time.monotonic()
        self.set_status("preparing")
        self._thread = threading.Thread(target=self._main, name=f"bx-{self.kind}-{id(self):x}", daemon=True)
        self._thread.start()
        return self

    def stop(self, reason: str = STOPPED_BY_USER, wait: float = 0.0) -> bool:
        """Ask the job to stop after its current step (the first reason given is kept). ``wait`` > 0: wait up to
        that many seconds for its end. True once the job has ended (``on_exit`` done, status final)."""
        self.stop_signal.request(reason)
        self.on_stop(reason)
        if wait > 0 and threading.current_thread() is not self._thread:  # its own thread never waits for itself
            return self.join(wait)
        return not self.running

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def heartbeat(self) -> None:
        """A UI polled the job: it is still watched."""
        self.last_poll = time.monotonic()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def status(self) -> str:
        return self._status

    @property
    def message(self):
        return self._message

    @property
    def elapsed(self) -> float:
        end = self._finished if self._finished is not None else time.monotonic()
        return max(0.0, end - self._started) if self._started else 0.0

    def set_status(self, status: str, message=None) -> None:
        with self._lock:
            self._status = status
            if message is not None:
                self._message = message
        self.keep()

    def state(self) -> dict:
        """What ``job.json`` holds."""
        msg = self._message
        return {"kind": self.kind, "status": self._status, "message": None if msg is None else str(msg),
                "progress": round(float(self.progress()), 4), "elapsed": round(self.elapsed, 3),
                "pid": os.getpid(), "updated": now()}

    def keep(self) -> None:
        """Write ``job.json`` into ``state_dir`` (a full disk is not the job's failure: the file keeps its last version)."""
        if self.state_dir is None:
            return
        with contextlib.suppress(OSError):
            self.state_dir.mkdir(parents=True, exist_ok=True)
            atomic_write(self.state_dir / JOB_FILE, json.dumps(self.state(), ensure_ascii=False))

    # -- the thread --
    def _main(self) -> None:
        failed = None
        done = threading.Event()
        if self.abandon_after is not None:
            threading.Thread(target=self._watch, args=(done,), name=f"bx-{self.kind}-watch", daemon=True).start()
        try:
            self.work()
        except Exception as e:  # noqa: BLE001 - shown to the user as a message, never a traceback
            failed = self.failure(e)
        finally:
            done.set()
            if self._on_exit is not None:
                with contextlib.suppress(Exception):
                    self._on_exit()
            with self._lock:
                if failed is not None:
                    self._status, self._message = "error", failed
                elif self._status != "error":
                    reason = self.stop_signal.reason
                    self._status = ("abandoned" if reason == self.abandoned_reason else
                                    "stopped" if self.stop_signal.is_set() else "finished")
                self._finished = time.monotonic()
            self.keep()

    def _watch(self, done: threading.Event) -> None:
        """The heartbeat: nobody polling for ``abandon_after`` seconds means the tab was closed."""
        while not done.wait(0.1):
            if not self.stop_signal.is_set() and time.monotonic() - self.last_poll > self.abandon_after:
                self.set_status("abandoned")
                self.stop(self.abandoned_reason)
                return


def read_state(folder: str | Path) -> dict | None:
    """``job.json`` of ``folder`` (None when there is none or it is damaged). A job that had not ended but whose
    process is gone (a server restart) reads as stopped, with why."""
    try:
        data = json.loads((Path(folder) / JOB_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid = data.get("pid")
    if data.get("status") in LIVE and not (pid == os.getpid() or (isinstance(pid, int) and pid_alive(pid))):
        data.update(status="stopped", message=INTERRUPTED)
    return data
