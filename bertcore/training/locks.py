"""File locks that hold across server processes: one training per run, one writer of a workspace's files.

Several server processes (replicas behind a proxy, docs/REPLICAS.md) and CLI trainings share one runs folder.
Two of them must never train into the same run directory: a training started on one replica and a Resume
pressed on another would interleave their checkpoints. So whoever trains a run holds an exclusive
``flock`` on ``<run>/.lock`` for as long as it trains (``hold``); a second ``hold`` fails at once with
``RunBusy``, and ``is_held`` tells a reader that the run is alive somewhere. Read-modify-writes of a
workspace's own files (workspace.json) take ``<workspace>/.lock`` for a moment (``exclusive``).

Why flock: the kernel drops the lock when its process dies, SIGKILL included, so a crashed replica leaves no
stale lock behind, and nothing has to guess from a pid (a pid means nothing on another machine). Open file
descriptions conflict even within one process, so two threads of one server exclude each other too. On a shared
filesystem the lock must reach every machine: NFSv4 (Linux emulates flock with its byte-range locks), CephFS and
GlusterFS do; a lock held by a machine that died is released when the server's lease on it expires (NFSv4: 90 s
by default).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import threading
import time
from pathlib import Path

from bertcore.errors import InputError
from bertcore.message import Message

LOCK_FILE = ".lock"
_BUSY = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)
_HELD_LOCK = threading.Lock()
_HELD: dict[str, int] = {}  # run directory -> the descriptor of the lock this process holds on it


class RunBusy(InputError):
    """Another process (or thread) trains this run now; the message says who and what to do."""


def _open(directory: Path) -> int:
    return os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


def _key(directory: Path) -> str:
    return str(Path(directory).resolve())


def held_here(directory: str | Path) -> bool:
    """True while this process holds the run's lock (a resume that is setting up, or a training)."""
    with _HELD_LOCK:
        return _key(Path(directory)) in _HELD


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "unknown process"


def hold(directory: str | Path) -> Path:
    """Take the run's exclusive lock now, held until ``release(directory)`` (or until this process ends); RunBusy
    when another process or thread holds it. Returns the directory."""
    directory = Path(directory)
    fd = _open(directory)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = _read_holder(fd)
        os.close(fd)
        if e.errno in _BUSY:
            raise RunBusy(Message("{run} is being trained right now ({holder}); wait until that training ends or "
                                  "stop it, then try again", run=directory.name, holder=holder)) from None
        raise
    try:  # who holds it, for the message a second process gets (the lock itself is the flock)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    except OSError:
        pass  # a full disk: the lock holds all the same
    with _HELD_LOCK:
        _HELD[_key(directory)] = fd
    return directory


def release(directory: str | Path) -> None:
    """Give back the lock ``hold`` took on the run (nothing when this process does not hold it)."""
    with _HELD_LOCK:
        fd = _HELD.pop(_key(Path(directory)), None)
    if fd is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def is_held(directory: str | Path) -> bool | None:
    """True when some process holds the run's lock (it trains), False when none does, None when the run has
    no lock file (written before locks existed, or never trained): then only run.json's pid can tell."""
    try:
        fd = os.open(Path(directory) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        return True if e.errno in _BUSY else None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive(directory: str | Path, timeout: float = 10.0):
    """Hold ``<directory>/.lock`` for a short read-modify-write (waits up to ``timeout`` s for another holder).
    InputError when it stays busy that long."""
    fd = _open(Path(directory))
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in _BUSY:
                    raise
                if time.monotonic() > deadline:
                    raise InputError(Message("{path} stayed locked by another server process for {s} s; try again",
                                             path=Path(directory).name, s=f"{timeout:g}")) from None
                time.sleep(0.02)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
