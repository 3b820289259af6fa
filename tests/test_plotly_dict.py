"""Figures built as plain dicts (explorer.figures.plotly_dict) are exactly what plotly's validation makes of them.

Each builder below skips plotly's per-property validation for speed (the load test of a class). If a dict held
an invalid property, validating it raises; if it held a value in a form validation would change (a colour
scale's name, a bare title string), the validated figure's JSON differs from the one sent. Both fail here.
"""
from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from explorer.figures import forward as FF
from explorer.figures import plotly_dict


def _json(fig: go.Figure) -> dict:
    return json.loads(pio.to_json(fig, validate=False))


def assert_validated_equal(fig: go.Figure) -> None:
    """The figure as sent equals the figure plotly validates from the same dict."""
    assert _json(fig) == _json(go.Figure(fig.to_dict()))


def test_colorscale_is_what_validation_writes():
    for name in ("RdBu", "Viridis", "Blues"):
        assert plotly_dict.colorscale(name) == [list(s) for s in go.Heatmap(colorscale=name).colorscale]
    assert plotly_dict.title("x") == {"text": "x"}


def test_a_wrong_property_is_caught():
    bad = plotly_dict.figure([dict(type="heatmap", z=np.zeros((2, 2)), colorscale="RdBu")], {})
    with pytest.raises(AssertionError):
        assert_validated_equal(bad)  # a named scale: validation expands it, so the JSON differs
    with pytest.raises(ValueError):
        assert_validated_equal(plotly_dict.figure([dict(type="heatmap", zz=1)], {}))


@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (12, 64), (40, 40), (3, 200)])
def test_forward_figures(shape):
    rng = np.random.default_rng(sum(shape))
    m = rng.standard_normal(shape).astype(np.float32)
    if shape[1] > 1:
        m[0, 1] = -1e31  # a masked score: a gap
    rows, cols = [f"r{i}" for i in range(shape[0])], [f"c{i}" for i in range(shape[1])]
    for kw in (dict(), dict(prob=True), dict(blocks=3, title="t"), dict(head_cols=(0, 1), meta="concat 0 0 0")):
        for token_row in (0, None):
            assert_validated_equal(FF.stage_heatmap(m, rows, cols, token_row, **kw))
    for cur in (0, None):
        assert_validated_equal(FF.norms_figure(rows, list(np.abs(m[:, 0])), cur))
        assert_validated_equal(FF.strip_figure(rows, list(m), cur))


@pytest.mark.parametrize("title", ["", "[MASK] 1 (position 3)"])
def test_prediction_figures(title):
    from explorer.figures.explain import token_strip_figure
    from explorer.figures.inspect import fill_mask_figure, nsp_figure

    for cands in ([("a", 0.5), ("b", 0.25), ("[UNK]", 1e-5)], [("x", 1.0)]):
        assert_validated_equal(fill_mask_figure(cands, title))
    for p in (0.0, 0.3, 1.0):
        assert_validated_equal(nsp_figure(p, title))
    rng = np.random.default_rng(0)
    for n in (1, 5, 80):
        toks = ["[CLS]"] + [f"w{i}" for i in range(n)] + ["[SEP]"]
        scores = {k: rng.standard_normal(len(toks)) for k in ("rollout", "grad_x_input", "integrated_gradients")}
        for pos in (None, 1, 999):
            assert_validated_equal(token_strip_figure(toks, scores, pos, title))
        assert_validated_equal(token_strip_figure(toks, {"rollout": np.zeros(len(toks))}, 1, title))


def _heatmaps() -> go.Figure:
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=2, subplot_titles=("a", "b"))
    rng = np.random.default_rng(0)
    for c in range(2):
        fig.add_trace(go.Heatmap(z=rng.random((5, 4)), x=list("wxyz"), colorscale="Viridis"), 1, c + 1)
    fig.update_layout(title="two heads", height=300)
    return fig


def test_a_frozen_figure_is_charted_as_the_figure_it_froze():
    """st.plotly_chart's own spec (its proto, through AppTest) of the frozen figure equals the original's."""
    from streamlit.testing.v1 import AppTest

    def script():
        import streamlit as st

        from explorer.figures.plotly_dict import freeze_figure
        from tests.test_plotly_dict import _heatmaps
        st.plotly_chart(_heatmaps(), key="plain")
        shared = freeze_figure(_heatmaps())
        st.plotly_chart(shared, key="frozen")
        st.plotly_chart(shared, key="again")

    at = AppTest.from_function(script, default_timeout=60).run()
    assert not at.exception
    specs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    assert len(specs) == 3
    assert specs[0] == specs[1] == specs[2]
    assert specs[0]["data"][0]["z"]["shape"] == "5, 4" and specs[0]["layout"]["title"]["text"] == "two heads"


def test_a_frozen_figure_refuses_changes_and_a_copy_takes_them():
    fig = plotly_dict.freeze_figure(_heatmaps())
    assert plotly_dict.freeze_figure(fig) is fig
    before = _json(fig)
    for change in (lambda: fig.update_layout(height=500), lambda: fig.update_traces(zmin=0),
                   lambda: fig.data[0].update(zmax=2), lambda: setattr(fig.layout, "title", "x"),
                   lambda: fig.add_trace(go.Bar(y=[1])), lambda: setattr(fig, "data", [])):
        with pytest.raises(TypeError, match="shared by every session"):
            change()
    assert _json(fig) == before
    copy = go.Figure(fig)
    copy.update_layout(height=500)
    assert copy.layout.height == 500 and fig.layout.height == 300

