"""Figures of the Probes page (pure builders, no streamlit): what each layer knows and when.

* ``probe_heatmaps_figure``: held-out probe accuracy as a layer x training-step heat map, with the control task's
  accuracy (Hewitt & Liang 2019, §3) beside it on the same colour scale.
* ``probe_layers_figure``: accuracy, control accuracy and chance per layer at one step.

Layer 0 is the embedding output and layer l the output of encoder layer l (as in the CLI's JSON).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.i18n import tr

COLORSCALE = "Viridis"


def layer_names(n_layers: int) -> list[str]:
    """Row labels: "embeddings", "layer 1", ... (layer 0 is the embedding output)."""
    return [tr("embeddings")] + [tr("layer {n}", n=k) for k in range(1, n_layers)]


def probe_heatmaps_figure(accuracy: np.ndarray, control: np.ndarray, steps: Sequence[int], title: str = "",
                          step: int | None = None) -> go.Figure:
    """Two heat maps, probe accuracy and control accuracy, each (layers, steps) in [0, 1]; ``step`` is marked."""
    accuracy = np.asarray(accuracy, dtype=float)
    control = np.asarray(control, dtype=float)
    rows = layer_names(accuracy.shape[0])
    cols = [str(s) if s >= 0 else tr("final") for s in steps]  # -1: a run without saved steps (its checkpoint)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=(tr("probe accuracy (held out)"), tr("control task accuracy")))
    hover = tr("step %{x}<br>%{y}<br>accuracy %{z:.3f}") + "<extra></extra>"
    for k, z in enumerate((accuracy, control), 1):
        fig.add_trace(go.Heatmap(z=z, x=cols, y=rows, coloraxis="coloraxis", hovertemplate=hover,
                                 text=np.round(z, 2), texttemplate="%{text}" if z.size <= 200 else None),
                      row=1, col=k)
        fig.update_xaxes(title_text=tr("training step"), type="category", row=1, col=k)
        if step is not None and str(step) in cols:
            i = cols.index(str(step))  # the replay slider's step: a frame around its column
            fig.add_vrect(x0=i - 0.5, x1=i + 0.5, line=dict(color="white", width=3), fillcolor="rgba(0,0,0,0)",
                          row=1, col=k)
    fig.update_layout(coloraxis=dict(colorscale=COLORSCALE, cmin=0.0, cmax=1.0,
                                     colorbar=dict(title=dict(text=tr("accuracy")))),
                      title=title or None, height=max(260, 70 * len(rows) + 140), margin=dict(l=10, r=10, t=70, b=10))
    return fig


def probe_layers_figure(accuracy: Sequence[float], control: Sequence[float], chance: float, control_chance: float,
                        title: str = "") -> go.Figure:
    """Accuracy and control accuracy per layer (lines), with both chance levels (dashed)."""
    x = layer_names(len(accuracy))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=list(accuracy), mode="lines+markers", name=tr("probe accuracy"),
                             line=dict(color="#1f77b4", width=3)))
    fig.add_trace(go.Scatter(x=x, y=list(control), mode="lines+markers", name=tr("control task accuracy"),
                             line=dict(color="#ff7f0e")))
    fig.add_trace(go.Scatter(x=x, y=[chance] * len(x), mode="lines", name=tr("chance (majority class)"),
                             line=dict(color="#1f77b4", dash="dash", width=1)))
    fig.add_trace(go.Scatter(x=x, y=[control_chance] * len(x), mode="lines", name=tr("control chance"),
                             line=dict(color="#ff7f0e", dash="dash", width=1)))
    fig.update_layout(title=title or None, yaxis=dict(range=[0, 1.02], title=tr("held-out accuracy")),
                      xaxis=dict(type="category"), height=340, margin=dict(l=10, r=10, t=50, b=10),
                      legend=dict(orientation="h", y=-0.2))
    return fig
