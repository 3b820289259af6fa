"""Results shared by every session of this server, keyed by the object they were computed from.

A class of 30 opens the same pages with the same shared model (the untrained default, MiniLM, a run folder
several students opened), and each new session would otherwise recompute the same held-out batches, baseline
metrics, attributions, hidden states and figures (the load test found them to be most of the pages' work).
``memo(owner, key, compute)`` keeps ``compute()``'s result with ``owner`` (a model, a tokenizer, a trace), by
the owner's identity and weakly: when the owner is garbage-collected its results go too, so an id reused by a
later object can never return a stale result.

The first item of a key names its *kind* ("predict", "emb_fig", ...). Each kind of each owner keeps its own
``PER_OWNER`` most recent results, so that a hundred students' typed sentences (each new) cannot push the pages'
default views, which every student asks for, out of the memo.

Only pure functions of (owner, key) may be memoised here: the owner must not change afterwards (models in use
are in eval mode and never trained in place) and the key must hold every other input, the session's language
included for anything that holds shown text (a figure's titles). A memoised result is shared: the caller must
not change it (a plotly figure is only read by ``st.plotly_chart``). A figure, or a tuple or list of them, is kept
frozen (``explorer.figures.plotly_dict.freeze_figure``): serialised from a dict made once, and changing it raises.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable

import plotly.graph_objects as go

from explorer.figures.plotly_dict import freeze_figure
from explorer.i18n import language

PER_OWNER = 16  # results kept per owner and kind (least recently used dropped first)

# re-entrant: the garbage collector may drop an owner (and call _forget) while this thread holds the lock
_lock = threading.RLock()
_memo: dict[int, tuple[weakref.ref, dict[Any, OrderedDict]]] = {}  # id(owner) -> (its weak ref, kind -> results)


def _forget(owner_id: int, ref: weakref.ref) -> None:
    """The owner is being collected (its id is not free yet): drop its results."""
    if _lock is None:  # at interpreter exit this module's globals may already be gone
        return
    with _lock:
        if owner_id in _memo and _memo[owner_id][0] is ref:
            del _memo[owner_id]


def _caches(owner: Any) -> dict[Any, OrderedDict] | None:
    entry = _memo.get(id(owner))
    return entry[1] if entry is not None and entry[0]() is owner else None


def memo(owner: Any, key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per (owner, key) in this process; later calls, from any session, get the same object.

    Two sessions asking at once may both compute (the lock is not held while computing); the first result stays.
    """
    kind = key[0] if key else None
    with _lock:
        cache = (_caches(owner) or {}).get(kind)
        if cache is not None and key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = _freeze(compute())
    with _lock:
        caches = _caches(owner)
        if caches is None:
            oid = id(owner)
            caches = {}
            _memo[oid] = (weakref.ref(owner, lambda ref, oid=oid: _forget(oid, ref)), caches)
        cache = caches.setdefault(kind, OrderedDict())
        if key in cache:
            return cache[key]
        cache[key] = value
        while len(cache) > PER_OWNER:
            cache.popitem(last=False)
    return value


def _freeze(value: Any) -> Any:
    if type(value) is go.Figure:
        return freeze_figure(value)
    if type(value) in (tuple, list) and any(type(v) is go.Figure for v in value):
        return type(value)(freeze_figure(v) if type(v) is go.Figure else v for v in value)
    return value


def has(owner: Any, key: tuple) -> bool:
    """Whether ``memo(owner, key, ...)`` would answer without computing (a page can then show it at once)."""
    kind = key[0] if key else None
    with _lock:
        cache = (_caches(owner) or {}).get(kind)
        return cache is not None and key in cache


def held(owner: Any) -> dict:
    """(For tests and inspection) every key -> result held for ``owner`` now."""
    with _lock:
        return {k: v for cache in (_caches(owner) or {}).values() for k, v in cache.items()}


def memo_shown(owner: Any, key: tuple, compute: Callable[[], Any]) -> Any:
    """``memo`` for a result that holds text the session reads (a figure's titles, a table's headers): kept per
    language too."""
    return memo(owner, key + (language(),), compute)
