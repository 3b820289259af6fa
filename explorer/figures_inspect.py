"""Pure plotly figure builders for the Inspect pages (Attention, Predict, Embeddings).

No streamlit here: every function takes numpy arrays / lists and returns a ``go.Figure`` (or numbers),
so the figures are unit-testable without a browser. Arrays are sent as float32 (compact base64 in
the plotly JSON).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from explorer.attention_stats import STAT_LABELS

COLORSCALE = "Viridis"


def token_labels(tokens: Sequence[str]) -> list[str]:
    """Unique axis labels ``"<position> <token>"`` (plotly merges repeated category names)."""
    return [f"{i} {t}" for i, t in enumerate(tokens)]


def grid_trace_index(layer: int, head: int, n_heads: int) -> int:
    """Index into ``fig.data`` of the heatmap for 0-based (layer, head) in ``attention_grid_figure``."""
    return layer * n_heads + head


def attention_grid_figure(
    attentions: np.ndarray,
    tokens: Sequence[str],
    zmax: float | None = None,
    width_px: int = 1100,
) -> go.Figure:
    """A layers x heads grid of attention heatmaps sharing ONE colour scale (``coloraxis``).

    ``attentions`` is ``[L, H, T, T]`` (query rows, key columns). Trace ``l*H + h`` holds head (l, h);
    its ``z`` is exactly ``attentions[l, h]``. Hover shows layer, head, query and key tokens and the weight.
    """
    A = np.asarray(attentions, dtype=np.float32)
    if A.ndim != 4:
        raise ValueError(f"attentions must be [L, H, T, T], got {A.shape}")
    L, H, T, _ = A.shape
    labels = token_labels(tokens)
    if len(labels) != T:
        raise ValueError(f"{len(labels)} tokens for attention of length {T}")
    gap = 0.12
    data = []
    layout: dict = {}
    annotations = []
    for li in range(L):
        for h in range(H):
            n = grid_trace_index(li, h, H) + 1
            suffix = "" if n == 1 else str(n)
            data.append(
                go.Heatmap(
                    z=A[li, h], x=labels, y=labels, coloraxis="coloraxis",
                    xaxis=f"x{suffix}", yaxis=f"y{suffix}", name=f"L{li + 1} H{h + 1}",
                    hovertemplate=(
                        f"layer {li + 1}, head {h + 1}<br>query %{{y}}<br>key %{{x}}"
                        "<br>weight %{z:.3f}<extra></extra>"
                    ),
                )
            )
            x0, x1 = h / H, (h + 1 - gap) / H
            y1, y0 = 1 - li / L, 1 - (li + 1 - gap) / L
            layout[f"xaxis{suffix}"] = dict(
                domain=[x0, x1], anchor=f"y{suffix}", showticklabels=False, showgrid=False,
                zeroline=False, ticks="",
            )
            layout[f"yaxis{suffix}"] = dict(
                domain=[y0, y1], anchor=f"x{suffix}", showticklabels=False, showgrid=False,
                zeroline=False, ticks="", autorange="reversed",
            )
            if li == 0:
                annotations.append(dict(
                    text=f"H{h + 1}", x=(x0 + x1) / 2, y=1.0, xref="paper", yref="paper",
                    yanchor="bottom", showarrow=False, font=dict(size=11),
                ))
        annotations.append(dict(
            text=f"L{li + 1}", x=-0.005, y=(y0 + y1) / 2, xref="paper", yref="paper",
            xanchor="right", showarrow=False, font=dict(size=11),
        ))
    cmax = float(np.nanmax(A)) if zmax is None and A.size else (zmax or 1.0)
    fig = go.Figure(data=data)
    fig.update_layout(
        **layout,
        coloraxis=dict(colorscale=COLORSCALE, cmin=0.0, cmax=cmax,
                       colorbar=dict(title="weight", thickness=12)),
        annotations=annotations,
        height=int(min(1000, max(300, L * width_px / max(H, 1) + 60))),  # about square cells
        margin=dict(l=40, r=10, t=30, b=10),
        showlegend=False,
    )
    return fig


def head_heatmap_figure(
    attn: np.ndarray,
    tokens: Sequence[str],
    title: str = "",
    zmax: float | None = None,
) -> go.Figure:
    """One head's ``[T, T]`` attention with token labels: query rows (y), key columns (x)."""
    A = np.asarray(attn, dtype=np.float32)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"attention must be [T, T], got {A.shape}")
    labels = token_labels(tokens)
    T = A.shape[0]
    fig = go.Figure(go.Heatmap(
        z=A, x=labels, y=labels, colorscale=COLORSCALE, zmin=0.0,
        zmax=float(zmax) if zmax is not None else (float(A.max()) if A.size else 1.0),
        colorbar=dict(title="weight", thickness=12),
        hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>",
    ))
    side = int(min(900, max(320, 22 * T + 140)))
    fig.update_layout(
        title=title or None, height=side,
        xaxis=dict(title="key (attended to)", tickangle=-60, side="top", type="category"),
        yaxis=dict(title="query (attending)", autorange="reversed", type="category"),
        margin=dict(l=10, r=10, t=90 if title else 70, b=10),
    )
    return fig


