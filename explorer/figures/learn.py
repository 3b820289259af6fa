"""Figure builders for the Learn pages (Data & tokens, Masking & NSP, Positional encoding).

Pure functions: numbers in, plotly figures out. No streamlit, no model calls; the pages compute
the numbers with bertcore and hand them here, and the tests check that what a figure draws is
exactly what was computed. Arrays go out as float32 (plotly sends them as compact typed arrays).
"""
from __future__ import annotations

import html
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bertcore.data.tokenization import canonical_special
from explorer.i18n import mark, tr

# Masking decision categories, in code order (the z value of a cell is its index here). masking_figure adds each
# action's share of the selected tokens, from the rates the page uses, to its legend label.
MASK_CATEGORIES: list[tuple[str, str, str]] = [
    # (action, legend label, colour)
    ("none", mark("not selected"), "#eceff1"),
    ("mask", mark("selected → [MASK]"), "#ef5350"),
    ("random", mark("selected → random token"), "#ffa726"),
    ("keep", mark("selected → kept as is"), "#66bb6a"),
    ("special", mark("special token (never selected)"), "#90a4ae"),
    ("seg_a", mark("segment A (id 0)"), "#bbdefb"),
    ("seg_b", mark("segment B (id 1)"), "#e1bee7"),
    ("plain", "", "#ffffff"),
]
MASK_CODE = {name: i for i, (name, _, _) in enumerate(MASK_CATEGORIES)}
MASK_COLOR = {name: color for name, _, color in MASK_CATEGORIES}

TOKEN_CATEGORIES: list[tuple[str, str, str]] = [
    ("known", mark("in vocabulary"), "#c8e6c9"),
    ("piece", mark("WordPiece continuation (##)"), "#fff59d"),
    ("unk", mark("[UNK] (not in vocabulary)"), "#ef9a9a"),
    ("special", mark("special token"), "#90a4ae"),
    ("plain", "", "#ffffff"),
]
TOKEN_CODE = {name: i for i, (name, _, _) in enumerate(TOKEN_CATEGORIES)}


def percent(share: float) -> str:
    """A share as a percentage with at most one decimal: 0.8 -> "80%", 0.125 -> "12.5%", 0.1000000003 -> "10%"."""
    return f"{100 * share:.1f}".rstrip("0").rstrip(".") + "%"


def _f32(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def discrete_colorscale(colors: Sequence[str]) -> list[list]:
    """A stepped colourscale so that integer code i (with zmin=-0.5, zmax=K-0.5) gets colors[i]."""
    k = len(colors)
    scale: list[list] = []
    for i, c in enumerate(colors):
        scale.append([i / k, c])
        scale.append([(i + 1) / k, c])
    return scale


def category_grid(row_labels: Sequence[str], cells: Sequence[Sequence[str]], codes: np.ndarray,
                   categories: list[tuple[str, str, str]], title: str, legend: Iterable[str]) -> go.Figure:
    """Rows of labelled cells (one column per position), each cell coloured by its category code. Cell text and
    title are HTML-escaped: plotly reads tags, and would drop a BERT-pytorch vocabulary's ``<sos>`` as one."""
    cells = [[html.escape(str(c), quote=False) for c in r] for r in cells]
    title = html.escape(title, quote=False)
    codes = np.asarray(codes, dtype=np.float32)
    n_rows, n_cols = codes.shape
    colors = [c for _, _, c in categories]
    fig = go.Figure(go.Heatmap(
        z=codes, x=list(range(n_cols)), y=list(range(n_rows)),
        text=[list(r) for r in cells], texttemplate="%{text}", textfont={"size": 11},
        colorscale=discrete_colorscale(colors), zmin=-0.5, zmax=len(colors) - 0.5,
        showscale=False, xgap=2, ygap=2,
        hovertemplate="position %{x}<br>%{customdata}: %{text}<extra></extra>",
        customdata=[[row_labels[r]] * n_cols for r in range(n_rows)],
    ))
    names = {name: (label, color) for name, label, color in categories}
    for name in legend:
        label, color = names[name]
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=html.escape(label, quote=False),
                                 showlegend=True,
                                 marker={"size": 12, "symbol": "square", "color": color}))
    fig.update_yaxes(tickvals=list(range(n_rows)), ticktext=list(row_labels), autorange="reversed",
                     showgrid=False, zeroline=False)
    fig.update_xaxes(tickvals=list(range(n_cols)), showgrid=False, zeroline=False, side="top",
                     title_text=tr("position"))
    fig.update_layout(title=title, height=90 + 38 * n_rows, margin={"l": 10, "r": 10, "t": 70, "b": 10},
                      legend={"orientation": "h", "y": -0.05, "yanchor": "top"},
                      plot_bgcolor="white", width=max(500, 60 * n_cols + 160) if n_cols > 20 else None)
    return fig


