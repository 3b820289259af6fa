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

from explorer.attention_stats import STAT_LABELS

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


def grid_trace_index(layer: int, head: int, n_heads: int) -> int:
    """Index into ``fig.data`` of the heatmap for 0-based (layer, head) in ``attention_grid_figure``."""
    return layer * n_heads + head


GRID_OVERLAY_POINTS = 40_000  # clickable overlay points in the whole grid (one per drawn cell)


def grid_cell_size(n_layers: int, n_heads: int) -> int:
    """Cells per tile side so that the grid's click overlay stays within ``GRID_OVERLAY_POINTS`` points."""
    return int(max(8, min(32, (GRID_OVERLAY_POINTS / max(1, n_layers * n_heads)) ** 0.5)))


def attention_grid_figure(
    attentions: np.ndarray,
    tokens: Sequence[str],
    zmax: float | None = None,
    width_px: int = 1100,
    clickable: bool = True,
    labels: Sequence[str] | None = None,
) -> go.Figure:
    """A layers x heads grid of attention heatmaps sharing ONE colour scale (``coloraxis``).

    ``attentions`` is ``[L, H, T, T]`` (query rows, key columns); trace ``l*H + h`` holds head (l, h) and its
    ``z`` is exactly ``attentions[l, h]``. Layers and heads are numbered from 1 (``L1``, ``H1``). The first column
    carries the query tokens, the bottom row the key tokens (thinned to fit; rows and columns share them).
    ``clickable`` overlays one transparent square marker per cell (customdata = 0-based layer, head, query,
    key, weight), because ``st.plotly_chart(on_select=...)`` returns no points for heatmaps (streamlit #8760).
    ``labels`` overrides the axis labels (e.g. those of ``pooled_attention``).
    """
    A = np.asarray(attentions, dtype=np.float32)
    if A.ndim != 4:
        raise ValueError(f"attentions must be [L, H, T, T], got {A.shape}")
    L, H, T, _ = A.shape
    labels = list(labels) if labels is not None else token_labels(tokens)
    if len(labels) != T:
        raise ValueError(f"{len(labels)} tokens for attention of length {T}")
    gap = 0.08
    tile_px = width_px * (1 - gap) / max(H, 1)
    n_ticks = max(2, int(tile_px // 11))
    ticks = thinned(labels, n_ticks)
    data, overlay = [], []
    layout: dict = {}
    annotations = []
    qq, kk = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    lab = np.array(labels, dtype=object)
    for li in range(L):
        for h in range(H):
            n = grid_trace_index(li, h, H) + 1
            suffix = "" if n == 1 else str(n)
            data.append(dict(
                type="heatmap", z=A[li, h], x=labels, y=labels, coloraxis="coloraxis", xaxis=f"x{suffix}",
                yaxis=f"y{suffix}", name=f"L{li + 1} H{h + 1}",
                hovertemplate=f"layer {li + 1}, head {h + 1}<br>query %{{y}}<br>key %{{x}}<br>weight %{{z:.3f}}"
                              "<extra></extra>",
            ))
            if clickable:
                custom = np.stack([np.full(T * T, li), np.full(T * T, h), qq.ravel(), kk.ravel(),
                                   A[li, h].ravel()], axis=1).astype(np.float32)
                overlay.append(dict(
                    type="scatter", x=lab[kk.ravel()], y=lab[qq.ravel()], mode="markers", xaxis=f"x{suffix}",
                    yaxis=f"y{suffix}", customdata=custom, name=f"click L{li + 1} H{h + 1}", showlegend=False,
                    marker=dict(symbol="square", size=max(3.0, tile_px / T), color="rgba(0,0,0,0)"),
                    hovertemplate=f"layer {li + 1}, head {h + 1}<br>query %{{y}}<br>key %{{x}}"
                                  "<br>weight %{customdata[4]:.3f}<br>click to open this head<extra></extra>",
                ))
            x0, x1 = h / H, (h + 1 - gap) / H
            y1, y0 = 1 - li / L, 1 - (li + 1 - gap) / L
            layout[f"xaxis{suffix}"] = dict(
                domain=[x0, x1], anchor=f"y{suffix}", showgrid=False, zeroline=False, type="category",
                showticklabels=li == L - 1, tickvals=ticks, tickangle=-90, tickfont=dict(size=9),
            )
            layout[f"yaxis{suffix}"] = dict(
                domain=[y0, y1], anchor=f"x{suffix}", showgrid=False, zeroline=False, type="category",
                autorange="reversed", showticklabels=h == 0, tickvals=ticks, tickfont=dict(size=9),
            )
            if h == 0:
                layout[f"yaxis{suffix}"]["title"] = dict(text=f"L{li + 1}", font=dict(size=11))
            if li == 0:
                annotations.append(dict(
                    text=f"H{h + 1}", x=(x0 + x1) / 2, y=1.0, xref="paper", yref="paper",
                    yanchor="bottom", showarrow=False, font=dict(size=11),
                ))
    cmax = float(np.nanmax(A)) if zmax is None and A.size else (zmax or 1.0)
    label_px = 7 * max((len(t) for t in ticks), default=4) + 20
    layout.update(
        coloraxis=dict(colorscale=COLORSCALE, cmin=0.0, cmax=cmax, colorbar=dict(title=dict(text="weight"),
                                                                                thickness=12)),
        annotations=annotations,
        height=int(min(1400, max(300, L * tile_px + 40 + label_px))),  # about square cells
        margin=dict(l=label_px + 20, r=10, t=30, b=label_px),
        showlegend=False, hovermode="closest", dragmode=False,
    )
    # Plain dicts, built without plotly's per-property validation: for 72 heads that validation took most of
    # the page run (the load test), and every key here is a valid plotly.js attribute.
    return go.Figure(dict(data=data + overlay, layout=layout), _validate=False)


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
        colorbar=dict(title="weight", thickness=12),
        hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>",
    ))
    side = int(min(900, max(320, 22 * T + 140)))
    ticks = thinned(labels, max(2, (side - 140) // 13))
    fig.update_layout(
        title=title or None, height=side,
        xaxis=dict(title="key (attended to)", tickangle=-60, side="top", type="category", tickvals=ticks),
        yaxis=dict(title="query (attending)", autorange="reversed", type="category", tickvals=ticks),
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
