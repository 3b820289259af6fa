"""Pure plotly builders for the Fine-tune page (texts through explorer.i18n; testable without a browser).

Traces carry the numbers unchanged as plain lists so tests can compare them with the histories.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from explorer.i18n import mark, tr

COLORS = {"pretrained": "#1f77b4", "random init": "#d62728"}
STARTS = {"pretrained": mark("from pretrained weights"), "random init": mark("from random init weights")}


def _color(label: str, i: int) -> str:
    return COLORS.get(label, ["#2ca02c", "#9467bd", "#ff7f0e"][i % 3])


def _label_name(label: str) -> str:
    return tr(STARTS[label]) if label in STARTS else tr("from {label} weights", label=label)


def live_charts(labels: Sequence[str]) -> list[dict]:
    """The live chart's layout (``explorer.livechart`` ``charts``): held-out accuracy of every model on one chart
    (with the chance line), training loss on the other."""
    acc = [{"name": _label_name(k), "series": "evals", "col": i + 1, "color": _color(k, i), "held": True}
           for i, k in enumerate(labels)]
    loss = [{"name": _label_name(k), "series": "train", "col": i + 1, "color": _color(k, i), "opacity": 0.7}
            for i, k in enumerate(labels)]
    return [{"id": "ft_acc", "title": tr("Held-out accuracy while fine-tuning"), "ytitle": tr("held-out accuracy"),
             "xtitle": tr("fine-tuning step"), "yrange": [0, 1.02], "baseline": True, "baseline_text": tr("chance") + " ",
             "traces": acc},
            {"id": "ft_loss", "title": tr("Training loss (cross-entropy)"), "ytitle": tr("nats"),
             "xtitle": tr("fine-tuning step"), "yrange": None, "baseline": False, "traces": loss}]


def sweep_figure(points: Sequence[Mapping], chance: float | None = None, height: int = 340,
                 planned: Sequence[int] = ()) -> go.Figure:
    """The label sweep: final held-out accuracy against the number of labelled examples (log x), one line per
    starting point. ``points``: dicts with labels_used, pretrained, random_init (``bertcore.finetune.sweep.sweep_points``)."""
    fig = go.Figure()
    xs = [int(p["labels_used"]) for p in points]
    for i, (key, label) in enumerate((("pretrained", "pretrained"), ("random_init", "random init"))):
        fig.add_trace(go.Scatter(x=xs, y=[float(p[key]) for p in points], name=_label_name(label),
                                 mode="lines+markers", line=dict(color=_color(label, i), width=2),
                                 marker=dict(size=8), meta=dict(label=label)))
    if chance is not None:
        fig.add_hline(y=float(chance), line_dash="dash", line_color="gray", annotation_text=tr("chance"),
                      annotation_position="bottom right")
    todo = len(planned) - len(points)
    title = tr("Final held-out accuracy against the number of labels")
    if todo > 0:
        title += " " + tr("({done} of {n} points)", done=len(points), n=len(planned))
    fig.update_layout(title=title, height=height, xaxis=dict(type="log", title=tr("labelled training examples (log)")),
                      yaxis=dict(range=[0, 1.02], tickformat=".0%", title=tr("held-out accuracy")),
                      legend=dict(orientation="h", y=-0.22), margin=dict(l=50, r=10, t=40, b=30))
    return fig


def probabilities_figure(labels: Sequence[str], probs: Mapping[str, Sequence[float]], height: int = 260) -> go.Figure:
    """Grouped horizontal bars: P(class) for each model."""
    fig = go.Figure()
    for i, (model, p) in enumerate(probs.items()):
        fig.add_trace(go.Bar(y=list(labels), x=[float(v) for v in p], orientation="h", name=_label_name(model),
                             marker_color=_color(model, i), text=[f"{float(v):.1%}" for v in p],
                             textposition="auto", meta=dict(label=model)))
    fig.update_layout(barmode="group", height=height, xaxis=dict(range=[0, 1], tickformat=".0%", title=tr("probability")),
                      margin=dict(l=10, r=10, t=10, b=30), legend=dict(orientation="h", y=-0.3))
    return fig