def stats_heatmap_figure(df: pd.DataFrame, stat: str, zmax: float | None = None) -> go.Figure:
    """A layers x heads heatmap of one column of ``attention_stats.head_stats``.

    The colour scale is absolute (0 to ``zmax``; 1 for the attention shares, the largest value for
    entropy unless given, e.g. log T), so small differences between heads are not blown up."""
    L, H = int(df["layer"].max()), int(df["head"].max())
    z = np.full((L, H), np.nan, dtype=np.float32)
    z[df["layer"].to_numpy() - 1, df["head"].to_numpy() - 1] = df[stat].to_numpy()
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"H{h}" for h in range(1, H + 1)], y=[f"L{i}" for i in range(1, L + 1)],
        colorscale=COLORSCALE, colorbar=dict(title=stat, thickness=12), zmin=0.0,
        zmax=float(zmax) if zmax is not None else (
            1.0 if stat != "entropy" else float(np.nanmax(z)) if np.isfinite(z).any() else 1.0),
        texttemplate="%{z:.2f}",
        hovertemplate="%{y} %{x}<br>" + STAT_LABELS.get(stat, stat) + ": %{z:.3f}<extra></extra>",
    ))
    fig.update_layout(
        title=STAT_LABELS.get(stat, stat), height=max(220, 45 * L + 90),
        yaxis=dict(autorange="reversed"), margin=dict(l=10, r=10, t=40, b=10),
    )
    return fig


# ---------------------------------------------------------------- PCA / embeddings

def pca(X: np.ndarray, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """PCA by SVD of the centred data. Returns ``(coords [N, k], explained_variance_ratio [k])``.

    Signs are fixed so that each component's largest-magnitude loading is positive (deterministic).
    If the data has fewer than ``k`` non-trivial directions the remaining coordinates are 0.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"PCA needs a non-empty [N, D] array, got {X.shape}")
    N, D = X.shape
    Xc = X - X.mean(axis=0, keepdims=True)
    U, S, Vt = np.linalg.svd(Xc, full_matrices=False)
    r = min(k, Vt.shape[0])
    comps = Vt[:r]
    signs = np.sign(comps[np.arange(r), np.abs(comps).argmax(axis=1)])
    signs[signs == 0] = 1.0
    comps = comps * signs[:, None]
    coords = np.zeros((N, k))
    coords[:, :r] = Xc @ comps.T
    var = S ** 2
    total = var.sum()
    ratio = np.zeros(k)
    if total > 0:
        ratio[:r] = var[:r] / total
    return coords, ratio


def embedding_scatter_figure(
    coords: np.ndarray,
    labels: Sequence[str],
    groups: Sequence[str],
    ratio: np.ndarray | None = None,
    title: str = "",
    show_text: bool = True,
    hover: Sequence[str] | None = None,
    group_colors: dict | None = None,
) -> go.Figure:
    """2-D scatter of PCA coordinates, one trace per colour group, points labelled with tokens.

    ``group_colors`` optionally fixes the colour of some groups (e.g. grey for background points)."""
    coords = np.asarray(coords, dtype=np.float32)
    labels = list(labels)
    groups = [str(g) for g in groups]
    hover = list(hover) if hover is not None else labels
    order = list(dict.fromkeys(groups))
    fig = go.Figure()
    for g in order:
        idx = np.array([i for i, gg in enumerate(groups) if gg == g], dtype=int)
        fig.add_trace(go.Scatter(
            x=coords[idx, 0], y=coords[idx, 1], name=g,
            mode="markers+text" if show_text else "markers",
            text=[labels[i] for i in idx], textposition="top center", textfont=dict(size=10),
            customdata=[hover[i] for i in idx],
            hovertemplate="%{customdata}<br>PC1 %{x:.3f}, PC2 %{y:.3f}<extra>" + g[:30] + "</extra>",
            marker=dict(size=8, opacity=0.8, **({"color": group_colors[g]} if group_colors and g in group_colors
                                                 else {})),
        ))
    r = ratio if ratio is not None else np.zeros(2)
    fig.update_layout(
        title=title or None, height=560,
        xaxis_title=f"PC1 ({100 * r[0]:.1f}% of variance)",
        yaxis_title=f"PC2 ({100 * r[1]:.1f}% of variance)",
        legend=dict(title="colour", itemsizing="constant"),
        margin=dict(l=10, r=10, t=40 if title else 10, b=10),
    )
    return fig


# ---------------------------------------------------------------- predictions

def fill_mask_figure(candidates: Sequence[tuple[str, float]], title: str = "") -> go.Figure:
    """Horizontal bar chart of top-k (token, probability), best on top."""
    toks = [str(t) for t, _ in candidates]
    probs = np.array([float(p) for _, p in candidates], dtype=np.float32)
    fig = go.Figure(go.Bar(
        x=probs, y=toks, orientation="h", text=[f"{p:.1%}" for p in probs], textposition="auto",
        hovertemplate="%{y}: %{x:.4f}<extra></extra>", marker_color="#4c78a8",
    ))
    fig.update_layout(
        title=title or None, height=max(180, 34 * len(toks) + 70),
        xaxis=dict(title="probability", range=[0, 1]),
        yaxis=dict(autorange="reversed", type="category"),
        margin=dict(l=10, r=10, t=40 if title else 10, b=10),
    )
    return fig


def nsp_figure(p_is_next: float, title: str = "") -> go.Figure:
    """Two bars: P(IsNext) and P(NotNext) = 1 - P(IsNext)."""
    p = float(p_is_next)
    fig = go.Figure(go.Bar(
        x=["IsNext", "NotNext"], y=np.array([p, 1.0 - p], dtype=np.float32),
        text=[f"{p:.1%}", f"{1 - p:.1%}"], textposition="auto",
        marker_color=["#54a24b", "#e45756"], hovertemplate="%{x}: %{y:.4f}<extra></extra>",
    ))
    fig.update_layout(
        title=title or None, height=260, yaxis=dict(title="probability", range=[0, 1]),
        margin=dict(l=10, r=10, t=40 if title else 10, b=10),
    )
    return fig
