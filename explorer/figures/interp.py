"""Pure builders for the logit lens and activation patching views (Logit lens & patching page). No streamlit;
numbers come from ``bertcore.analysis.lens`` and ``bertcore.analysis.patching``. Layers are numbered as the JSON
numbers them (0 = embedding output, l = after layer l); heads from 1 on screen, as on the other maps."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from explorer.figures.inspect import thinned, token_labels
from explorer.i18n import tr


def layer_names(n: int) -> list[str]:
    """Row names of the lens and patching maps: the embedding output, then after each layer."""
    return [tr("embeddings (0)")] + [tr("layer {i}", i=i) for i in range(1, n)]


def lens_table(top: Sequence[Sequence[tuple[str, float]]]) -> pd.DataFrame:
    """Layers x top-k table for one [MASK]: cell = "word (probability)", layer 0 first."""
    k = max((len(c) for c in top), default=0)
    rows = [[f"{t} ({p:.3f})" for t, p in cands] + [""] * (k - len(cands)) for cands in top]
    df = pd.DataFrame(rows, columns=[f"#{i + 1}" for i in range(k)])
    df.insert(0, tr("layer"), layer_names(len(top)))
    return df


def word_curve_figure(word: str, ranks: Sequence[int], probs: Sequence[float]) -> go.Figure:
    """The chosen word's probability (line) and rank (hover, right axis, log scale) over the layers."""
    x = list(range(len(probs)))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=list(probs), mode="lines+markers", name=tr("probability"),
                             hovertemplate=tr("layer") + " %{x}<br>p %{y:.4f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=list(ranks), mode="lines+markers", name=tr("rank"), yaxis="y2",
                             line=dict(dash="dot"), hovertemplate=tr("layer") + " %{x}<br>rank %{y}<extra></extra>"))
    fig.update_layout(
        title=tr("'{word}' over the layers", word=word), height=300, margin=dict(l=10, r=10, t=40, b=10),
        xaxis=dict(title=tr("layer (0 = embeddings)"), dtick=1),
        yaxis=dict(title=tr("probability"), rangemode="tozero"),
        yaxis2=dict(title=tr("rank (1 = top)"), overlaying="y", side="right", type="log", autorange="reversed"),
        legend=dict(orientation="h", y=-0.25))
    return fig


def _diverging(z: np.ndarray, x: list, y: list, title: str, colorbar: str, hover: str) -> go.Figure:
    finite = np.abs(z[np.isfinite(z)])
    lim = max(1.0, float(finite.max())) if finite.size else 1.0
    fig = go.Figure(go.Heatmap(
        z=z.astype(np.float32), x=x, y=y, zmin=-lim, zmax=lim, colorscale="RdBu", reversescale=True,
        text=[["" if not np.isfinite(v) else f"{v:.2f}" for v in row] for row in z],
        texttemplate="%{text}" if z.size <= 400 else None, textfont=dict(size=9),
        colorbar=dict(title=colorbar, thickness=12), hovertemplate=hover))
    fig.update_layout(title=title or None, height=min(900, 140 + 30 * len(y)),
                      xaxis=dict(type="category", tickangle=-60, tickvals=thinned(x, 60)),
                      yaxis=dict(type="category", autorange="reversed"), margin=dict(l=10, r=10, t=40, b=10))
    return fig


def patch_figure(effect: np.ndarray, tokens: Sequence[str], positions: Sequence[int], readout_pos: int | None = None,
                 title: str = "") -> go.Figure:
    """Layer x position map of the normalised patching effect (0 = A's answer, 1 = B's); tokens of A on x; the
    readout position outlined."""
    labels = token_labels(tokens)
    x = [labels[p] for p in positions]
    z = np.asarray(effect, dtype=np.float64)
    fig = _diverging(z, x, layer_names(z.shape[0]), title, tr("effect"),
                     "%{y}<br>" + tr("position") + " %{x}<br>" + tr("effect") + " %{z:.3f}<extra></extra>")
    if readout_pos is not None and readout_pos in positions:
        c = list(positions).index(readout_pos)
        fig.add_shape(type="rect", x0=c - 0.5, x1=c + 0.5, y0=-0.5, y1=z.shape[0] - 0.5,
                      line=dict(color="black", width=2))
    return fig


def head_patch_figure(effect: np.ndarray, title: str = "") -> go.Figure:
    """Layer x head map of the normalised effect of patching one head's output (layers and heads from 1)."""
    z = np.asarray(effect, dtype=np.float64)
    L, H = z.shape
    return _diverging(z, [f"H{h + 1}" for h in range(H)], [f"L{i + 1}" for i in range(L)], title, tr("effect"),
                      "%{y} %{x}<br>" + tr("effect") + " %{z:.3f}<extra></extra>")
