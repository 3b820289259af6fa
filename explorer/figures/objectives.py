"""Figure builders for the objective switches on the Masking & NSP page: SpanBERT's span lengths against the
geometric distribution they are drawn from (SpanBERT §3.1), and a left-to-right model's next-token targets (BERT
Table 5's LTR: labels[t] = ids[t + 1]).

Pure functions: numbers in, plotly figures out; the page computes the numbers with bertcore
(``masking_stats``, ``geometric_pmf``, ``PretrainingData(causal=True)``) and tests check that the figures draw
exactly those numbers.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from explorer.figures.learn import category_grid
from explorer.i18n import mark, tr

NEXT_CATEGORIES: list[tuple[str, str, str]] = [
    ("target", mark("predicts the next token"), "#7e57c2"),
    ("none", mark("no target (the next token is special)"), "#eceff1"),
    ("special", mark("special token"), "#90a4ae"),
    ("seg_a", mark("segment A (id 0)"), "#bbdefb"),
    ("seg_b", mark("segment B (id 1)"), "#e1bee7"),
    ("plain", "", "#ffffff"),
]
NEXT_CODE = {name: i for i, (name, _, _) in enumerate(NEXT_CATEGORIES)}


def expected_mean(pmf: Sequence[float]) -> float:
    """Mean length of a distribution over 1..len(pmf)."""
    return float(sum((k + 1) * p for k, p in enumerate(pmf)))


def span_length_figure(measured: Sequence[float], expected: Sequence[float], mean_drawn: float,
                       n_spans: int | None = None) -> go.Figure:
    """Bars: the share of drawn spans of each length 1..max (``masking_stats(...)["span_lengths"]``); markers: the
    truncated geometric P(l) they are drawn from (``geometric_pmf``); the title gives both means."""
    xs = np.arange(1, len(expected) + 1, dtype=np.float32)
    got = np.asarray(list(measured) + [0.0] * (len(expected) - len(measured)), dtype=np.float32)[:len(expected)]
    want = np.asarray(expected, dtype=np.float32)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=xs, y=got, name=tr("drawn (measured share)"), marker_color="#26a69a",
                         hovertemplate=tr("length {x}: {y} of the drawn spans", x="%{x}", y="%{y:.3f}")
                         + "<extra></extra>"))
    fig.add_trace(go.Scatter(x=xs, y=want, mode="lines+markers", name=tr("geometric P(l), truncated"),
                             line={"color": "#e53935", "dash": "dash"},
                             hovertemplate=tr("length {x}: P = {y}", x="%{x}", y="%{y:.3f}") + "<extra></extra>"))
    count = tr(", {n} spans", n=f"{n_spans:,}") if n_spans else ""
    fig.update_layout(title=tr("Span lengths in words: mean drawn {got}, the distribution's mean {want}{count}",
                               got=f"{mean_drawn:.2f}", want=f"{expected_mean(expected):.2f}", count=count),
                      xaxis_title=tr("span length (words)"), yaxis_title=tr("share of spans"), height=340,
                      margin={"t": 50, "b": 40}, legend={"orientation": "h", "y": -0.25}, bargap=0.15)
    fig.update_xaxes(tickvals=xs.tolist())
    return fig


def next_token_figure(tokens: Sequence[str], ids: Sequence[int], segment_ids: Sequence[int], labels: Sequence[int],
                      label_tokens: Sequence[str], special_positions: Sequence[int], *, title: str,
                      first_segment: int = 0) -> go.Figure:
    """A left-to-right model's example as rows: token, id, segment, position, target (the next token, or · where
    the label is -100) and its id. Nothing is masked: the input is the pair as it is."""
    n = len(tokens)
    special = set(int(p) for p in special_positions)
    kinds = ["target" if int(labels[i]) != -100 else ("special" if i in special else "none") for i in range(n)]
    codes_k = [NEXT_CODE[k] for k in kinds]
    seg = [NEXT_CODE["seg_a"] if s == first_segment else NEXT_CODE["seg_b"] for s in segment_ids]
    plain = [NEXT_CODE["plain"]] * n
    rows = [tr(r) for r in (mark("token"), "id", mark("segment id"), mark("position"), mark("target: token t + 1"),
                            mark("MLM label"))]
    target = [f"→ {label_tokens[i]}" if kinds[i] == "target" else "·" for i in range(n)]
    cells = [list(tokens), [str(i) for i in ids], [str(s) for s in segment_ids], [str(i) for i in range(n)], target,
             [str(int(v)) for v in labels]]
    codes = np.array([codes_k, plain, seg, plain, codes_k, codes_k], dtype=np.float32).reshape(len(rows), n)
    names = {"seg_a": tr("segment A (id {id})", id=first_segment),
             "seg_b": tr("segment B (id {id})", id=first_segment + 1)}
    categories = [(k, names.get(k, tr(label)), color) for k, label, color in NEXT_CATEGORIES]
    return category_grid(rows, cells, codes, categories, title,
                         ["target", "none", "special", "seg_a", "seg_b"])

