"""Figures and tables of the "Inside the model" page: a stage's matrix as a heat map and a table (a window of rows,
and of key columns, around the chosen token for long inputs), the chosen token's vector through every stage as a
strip and its norm per stage, and a LayerNorm's numbers for one token.

Pure functions: numbers in, plotly figures, pandas frames and arrow tables out (float32 to the browser). No
streamlit, no model.
"""
from __future__ import annotations

import json
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import plotly.graph_objects as go

from explorer.figures import plotly_dict as pd_
from explorer.figures.inspect import token_labels
from explorer.i18n import tr

WINDOW = 32  # rows (and key columns of a T x T matrix) shown around the chosen token
CELL_TEXT = 300  # cells up to which each value is written in its cell
MASKED = -1e30  # a score at or below this is a masked (-inf) key


def window(n: int, center: int, size: int = WINDOW) -> tuple[int, int]:
    """[start, stop) of at most ``size`` consecutive indices of ``range(n)`` that holds ``center``."""
    if n <= size:
        return 0, n
    start = min(max(0, center - size // 2), n - size)
    return start, start + size


def display(m: np.ndarray) -> np.ndarray:
    """float32 for the browser, masked (-inf) scores as gaps."""
    z = np.asarray(m, dtype=np.float32).copy()
    z[z <= MASKED] = np.nan
    return z


def stage_heatmap(m: np.ndarray, rows: Sequence[str], cols: Sequence[str], token_row: int | None,
                  prob: bool = False, blocks: int = 0, head_cols: tuple[int, int] | None = None,
                  title: str = "", meta: str = "") -> go.Figure:
    """``m`` (rows x cols) as a heat map: probabilities on 0..max, any other tensor on a scale centred at 0.
    ``token_row`` is outlined; ``blocks`` draws that many equal column blocks (Q | K | V); ``head_cols``
    = (start, stop) outlines the chosen head's columns. ``meta`` names what is drawn (layout.meta: two stages can
    hold the same numbers, e.g. the scaled and the masked scores of an unpadded input)."""
    z = display(m)
    finite = z[np.isfinite(z)]
    top = float(np.abs(finite).max()) if finite.size else 1.0
    scale = dict(colorscale=pd_.colorscale("Viridis"), zmin=0.0, zmax=float(finite.max()) if finite.size else 1.0) \
        if prob else dict(colorscale=pd_.colorscale("RdBu"), reversescale=True, zmid=0.0, zmin=-top or -1.0,
                          zmax=top or 1.0)
    small = z.size <= CELL_TEXT and z.shape[1] <= 24
    trace = dict(type="heatmap", z=z, x=list(cols), y=list(rows), colorbar=dict(thickness=12), **scale,
                 textfont=dict(size=10), hovertemplate="%{y}<br>%{x}: %{z:.5f}<extra></extra>")
    if small:
        trace["texttemplate"] = "%{z:.2f}"
    n_rows, n_cols = z.shape
    shapes = []
    if token_row is not None:
        shapes.append(dict(type="rect", x0=-0.5, x1=n_cols - 0.5, y0=token_row - 0.5, y1=token_row + 0.5,
                           line=dict(color="#ff6f00", width=3)))
    for b in range(1, blocks):
        shapes.append(dict(type="line", x0=b * n_cols / blocks - 0.5, x1=b * n_cols / blocks - 0.5, y0=-0.5,
                           y1=n_rows - 0.5, line=dict(color="black", width=2)))
    if head_cols is not None:
        shapes.append(dict(type="rect", x0=head_cols[0] - 0.5, x1=head_cols[1] - 0.5, y0=-0.5, y1=n_rows - 0.5,
                           line=dict(color="black", width=2, dash="dot")))
    layout = dict(xaxis=dict(type="category", side="top", tickangle=-60 if n_cols <= 64 else 0,
                             showticklabels=n_cols <= 64),
                  yaxis=dict(type="category", autorange="reversed", tickfont=dict(size=11)),
                  height=int(min(760, max(260, 24 * n_rows + 130))),
                  margin=dict(l=10, r=10, t=90 if n_cols <= 64 else 40, b=10))
    if title:
        layout["title"] = pd_.title(title)
    if shapes:
        layout["shapes"] = shapes
    if meta:
        layout["meta"] = meta
    return pd_.figure([trace], layout)


def stage_frame(m: np.ndarray, rows: Sequence[str], cols: Sequence[str]) -> pd.DataFrame:
    """The matrix as a table: one row per token label, one column per column label (the traced float32 values)."""
    return pd.DataFrame(np.asarray(m, dtype=np.float32), index=list(rows), columns=list(cols))


def stage_table(m: np.ndarray, rows: Sequence[str], cols: Sequence[str]) -> pa.Table:
    """``stage_frame(m, rows, cols)`` as the arrow table ``st.dataframe`` makes of it (``pa.Table.from_pandas``, its
    pandas metadata included, so the rows still show as the index), built column by column from the array: arrow's
    own conversion of a wide frame spends most of its time on pandas' per-column lookups (docs/BENCH-HISTORY.md,
    "What a page run costs the server")."""
    rows, cols = [str(r) for r in rows], [str(c) for c in cols]
    if not cols or not rows:
        return pa.Table.from_pandas(stage_frame(m, rows, cols))
    m = np.ascontiguousarray(np.asarray(m, dtype=np.float32).T)  # (columns, rows)
    template = pa.Table.from_pandas(pd.DataFrame(m[:1].T, index=rows, columns=cols[:1]))  # one column: the layout
    meta = json.loads(template.schema.metadata[b"pandas"])
    first, index = meta["columns"][0], meta["columns"][-1]
    meta["columns"] = [{**first, "name": c, "field_name": c} for c in cols] + [index]
    fields = [pa.field(c, pa.float32()) for c in cols] + [template.schema.field(len(template.schema) - 1)]
    schema = pa.schema(fields, metadata={b"pandas": json.dumps(meta).encode()})
    return pa.Table.from_arrays([pa.array(col) for col in m] + [template.column(template.num_columns - 1)],
                                schema=schema)


def shown_frame(m: np.ndarray, rows: Sequence[str], cols: Sequence[str]) -> pd.DataFrame:
    """The matrix as text, 4 significant digits, a masked score (the dtype's minimum) as −∞."""
    text = [["−∞" if v <= MASKED else f"{v:.4g}" for v in r] for r in np.asarray(m, dtype=np.float64)]
    return pd.DataFrame(text, index=list(rows), columns=list(cols))


def stage_rows(tokens: Sequence[str], start: int, stop: int) -> list[str]:
    return token_labels(tokens)[start:stop]


def norms_figure(labels: Sequence[str], norms: Sequence[float], current: int | None) -> go.Figure:
    """The chosen token's vector norm ‖v‖₂ at each stage; the current stage in orange."""
    colors = ["#ff6f00" if i == current else "#5c6bc0" for i in range(len(labels))]
    bar = dict(type="bar", x=list(labels), y=np.asarray(norms, dtype=np.float32), marker=dict(color=colors),
               text=[f"{v:.2f}" for v in norms], textposition="outside",
               hovertemplate="%{x}: ‖v‖ = %{y:.4f}<extra></extra>")
    return pd_.figure([bar], dict(height=330, yaxis=dict(title=pd_.title(tr("norm ‖v‖₂"))),
                                  margin=dict(l=10, r=10, t=20, b=10), xaxis=dict(tickangle=-35, type="category")))


def strip_figure(labels: Sequence[str], vectors: Sequence[np.ndarray], current: int | None) -> go.Figure:
    """The chosen token's D-wide vectors, one row per stage (the same colour scale for all)."""
    z = np.asarray(np.stack(vectors), dtype=np.float32)
    top = float(np.abs(z).max()) or 1.0
    heat = dict(type="heatmap", z=z, y=list(labels), colorscale=pd_.colorscale("RdBu"), reversescale=True, zmid=0.0,
                zmin=-top, zmax=top, colorbar=dict(thickness=12),
                hovertemplate="%{y}<br>dim %{x}: %{z:.4f}<extra></extra>")
    layout = dict(yaxis=dict(type="category", autorange="reversed"), height=int(max(220, 26 * len(labels) + 80)),
                  xaxis=dict(title=pd_.title(tr("dimension"))), margin=dict(l=10, r=10, t=20, b=40))
    if current is not None:
        layout["shapes"] = [dict(type="rect", x0=-0.5, x1=z.shape[1] - 0.5, y0=current - 0.5, y1=current + 0.5,
                                 line=dict(color="#ff6f00", width=3))]
    return pd_.figure([heat], layout)


def norm_frame(d) -> pd.DataFrame:
    """A LayerNorm for one token (``forward_math.NormDetail``): x, (x - μ)/σ, γ, β, γ·x̂ + β and the model's output,
    one column per dimension."""
    rows = {tr("x (the LayerNorm's input)"): d.x, "x̂ = (x − μ) / σ": d.normalized, "γ": d.gamma, "β": d.beta,
            "γ · x̂ + β": d.recomputed, tr("the model's output"): d.output}
    return pd.DataFrame(np.stack(list(rows.values())), index=list(rows),
                        columns=[f"d{i}" for i in range(len(d.x))])


def topk_frame(rows: Sequence[dict], tokens: Sequence[str]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=["position", "rank", "token", "prob", "logit"])
    df.insert(1, "input", [str(tokens[p]) for p in df["position"]])
    return df
