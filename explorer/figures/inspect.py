"""Pure plotly figure builders for the Inspect pages (Attention, Predict, Embeddings).

No streamlit here: every function takes numpy arrays / lists and returns a ``go.Figure`` (or numbers),
so the figures are unit-testable without a browser. Arrays are sent as float32 (compact base64 in
the plotly JSON).
"""
from __future__ import annotations

import html
from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from explorer.figures import plotly_dict
from explorer.figures.attention_stats import STAT_LABELS
from explorer.i18n import tr

COLORSCALE = "Viridis"


def token_labels(tokens: Sequence[str], escape: bool = True) -> list[str]:
    """Unique axis labels ``"<position> <token>"`` (plotly merges repeated category names). The one helper for
    token labels: every attention map (Attention, Compare, Predict) and every CSV export labels tokens with it.

    ``escape`` HTML-escapes the text a user typed: plotly reads tags such as ``<b>`` or ``<a href>`` in labels
    (the Captum #1226 mistake); CSV exports pass ``escape=False`` to keep the raw token."""
    return [f"{i} {html.escape(str(t), quote=False) if escape else t}" for i, t in enumerate(tokens)]


def thinned(labels: Sequence[str], max_labels: int) -> list[str]:
    """At most ``max_labels`` of ``labels``, evenly spaced (always the first): the tick labels drawn on an axis."""
    n = len(labels)
    step = max(1, -(-n // max(1, int(max_labels))))  # ceil(n / max_labels)
    return [labels[i] for i in range(0, n, step)]


def pooled_attention(attentions: np.ndarray, tokens: Sequence[str], max_cells: int) -> tuple[np.ndarray, list[str]]:
    """Block-pool ``[..., T, T]`` to at most ``max_cells`` per side, server-side, for the all-heads grid of a long input.

    Block (I, J) holds the mean over the queries in I of the summed weight on the keys in J, so every pooled row
    still sums to 1. Labels read ``"<first>-<last> <first token>"``. With ``T <= max_cells`` nothing changes.
    """
    A = np.asarray(attentions, dtype=np.float32)
    T = A.shape[-1]
    if T <= max_cells:
        return A, token_labels(tokens)
    size = -(-T // max_cells)
    starts = list(range(0, T, size))
    keys = np.add.reduceat(A, starts, axis=-1)  # sum over the keys of each block
    pooled = np.add.reduceat(keys, starts, axis=-2) / np.diff(starts + [T])[:, None]  # mean over its queries
    labels = [f"{s}-{min(s + size, T) - 1} {html.escape(str(tokens[s]), quote=False)}" for s in starts]
    return pooled.astype(np.float32), labels


def grid_gap(cells: int) -> int:
    """Empty cells between two tiles of the all-heads mosaic (about 8% of a tile, at least 1)."""
    return max(1, round(0.08 * cells))


def grid_origin(layer: int, head: int, cells: int) -> tuple[int, int]:
    """(row, column) in the mosaic ``z`` of ``attention_grid_figure`` where 0-based (layer, head)'s tile starts."""
    step = cells + grid_gap(cells)
    return layer * step, head * step


def grid_tile(z, layer: int, head: int, cells: int) -> np.ndarray:
    """The ``cells x cells`` attention map of 0-based (layer, head) cut out of the mosaic ``z``."""
    r, c = grid_origin(layer, head, cells)
    return np.asarray(z, dtype=np.float64)[r:r + cells, c:c + cells]


GRID_CLICK_POINTS = 5_000  # hover/click markers in the whole grid: SVG nodes the browser must draw
GRID_CELLS = 40_000  # drawn cells in the whole grid; longer inputs are pooled (pooled_attention)


def grid_cell_size(n_layers: int, n_heads: int) -> int:
    """Cells per tile side (8 to 32) so that the whole grid draws about ``GRID_CELLS`` cells at most."""
    return int(max(8, min(32, (GRID_CELLS / max(1, n_layers * n_heads)) ** 0.5)))


def attention_grid_figure(
    attentions: np.ndarray,
    tokens: Sequence[str],
    zmax: float | None = None,
    width_px: int = 900,
    clickable: bool = True,
    labels: Sequence[str] | None = None,
    click_side: int | None = None,
) -> go.Figure:
    """A layers x heads grid of attention maps sharing ONE colour scale, drawn as one mosaic heatmap.

    ``attentions`` is ``[L, H, T, T]`` (query rows, key columns). The single heatmap's ``z`` holds every head's
    map as a ``T x T`` tile, tiles ``grid_gap(T)`` empty (NaN) cells apart: ``grid_tile(z, l, h, T)`` is exactly
    ``attentions[l, h]``. One trace instead of one subplot per head: the browser draws one trace far sooner
    than 72 subplots. Layers and heads are numbered from 1 (``L1``, ``H1`` annotations). Query tokens label the
    left edge of every layer row, key tokens the bottom of every head column (thinned to fit). ``layout.meta["grid"]`` says
    the geometry. A transparent scatter overlay carries the hover text and the clicks (customdata = 0-based
    layer, head, query, key, weight), because ``st.plotly_chart(on_select=...)`` returns no points for heatmaps
    (streamlit #8760): one square marker per cell up to ``click_side`` cells a side (default: what keeps the
    whole grid within ``GRID_CLICK_POINTS`` markers), else one per block of ``ceil(T / click_side)`` cells at its
    middle cell, sized to cover the block; points run head by head (layer-major), ``side**2`` per head.
    ``clickable=False`` keeps the hover text without the click hint.
    """
    A = np.asarray(attentions, dtype=np.float32)
    if A.ndim != 4:
        raise ValueError(f"attentions must be [L, H, T, T], got {A.shape}")
    L, H, T, _ = A.shape
    labels = list(labels) if labels is not None else token_labels(tokens)
    if len(labels) != T:
        raise ValueError(f"{len(labels)} tokens for attention of length {T}")
    gap = grid_gap(T)
    step = T + gap
    Z = np.full((L * step - gap, H * step - gap), np.nan, dtype=np.float32)
    for li in range(L):
        for h in range(H):
            r, c = grid_origin(li, h, T)
            Z[r:r + T, c:c + T] = A[li, h]
    label_chars = max((len(t) for t in labels), default=4)
    # the plot area: the chart width less the label margin, the right margin and the colour bar
    cell_px = max(1.0, (width_px - min(7 * label_chars + 30, 200) - 110) / Z.shape[1])  # about square cells
    tick_idx = [labels.index(t) for t in thinned(labels, max(2, int(cell_px * T // 11)))]
    x_ticks = [h * step + k for h in range(H) for k in tick_idx]
    y_ticks = [li * step + k for li in range(L) for k in tick_idx]
    data = [dict(type="heatmap", z=Z, coloraxis="coloraxis", hoverongaps=False, hoverinfo="skip", name="attention")]
    if click_side is None:
        click_side = max(4, int((GRID_CLICK_POINTS / max(1, L * H)) ** 0.5))
    stride = max(1, -(-T // max(1, click_side)))
    at = np.minimum(np.arange(0, T, stride) + stride // 2, T - 1)  # the middle cell of each block
    qq, kk = np.meshgrid(at, at, indexing="ij")
    lab = np.array(labels, dtype=object)
    xs, ys, custom = [], [], []
    for li in range(L):
        for h in range(H):
            r, c = grid_origin(li, h, T)
            xs.append(c + kk.ravel())
            ys.append(r + qq.ravel())
            n_pts = qq.size
            custom.append(np.stack([np.full(n_pts, li), np.full(n_pts, h), qq.ravel(), kk.ravel(),
                                    A[li, h][qq, kk].ravel()], axis=1))
    custom = np.concatenate(custom).astype(np.float32)
    hint = "<br>click to open this head" if clickable else ""
    where = [f"layer {int(li) + 1}, head {int(h) + 1}<br>query {lab[int(q)]}<br>key {lab[int(k)]}"
             for li, h, q, k in custom[:, :4]]
    data.append(dict(
        type="scatter", x=np.concatenate(xs).astype(np.float32), y=np.concatenate(ys).astype(np.float32),
        mode="markers", customdata=custom, hovertext=where, name="heads", showlegend=False,
        marker=dict(symbol="square", size=max(3.0, stride * cell_px), color="rgba(0,0,0,0)"),
        hovertemplate="%{hovertext}<br>weight %{customdata[4]:.3f}" + hint + "<extra></extra>",
    ))
    annotations = [dict(text=f"H{h + 1}", x=h * step + (T - 1) / 2, y=-0.5, xref="x", yref="y", yanchor="bottom",
                        showarrow=False, font=dict(size=11)) for h in range(H)]
    annotations += [dict(text=f"L{li + 1}", x=1.0, xref="paper", xanchor="left", y=li * step + (T - 1) / 2,
                         yref="y", showarrow=False, font=dict(size=11)) for li in range(L)]
    cmax = float(np.nanmax(A)) if zmax is None and A.size else (zmax or 1.0)
    label_px = 7 * max((len(labels[k]) for k in tick_idx), default=4) + 20
    axis = dict(showgrid=False, zeroline=False, tickfont=dict(size=9), ticks="")
    layout = dict(
        xaxis=dict(axis, range=[-0.5, Z.shape[1] - 0.5], tickvals=x_ticks, ticktext=[labels[k] for k in tick_idx] * H,
                   tickangle=-90),
        yaxis=dict(axis, range=[Z.shape[0] - 0.5, -0.5], tickvals=y_ticks, ticktext=[labels[k] for k in tick_idx] * L),
        plot_bgcolor="rgba(0,0,0,0)",
        coloraxis=dict(colorscale=COLORSCALE, cmin=0.0, cmax=cmax, colorbar=dict(title=dict(text=tr("weight")),
                                                                                thickness=12, x=1.04)),
        annotations=annotations,
        height=int(min(1400, max(300, Z.shape[0] * cell_px + 40 + label_px))),
        margin=dict(l=label_px + 10, r=40, t=30, b=label_px),
        showlegend=False, hovermode="closest", dragmode=False,
        meta={"grid": {"layers": L, "heads": H, "cells": T, "gap": gap, "click_side": len(at)}},
    )
    # Plain dicts, built without plotly's per-property validation (every key is a valid plotly.js attribute).
    return go.Figure(dict(data=data, layout=layout), _validate=False)


def clicked_head(selection) -> tuple[int, int] | None:
    """0-based (layer, head) of the first clicked overlay point in a ``st.plotly_chart`` selection, or None."""
    try:
        points = selection["selection"]["points"]
    except (KeyError, TypeError):
        return None
    for p in points or []:
        cd = p.get("customdata") if isinstance(p, dict) else None
        if isinstance(cd, dict):  # a row of a typed (float32) array arrives as {"0": layer, "1": head, ...}
            cd = [cd.get(str(i), cd.get(i)) for i in range(len(cd))]
        if cd is not None and len(cd) >= 2 and cd[0] is not None and cd[1] is not None:
            return int(cd[0]), int(cd[1])
    return None


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
        colorbar=dict(title=tr("weight"), thickness=12),
        hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>",
    ))
    side = int(min(900, max(320, 22 * T + 140)))
    ticks = thinned(labels, max(2, (side - 140) // 13))
    fig.update_layout(
        title=title or None, height=side,
        xaxis=dict(title=tr("key (attended to)"), tickangle=-60, side="top", type="category", tickvals=ticks),
        yaxis=dict(title=tr("query (attending)"), autorange="reversed", type="category", tickvals=ticks),
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
        colorscale=COLORSCALE, colorbar=dict(thickness=12), zmin=0.0,  # the title names the statistic
        zmax=float(zmax) if zmax is not None else (
            1.0 if stat != "entropy" else float(np.nanmax(z)) if np.isfinite(z).any() else 1.0),
        texttemplate="%{z:.2f}",
        hovertemplate="%{y} %{x}<br>" + tr(STAT_LABELS.get(stat, stat)) + ": %{z:.3f}<extra></extra>",
    ))
    fig.update_layout(
        title=tr(STAT_LABELS.get(stat, stat)), height=max(220, 45 * L + 90),
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
        xaxis_title=tr("PC1 ({share:.1f}% of variance)", share=100 * r[0]),
        yaxis_title=tr("PC2 ({share:.1f}% of variance)", share=100 * r[1]),
        legend=dict(title=tr("colour"), itemsizing="constant"),
        margin=dict(l=10, r=10, t=40 if title else 10, b=10),
    )
    return fig


# ---------------------------------------------------------------- predictions

def fill_mask_figure(candidates: Sequence[tuple[str, float]], title: str = "") -> go.Figure:
    """Horizontal bar chart of top-k (token, probability), best on top."""
    toks = [str(t) for t, _ in candidates]
    probs = np.array([float(p) for _, p in candidates], dtype=np.float32)
    bar = dict(type="bar", x=probs, y=toks, orientation="h", text=[f"{p:.1%}" for p in probs], textposition="auto",
               hovertemplate="%{y}: %{x:.4f}<extra></extra>", marker=dict(color="#4c78a8"))
    layout = dict(height=max(180, 34 * len(toks) + 70),
                  xaxis=dict(title=plotly_dict.title(tr("probability")), range=[0, 1]),
                  yaxis=dict(autorange="reversed", type="category"),
                  margin=dict(l=10, r=10, t=40 if title else 10, b=10))
    if title:
        layout["title"] = plotly_dict.title(title)
    return plotly_dict.figure([bar], layout)


def nsp_figure(p_is_next: float, title: str = "", sentence_task: str = "nsp") -> go.Figure:
    """Two bars: P(IsNext) and P(NotNext) = 1 - P(IsNext); for a sentence-order head (``sentence_task`` sop,
    ALBERT §4.6) P(in order) and P(swapped), label 0 and 1 as well."""
    p = float(p_is_next)
    names = ["in order", "swapped"] if sentence_task == "sop" else ["IsNext", "NotNext"]
    bar = dict(type="bar", x=names, y=np.array([p, 1.0 - p], dtype=np.float32),
               text=[f"{p:.1%}", f"{1 - p:.1%}"], textposition="auto", marker=dict(color=["#54a24b", "#e45756"]),
               hovertemplate="%{x}: %{y:.4f}<extra></extra>")
    layout = dict(height=260, yaxis=dict(title=plotly_dict.title(tr("probability")), range=[0, 1]),
                  margin=dict(l=10, r=10, t=40 if title else 10, b=10))
    if title:
        layout["title"] = plotly_dict.title(title)
    return plotly_dict.figure([bar], layout)
