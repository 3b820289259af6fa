"""Results shared by every session of this server, keyed by the object they were computed from.

A class of 30 opens the same pages with the same shared model (the untrained default, MiniLM, a run folder
several students opened), and each new session would otherwise recompute the same held-out batches, baseline
metrics and attributions (the load test found them to be most of the Predict page's work). ``memo(owner, key,
compute)`` keeps ``compute()``'s result with ``owner`` (a model or a tokenizer) in a weak map: when the owner
is garbage-collected its results go too, so an id reused by a later object can never return a stale result.

Only pure functions of (owner, key) may be memoised here: the owner must not change afterwards (models in use
are in eval mode and never trained in place) and the key must hold every other input.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable

PER_OWNER = 16  # results kept per owner (least recently used dropped first)

_lock = threading.Lock()
_memo: "weakref.WeakKeyDictionary[Any, OrderedDict]" = weakref.WeakKeyDictionary()


def memo(owner: Any, key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per (owner, key) in this process; later calls, from any session, get the same object.

    Two sessions asking at once may both compute (the lock is not held while computing); the first result stays.
    """
    with _lock:
        cache = _memo.get(owner)
        if cache is not None and key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = compute()
    with _lock:
        cache = _memo.setdefault(owner, OrderedDict())
        if key in cache:
            return cache[key]
        cache[key] = value
        while len(cache) > PER_OWNER:
            cache.popitem(last=False)
    return value