# ---------------------------------------------------------------- Data & tokens

def length_counts(lengths: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(length values, number of pairs with that length) for every length from min to max."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo = int(lengths.min())
    counts = np.bincount(lengths - lo)
    return np.arange(lo, lo + counts.size), counts


def length_histogram(lengths: Sequence[int], max_seq_len: int | None = None,
                     title: str | None = None) -> go.Figure:
    """Bar chart with one bar per length; the bars sum to the number of pairs."""
    xs, counts = length_counts(lengths)
    fig = go.Figure(go.Bar(x=_f32(xs), y=_f32(counts), name=tr("pairs"), marker_color="#5c6bc0",
                           hovertemplate=tr("{x} tokens: {y} pairs", x="%{x}", y="%{y}") + "<extra></extra>"))
    if max_seq_len is not None:
        fig.add_vline(x=max_seq_len - 3, line_dash="dash", line_color="#e53935",
                      annotation_text=f"max_seq_len − 3 = {max_seq_len - 3}")
    fig.update_layout(title=title or tr("Tokens per pair (A + B, without [CLS]/[SEP])"),
                      xaxis_title=tr("tokens in the pair"), yaxis_title=tr("pairs"),
                      bargap=0.05, height=320, margin={"t": 50, "b": 40})
    return fig


def top_words_bar(counts: Mapping[str, int] | Counter, k: int = 20, title: str | None = None) -> go.Figure:
    """Horizontal bar chart of the k most frequent words, most frequent on top."""
    top = Counter(counts).most_common(k)
    words = [w for w, _ in top]
    values = [c for _, c in top]
    fig = go.Figure(go.Bar(x=_f32(values), y=words, orientation="h", marker_color="#26a69a",
                           hovertemplate="%{y}: %{x}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(title=title or tr("Top {n} words", n=len(words)), xaxis_title=tr("occurrences"),
                      height=max(250, 22 * len(words) + 80), margin={"t": 50, "b": 40})
    return fig


def token_kinds(tokens: Sequence[str], unk_token: str = "[UNK]",
                specials: Iterable[str] = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")) -> list[str]:
    """Category per token: unk / special / piece (## continuation) / known (a BERT-pytorch vocabulary's <unk>, <sos> ...
    count as [UNK], [CLS] ...)."""
    specials = set(specials)
    out = []
    for t in map(canonical_special, tokens):
        if t == unk_token:
            out.append("unk")
        elif t in specials:
            out.append("special")
        elif t.startswith("##"):
            out.append("piece")
        else:
            out.append("known")
    return out


def tokens_figure(tokens: Sequence[str], ids: Sequence[int], title: str | None = None) -> go.Figure:
    """Two rows (token, id), [UNK] cells red, ## pieces yellow, specials grey."""
    kinds = token_kinds(tokens)
    codes = np.array([[TOKEN_CODE[k] for k in kinds]] * 2, dtype=np.float32).reshape(2, len(kinds))
    cells = [list(tokens), [str(i) for i in ids]]
    legend = [k for k in ("known", "piece", "unk", "special") if k in kinds]
    categories = [(k, tr(label), color) for k, label, color in TOKEN_CATEGORIES]
    return category_grid([tr("token"), "id"], cells, codes, categories, title or tr("Tokens and ids"), legend)


# ---------------------------------------------------------------- Masking & NSP

def decision_actions(n_positions: int, decisions: Sequence[Any], special_positions: Iterable[int]) -> list[str]:
    """Action per position: the decision's action, or "special" for [CLS]/[SEP]/[PAD]."""
    actions = ["none"] * n_positions
    for d in decisions:
        if 0 <= int(d.position) < n_positions:
            actions[int(d.position)] = d.action if d.selected else "none"
    for p in special_positions:
        if 0 <= p < n_positions and actions[p] == "none":
            actions[p] = "special"
    return actions


def masking_figure(tokens: Sequence[str], input_ids: Sequence[int], segment_ids: Sequence[int],
                   decisions: Sequence[Any], masked_tokens: Sequence[str], masked_ids: Sequence[int],
                   labels: Sequence[int], special_positions: Iterable[int], *, rates,
                   title: str = "[CLS] A [SEP] B [SEP], masked", first_segment: int = 0,
                   mask_token: str = "[MASK]", units: Sequence[str] | None = None) -> go.Figure:
    """The pair as rows: token, id, segment, position, decision, model input, MLM label.

    Token/decision/input/label rows are coloured by the masking action at that position; the segment
    row by segment (``first_segment`` is sentence A's id: 0, or 1 in BERT-pytorch's 1/2 labels). Labels are
    -100 where the token was not selected (ignored by the loss). ``mask_token`` is the tokenizer's spelling of
    the mask ([MASK], or <mask> in a BERT-pytorch vocabulary), in the decision row and the legend. ``rates`` (a
    ``bertcore.data.pretraining.MaskingRates``) are the rates the decisions were drawn with: the legend gives each
    action's share of the selected tokens from them. ``units`` (one label per position, "" where nothing is
    selected) adds a row naming the selection unit each token belongs to (a whole word or a span shares one action).
    """
    n = len(tokens)
    actions = decision_actions(n, decisions, special_positions)
    act_codes = [MASK_CODE[a] for a in actions]
    seg_codes = [MASK_CODE["seg_a"] if s == first_segment else MASK_CODE["seg_b"] for s in segment_ids]
    plain = [MASK_CODE["plain"]] * n
    by_pos = {int(d.position): d for d in decisions}
    decision_text = []
    for i, a in enumerate(actions):
        d = by_pos.get(i)
        if a == "mask":
            decision_text.append(mask_token)
        elif a == "random":
            decision_text.append(f"→ {d.placed}" if d is not None else tr("random"))
        elif a == "keep":
            decision_text.append(tr("keep"))
        elif a == "special":
            decision_text.append(tr("special"))
        else:
            decision_text.append("·")
    rows = [tr(r) for r in (mark("token"), "id", mark("segment id"), mark("position"), mark("decision"),
                            mark("model input"), mark("input id"), mark("MLM label"))]
    cells = [list(tokens), [str(i) for i in input_ids], [str(s) for s in segment_ids],
             [str(i) for i in range(n)], decision_text, list(masked_tokens), [str(i) for i in masked_ids],
             [str(int(v)) for v in labels]]
    code_rows = [act_codes, plain, seg_codes, plain, act_codes, act_codes, plain, act_codes]
    if units is not None:  # after the decision row: which unit (word, span) each selected token belongs to
        rows.insert(5, tr("unit"))
        cells.insert(5, [str(u) if u else "·" for u in units])
        code_rows.insert(5, act_codes)
    codes = np.array(code_rows, dtype=np.float32).reshape(len(rows), n)
    legend = ["none", "mask", "random", "keep", "special", "seg_a", "seg_b"]
    shares = {"mask": rates.mask_token_frac, "random": rates.random_token_frac, "keep": rates.keep_frac}
    names = {"mask": tr("selected → {mask}", mask=mask_token), "seg_a": tr("segment A (id {id})", id=first_segment),
             "seg_b": tr("segment B (id {id})", id=first_segment + 1)}
    categories = [(a, names.get(a, tr(label)) + (f" ({percent(shares[a])})" if a in shares else ""), color)
                  for a, label, color in MASK_CATEGORIES]
    return category_grid(rows, cells, codes, categories, title, legend)


STAT_LINES = [
    ("selected_rate", mark("selected / maskable tokens"), "#1e88e5"),
    ("mask_share", mark("[MASK] share of selected"), "#e53935"),
    ("random_share", mark("random share of selected"), "#fb8c00"),
    ("keep_share", mark("kept share of selected"), "#43a047"),
]


def masking_convergence_figure(stats: Sequence[Mapping[str, float]], configured: Mapping[str, float],
                               mask_token: str = "[MASK]") -> go.Figure:
    """Empirical rates (from masking_stats over N draws) against N, with the configured rates dashed; the mask is
    named as the tokenizer spells it (``<mask>`` in a BERT-pytorch vocabulary)."""
    xs = _f32([s["draws"] for s in stats])
    fig = go.Figure()
    for key, label, color in STAT_LINES:
        label = html.escape(tr(label).replace("[MASK]", mask_token), quote=False)
        if key in configured:
            label += tr(" (set: {share})", share=percent(float(configured[key])))
        fig.add_trace(go.Scatter(x=xs, y=_f32([s[key] for s in stats]), mode="lines+markers", name=label,
                                 line={"color": color},
                                 hovertemplate=f"{label}<br>N=%{{x}}: %{{y:.3f}}<extra></extra>"))
        if key in configured:
            fig.add_hline(y=float(configured[key]), line_dash="dash", line_color=color, opacity=0.7)
    fig.update_xaxes(type="log", title_text=tr("N draws (examples; log scale)"))
    fig.update_yaxes(title_text=tr("rate"), range=[0, 1.02])
    fig.update_layout(title=tr("Empirical masking rates converge to the configured ones (dashed)"), height=380,
                      margin={"t": 50}, legend={"orientation": "h", "y": -0.25})
    return fig


# ---------------------------------------------------------------- Positional encoding

def similarity(table: Any, kind: str = "cosine") -> np.ndarray:
    """Position-to-position similarity of the rows of a [P, D] table: "dot" or "cosine"."""
    t = np.asarray(table, dtype=np.float64)
    if kind == "cosine":
        norms = np.linalg.norm(t, axis=1, keepdims=True)
        t = t / np.where(norms == 0, 1.0, norms)
    elif kind != "dot":
        raise ValueError(f"kind must be 'dot' or 'cosine', not {kind!r}")
    return (t @ t.T).astype(np.float32)


def heatmap(z: Any, title: str, x_title: str, y_title: str, colorscale: str = "RdBu", zmid: float | None = 0.0,
            x: Sequence | None = None, y: Sequence | None = None, height: int = 420) -> go.Figure:
    z = _f32(z)
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=y, colorscale=colorscale, zmid=zmid, reversescale=colorscale == "RdBu",
        hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>value %{{z:.4f}}<extra></extra>"))
    fig.update_yaxes(title_text=y_title, autorange="reversed")
    fig.update_xaxes(title_text=x_title)
    fig.update_layout(title=title, height=height, margin={"t": 50, "b": 40})
    return fig


def pe_table_figure(table: Any) -> go.Figure:
    t = _f32(table)
    return heatmap(t, tr("Sinusoidal table: {n} positions × {d} dimensions", n=t.shape[0], d=t.shape[1]),
                   tr("dimension"), tr("position"))


def pe_curves_figure(table: Any, dims: Sequence[int]) -> go.Figure:
    """PE[:, d] against position for each chosen dimension (even = sin, odd = cos)."""
    t = _f32(table)
    pos = np.arange(t.shape[0], dtype=np.float32)
    fig = go.Figure()
    d_model = t.shape[1]
    for d in dims:
        if not 0 <= d < d_model:
            continue
        fn = "sin" if d % 2 == 0 else "cos"
        i2 = d - d % 2
        fig.add_trace(go.Scatter(x=pos, y=t[:, d], mode="lines", name=tr("dim {d} ({fn}, 2i={i2})", d=d, fn=fn, i2=i2)))
    fig.update_layout(title=tr("PE(pos, d) for the chosen dimensions"), xaxis_title=tr("position"),
                      yaxis_title=tr("value"), height=350, margin={"t": 50})
    return fig


def similarity_figure(sim: Any, kind: str, title: str) -> go.Figure:
    label = tr("cosine similarity") if kind == "cosine" else tr("dot product")
    s = _f32(sim)
    return heatmap(s, f"{title}: {label}", tr("position"), tr("position"),
                   colorscale="Viridis", zmid=None, height=400)


def side_by_side_similarity(left: Any, right: Any, kind: str, left_title: str, right_title: str) -> go.Figure:
    """Two position-similarity heatmaps, each with its own colour scale (they differ in magnitude)."""
    label = tr("cosine similarity") if kind == "cosine" else tr("dot product")
    fig = make_subplots(rows=1, cols=2, subplot_titles=(left_title, right_title), horizontal_spacing=0.12)
    for col, (mat, cx) in enumerate(((left, 0.43), (right, 1.0)), start=1):
        fig.add_trace(go.Heatmap(z=_f32(mat), colorscale="Viridis", colorbar={"x": cx, "len": 0.9},
                                 hovertemplate="pos %{y} · pos %{x}: %{z:.4f}<extra></extra>"), row=1, col=col)
        fig.update_yaxes(autorange="reversed", title_text=tr("position"), row=1, col=col)
        fig.update_xaxes(title_text=tr("position"), row=1, col=col)
    fig.update_layout(title=tr("Position-to-position {label}", label=label), height=420, margin={"t": 70})
    return fig


EMBEDDING_PARTS = [
    ("token", mark("token embedding")),
    ("segment", mark("segment embedding")),
    ("position", mark("position embedding")),
    ("sum", mark("sum (token + segment + position)")),
    ("normed", mark("after LayerNorm (what layer 1 sees)")),
]


def embedding_stack_figure(embeddings: Mapping[str, Any], tokens: Sequence[str]) -> go.Figure:
    """Stacked [T, D] heatmaps, one per embedding part, each with its own colour scale (centred at 0)."""
    parts = [(k, tr(t)) for k, t in EMBEDDING_PARTS if k in embeddings]
    n = len(parts)
    fig = make_subplots(rows=n, cols=1, subplot_titles=[t for _, t in parts], vertical_spacing=0.06 if n > 1 else 0)
    ylabels = [f"{i}: {t}" for i, t in enumerate(tokens)]
    for r, (key, label) in enumerate(parts, start=1):
        z = _f32(embeddings[key])
        ca = f"coloraxis{r if r > 1 else ''}"
        fig.add_trace(go.Heatmap(z=z, y=ylabels[: z.shape[0]], coloraxis=ca,
                                 hovertemplate=f"{label}<br>%{{y}}<br>dim %{{x}}: %{{z:.4f}}<extra></extra>"),
                      row=r, col=1)
        fig.update_yaxes(autorange="reversed", type="category", row=r, col=1, tickfont={"size": 9})
        dom = fig.layout[f"yaxis{r if r > 1 else ''}"].domain
        m = float(np.abs(z).max()) if z.size else 1.0
        fig.layout[ca] = {"colorscale": "RdBu", "reversescale": True, "cmin": -m or -1, "cmax": m or 1,
                          "colorbar": {"len": (dom[1] - dom[0]), "y": (dom[0] + dom[1]) / 2, "thickness": 12}}
    fig.update_xaxes(title_text=tr("dimension"), row=n, col=1)
    per = max(120, 16 * len(tokens) + 40)
    fig.update_layout(height=min(3000, per * n + 60), margin={"t": 40, "b": 40},
                      title=None)
    return fig
