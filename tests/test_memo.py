"""explorer.session.memo: results shared across sessions, keyed weakly by the model or tokenizer they came from."""
from __future__ import annotations

import gc
import weakref

from explorer.session import memo as m


class Owner:  # any weak-referenceable object, as a model or tokenizer is
    pass


def test_computes_once_per_owner_and_key_and_forgets_with_the_owner():
    calls = []
    a, b = Owner(), Owner()
    first = m.memo(a, ("k", 1), lambda: calls.append("a1") or [1])
    assert m.memo(a, ("k", 1), lambda: calls.append("again") or [2]) is first  # the same object, not recomputed
    assert m.memo(b, ("k", 1), lambda: calls.append("b1") or [3]) == [3]  # another owner: its own result
    assert m.memo(a, ("k", 2), lambda: calls.append("a2") or [4]) == [4]
    assert calls == ["a1", "b1", "a2"]
    assert m.held(a) and m.held(b)
    n_owners = len(m._memo)
    gone = weakref.ref(a)
    del a
    gc.collect()
    # a's results went with it: the memo kept no strong reference (other tests' owners may go at the same
    # gc.collect, so count nothing but these two)
    assert gone() is None
    assert len(m._memo) <= n_owners - 1
    assert m.held(b)[("k", 1)] == [3]


def test_an_unhashable_owner_is_kept_by_identity():
    class Frozen:  # a dataclass with eq=True (a trace) has no hash
        __hash__ = None

    o, calls = Frozen(), []
    first = m.memo(o, ("view", 1), lambda: calls.append(1) or [1])
    assert m.memo(o, ("view", 1), lambda: calls.append(2) or [2]) is first and calls == [1]
    assert m.memo(Frozen(), ("view", 1), lambda: calls.append(3) or [3]) == [3]


def test_keeps_at_most_per_owner_results_of_a_kind_dropping_the_least_recent():
    o, calls = Owner(), []
    m.memo(o, ("default view", 0), lambda: calls.append("view") or "view")
    for i in range(m.PER_OWNER + 1):
        m.memo(o, ("typed", i), lambda i=i: calls.append(i) or i)
    typed = [k for k in m.held(o) if k[0] == "typed"]
    assert len(typed) == m.PER_OWNER and ("typed", 0) not in typed
    m.memo(o, ("typed", 0), lambda: calls.append("recomputed") or 0)
    assert calls[-1] == "recomputed"
    # another kind of the same owner kept its result: many typed texts do not push a page's default view out
    assert m.memo(o, ("default view", 0), lambda: calls.append("view again") or "x") == "view"
    assert "view again" not in calls


def test_an_owner_collected_while_the_memo_is_locked_does_not_deadlock():
    """The collector may run (and drop an owner) at any allocation, also inside memo's locked section."""
    o = Owner()
    o.self = o  # a cycle: only the cyclic collector frees it
    m.memo(o, ("k",), lambda: 1)
    n = len(m._memo)
    del o
    with m._lock:
        gc.collect()  # the owner's weakref callback takes the lock again in this thread
    assert len(m._memo) <= n - 1


def test_figures_are_kept_frozen_alone_or_in_a_tuple():
    import plotly.graph_objects as go
    import pytest

    from explorer.figures.plotly_dict import FrozenFigure
    owner = Owner()
    fig = m.memo(owner, ("fig",), lambda: go.Figure(go.Bar(y=[1, 2])))
    pair = m.memo(owner, ("pair",), lambda: (go.Figure(go.Bar(y=[3])), "caption", go.Figure()))
    rows = m.memo(owner, ("rows",), lambda: [1, 2])
    assert isinstance(fig, FrozenFigure) and list(fig.data[0].y) == [1, 2]
    assert isinstance(pair, tuple) and isinstance(pair[0], FrozenFigure) and pair[1] == "caption"
    assert isinstance(pair[2], FrozenFigure) and rows == [1, 2]
    assert m.memo(owner, ("fig",), lambda: None) is fig
    with pytest.raises(TypeError):
        fig.update_layout(title="changed by one session")
