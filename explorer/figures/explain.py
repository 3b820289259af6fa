"""Pure plotly figures for "why it predicts that" (Predict page): attribution token strips and the head-importance
map. No streamlit; numbers come from ``bertcore.analysis.explain`` and ``bertcore.analysis.ablation``."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from explorer.figures import plotly_dict
from explorer.figures.inspect import thinned, token_labels
from explorer.i18n import mark, tr

METHOD_LABELS = {"rollout": mark("attention rollout"), "grad_x_input": mark("gradient × input"),
                 "integrated_gradients": mark("integrated gradients")}
METRIC_LABELS = {"d_mlm_loss": mark("Δ held-out MLM loss"), "d_mlm_acc": mark("Δ held-out MLM accuracy"),
                 "d_nsp_loss": mark("Δ held-out NSP loss"), "d_nsp_acc": mark("Δ held-out NSP accuracy")}


def token_strip_figure(tokens: Sequence[str], scores: dict, position: int | None = None, title: str = "") -> go.Figure:
    """One row per method, one cell per token, coloured by the score divided by the row's largest |score|.

    Rows are scaled separately (the methods have different units: rollout weights, log-probability shares), so
    colours compare tokens within a method; the cell text and the hover give the raw score. ``position`` (the
    explained [MASK] or [CLS]) is outlined.
    """
    labels = token_labels(tokens)
    names = list(scores)
    raw = np.array([np.asarray(scores[n], dtype=np.float64) for n in names])  # (M, T)
    scale = np.abs(raw).max(axis=1, keepdims=True)
    scale[scale == 0] = 1.0
    z = (raw / scale).astype(np.float32)
    rows = [tr(METHOD_LABELS[n]) if n in METHOD_LABELS else n for n in names]
    heat = dict(type="heatmap", z=z, x=labels, y=rows, zmin=-1.0, zmax=1.0, colorscale=plotly_dict.colorscale("RdBu"),
                reversescale=True, customdata=raw.astype(np.float32), text=[[f"{v:.2g}" for v in r] for r in raw],
                texttemplate="%{text}", textfont=dict(size=9),
                colorbar=dict(title=plotly_dict.title(tr("score / max|score|")), thickness=12),
                hovertemplate="%{y}<br>" + tr("token") + " %{x}<br>" + tr("score") + " %{customdata:.4f}<extra></extra>")
    layout = dict(height=120 + 48 * len(rows), xaxis=dict(type="category", tickangle=-60, tickvals=thinned(labels, 60)),
                  yaxis=dict(autorange="reversed", type="category"),
                  margin=dict(l=10, r=10, t=40 if title else 10, b=10))
    if position is not None and 0 <= position < len(labels):
        layout["shapes"] = [dict(type="rect", x0=position - 0.5, x1=position + 0.5, y0=-0.5, y1=len(rows) - 0.5,
                                 line=dict(color="black", width=2))]
    if title:
        layout["title"] = plotly_dict.title(title)
    return plotly_dict.figure([heat], layout)


def importance_figure(rows: Sequence[dict], n_layers: int, n_heads: int, metric: str = "d_mlm_loss",
                      off: Sequence[tuple[int, int]] = ()) -> go.Figure:
    """Layers x heads map of one ablation metric (Michel et al. 2019 §3), numbered from 1; switched-off heads
    (0-based pairs in ``off``) are marked with a cross. Diverging colours centred on 0."""
    z = np.full((n_layers, n_heads), np.nan, dtype=np.float32)
    for r in rows:
        z[int(r["layer"]), int(r["head"])] = float(r[metric])
    lim = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 1.0
    lim = lim or 1.0
    name = tr(METRIC_LABELS[metric]) if metric in METRIC_LABELS else metric
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"H{h + 1}" for h in range(n_heads)], y=[f"L{i + 1}" for i in range(n_layers)],
        zmin=-lim, zmax=lim, colorscale="RdBu", reversescale=metric.endswith("loss"),
        texttemplate="%{z:+.3f}", colorbar=dict(title=name, thickness=12),
        hovertemplate="%{y} %{x}<br>" + tr("{metric} when off:", metric=name) + " %{z:+.4f}<extra></extra>",
    ))
    if off:
        fig.add_trace(go.Scatter(
            x=[f"H{h + 1}" for _, h in off], y=[f"L{i + 1}" for i, _ in off], mode="markers", name=tr("switched off"),
            marker=dict(symbol="x-thin", size=22, line=dict(width=3, color="black")), hoverinfo="skip"))
    fig.update_layout(
        title=tr("{metric} when one head is off", metric=name), height=max(240, 50 * n_layers + 110),
        yaxis=dict(autorange="reversed", type="category"), xaxis=dict(type="category"), showlegend=False,
        margin=dict(l=10, r=10, t=40, b=10),
    )
    return fig
