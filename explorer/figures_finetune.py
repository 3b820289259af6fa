"""Pure plotly builders for the Fine-tune page (no streamlit; testable without a browser).

Traces carry the numbers unchanged as plain lists so tests can compare them with the histories.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

COLORS = {"pretrained": "#1f77b4", "random init": "#d62728"}


def _color(label: str, i: int) -> str:
    return COLORS.get(label, ["#2ca02c", "#9467bd", "#ff7f0e"][i % 3])


def heldout_accuracy_figure(histories: Mapping[str, pd.DataFrame], chance: float | None = None,
                            height: int = 340, title: str = "Held-out accuracy while fine-tuning") -> go.Figure:
    """One line per model: held-out accuracy (``eval_accuracy``) at every evaluated step."""
    fig = go.Figure()
    for i, (label, df) in enumerate(histories.items()):
        if df is None or not len(df) or "eval_accuracy" not in df:
            continue
        ev = df[["step", "eval_accuracy"]].dropna()
        if ev.empty:
            continue
        fig.add_trace(go.Scatter(x=[int(s) for s in ev["step"]], y=[float(a) for a in ev["eval_accuracy"]],
                                 name=f"from {label} weights", mode="lines+markers",
                                 line=dict(color=_color(label, i), width=2), meta=dict(label=label)))
    if chance is not None:
        fig.add_hline(y=float(chance), line_dash="dash", line_color="gray", annotation_text="chance",
                      annotation_position="bottom right")
    fig.update_layout(title=title, height=height, xaxis_title="fine-tuning step", yaxis_title="held-out accuracy",
                      yaxis=dict(range=[0, 1.02], tickformat=".0%"), legend=dict(orientation="h", y=-0.22),
                      margin=dict(l=50, r=10, t=40, b=30), uirevision="keep")
    return fig


def probabilities_figure(labels: Sequence[str], probs: Mapping[str, Sequence[float]], height: int = 260) -> go.Figure:
    """Grouped horizontal bars: P(class) for each model."""
    fig = go.Figure()
    for i, (model, p) in enumerate(probs.items()):
        fig.add_trace(go.Bar(y=list(labels), x=[float(v) for v in p], orientation="h", name=f"from {model} weights",
                             marker_color=_color(model, i), text=[f"{float(v):.1%}" for v in p],
                             textposition="auto", meta=dict(label=model)))
    fig.update_layout(barmode="group", height=height, xaxis=dict(range=[0, 1], tickformat=".0%", title="probability"),
                      margin=dict(l=10, r=10, t=10, b=30), legend=dict(orientation="h", y=-0.3))
    return fig
