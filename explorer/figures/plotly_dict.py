"""Plotly figures built from plain dicts, without plotly's per-property validation.

Validating a figure property by property was most of a page's time in the server, and the same figure written as
the dict that validation produces costs almost nothing (docs/BENCH-HISTORY.md, "What a page run costs the
server"). The builders that pages call on every typed sentence build their figures here; each is
checked to be exactly what plotly's validation makes of it (tests/test_plotly_dict.py), so the browser gets the
same figure. Named colour scales are written out as plotly's validation writes them (a list of stops).

``freeze_figure(fig)`` is for a figure that many runs show (``explorer.session.memo`` freezes every figure it keeps):
``st.plotly_chart`` asks a figure for its dict at every call, and plotly answers with a deep copy whose arrays it
encodes again; a frozen figure answers with the dict it made once.
"""
from __future__ import annotations

import functools

import plotly.graph_objects as go


def figure(data: list[dict], layout: dict) -> go.Figure:
    """A ``go.Figure`` around ``data`` (trace dicts with their ``type``) and ``layout``, not validated."""
    return go.Figure(dict(data=data, layout=layout), _validate=False)


class FrozenFigure(go.Figure):
    """A figure that can no longer change: its dict (``to_dict``, what ``st.plotly_chart`` serialises) is made
    once and shared, read-only. Changing it raises TypeError instead of leaving that dict stale."""

    def to_dict(self) -> dict:
        return self._bx_dict

    def _refuse(self, *args, **kwargs):
        raise TypeError("this figure is shared by every session that shows it (explorer.session.memo): change a "
                        "copy, go.Figure(fig)")

    _restyle_child = _relayout_child = _update_child = add_traces = plotly_update = batch_update = _refuse

    @property
    def data(self):
        return go.Figure.data.fget(self)

    @data.setter
    def data(self, value):
        self._refuse()


def freeze_figure(fig: go.Figure) -> FrozenFigure:
    """``fig`` itself, frozen: from now on a FrozenFigure. Not a copy: copying a figure validates every property
    again, which cost ten times what freezing saves a chart."""
    if isinstance(fig, FrozenFigure):
        return fig
    if type(fig) is not go.Figure:
        raise TypeError(f"only a go.Figure can be frozen, not a {type(fig).__name__}")
    made = fig.to_dict()  # what st.plotly_chart makes of fig; its arrays already encoded
    fig.__class__ = FrozenFigure
    fig._bx_dict = made
    return fig


@functools.lru_cache(maxsize=32)
def _scale(name: str) -> tuple:
    return go.Heatmap(colorscale=name).colorscale  # what validation makes of the name, once per name


def colorscale(name: str) -> list[list]:
    """A named colour scale as the list of [position, colour] stops plotly's validation turns it into."""
    return [[p, c] for p, c in _scale(name)]


def title(text) -> dict:
    """A layout or axis title as validation writes it: ``{"text": ...}`` (leave the key out for no title)."""
    return {"text": text}
