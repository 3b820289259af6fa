"""Derived data (probe results, feature tables, ...): kept beside the runs, never inside them, keyed by content.

A number computed from a run's weights is cached under ``<runs root>/derived/<key>/<name>``, where ``key`` is the
sha256 of the weights file it was computed from. Every session finds it (the owner, a viewer of a read-only link,
a copy of the run) and none writes into a run folder, so a run's files and bytes are its owner's alone. The
folder is capped (env BERTCORE_MAX_DERIVED_MB, default 256): past the cap the least recently used entries go.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import threading
from pathlib import Path

from bertcore.io.checkpoint import atomic_write
from bertcore import settings
from bertcore.settings import runs_root

DERIVED_DIR = "derived"
_HASHES: dict[tuple, str] = {}
_LOCK = threading.Lock()


def max_derived_mb() -> float:
    """Disk the derived-data cache may use in MB (env BERTCORE_MAX_DERIVED_MB, default 256)."""
    return settings.number("BERTCORE_MAX_DERIVED_MB")


def root() -> Path:
    return runs_root() / DERIVED_DIR


def content_key(path: str | Path) -> str | None:
    """sha256 of a file's bytes (computed once per path, size and mtime); None when it cannot be read."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return None
    stamp = (os.path.realpath(p), st.st_size, st.st_mtime_ns)
    with _LOCK:
        hit = _HASHES.get(stamp)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    try:
        with p.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    key = h.hexdigest()
    with _LOCK:
        _HASHES[stamp] = key
    return key


def read(key: str | None, name: str) -> bytes | None:
    """The cached bytes of ``name`` for content ``key`` (None: not cached). A hit marks the entry as used."""
    if key is None:
        return None
    p = root() / key / name
    try:
        data = p.read_bytes()
    except OSError:
        return None
    try:
        os.utime(p.parent)
    except OSError:
        pass
    return data


def write(key: str | None, name: str, data: bytes) -> None:
    """Cache ``data`` as ``name`` for content ``key`` (atomically), then keep the folder within its cap. A full or
    read-only disk only costs the cache."""
    if key is None:
        return
    try:
        d = root() / key
        d.mkdir(parents=True, exist_ok=True)
        atomic_write(d / name, data)
        _evict(max_derived_mb() * 2**20)
    except OSError:
        pass


def _evict(cap_bytes: float) -> None:
    base = root()
    entries = []
    for d in base.iterdir() if base.is_dir() else ():
        if d.is_dir():
            size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
            entries.append((d.stat().st_mtime, size, d))
    total = sum(s for _, s, _ in entries)
    for _, size, d in sorted(entries):
        if total <= cap_bytes:
            break
        shutil.rmtree(d, ignore_errors=True)
        total -= size
