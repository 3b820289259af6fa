"""Plotly figures built from plain dicts, without plotly's per-property validation.

Validating a figure property by property costs 5–50 ms per figure in the server (the load test's profile of a
class: most of a page's time), while the same figure written as the dict that validation produces costs well
under a millisecond. The builders that pages call on every typed sentence build their figures here; each is
checked to be exactly what plotly's validation makes of it (tests/test_plotly_dict.py), so the browser gets the
same figure. Named colour scales are written out as plotly's validation writes them (a list of stops).
"""
from __future__ import annotations

import functools

import plotly.graph_objects as go


def figure(data: list[dict], layout: dict) -> go.Figure:
    """A ``go.Figure`` around ``data`` (trace dicts with their ``type``) and ``layout``, not validated."""
    return go.Figure(dict(data=data, layout=layout), _validate=False)


@functools.lru_cache(maxsize=32)
def _scale(name: str) -> tuple:
    return go.Heatmap(colorscale=name).colorscale  # what validation makes of the name, once per name


def colorscale(name: str) -> list[list]:
    """A named colour scale as the list of [position, colour] stops plotly's validation turns it into."""
    return [[p, c] for p, c in _scale(name)]


def title(text) -> dict:
    """A layout or axis title as validation writes it: ``{"text": ...}`` (leave the key out for no title)."""
    return {"text": text}
