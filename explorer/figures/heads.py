"""Figures of head roles (Clark et al. 2019) and the pruning curve (Michel et al. 2019): pure plotly builders.

Inputs are what ``bertcore.analysis.heads`` / ``.pruning`` return (0-based layers and heads); the figures number
layers and heads from 1. Texts on the figures come in as arguments (``labels``: role -> shown name; axis titles)
so the page can pass them in the session's language.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bertcore.analysis.heads import MEASURES, ROLES
from explorer.i18n import tr

# one colour per role (ROLES order), told apart also without colour vision (text labels in the cells)
ROLE_COLOURS = {"previous-token": "#1f77b4", "next-token": "#17becf", "self": "#9467bd", "[CLS]": "#d62728",
                "[SEP]": "#ff7f0e", "punctuation": "#8c564b", "broad": "#c7c7c7", "mixed": "#f2f2f2"}
MEASURE_SHORT = {"to_prev": "prev", "to_next": "next", "to_self": "self", "to_cls": "[CLS]", "to_sep": "[SEP]",
                 "to_punct": "punct", "entropy": "entropy"}


def _discrete_scale() -> list:
    """A plotly colorscale mapping the integer role index (0 .. len(ROLES)-1) to its colour, in flat bands."""
    n = len(ROLES)
    scale = []
    for i, r in enumerate(ROLES):
        scale += [[i / n, ROLE_COLOURS[r]], [(i + 1) / n, ROLE_COLOURS[r]]]
    return scale


def _role_index(roles) -> np.ndarray:
    return np.array([[ROLES.index(r) for r in row] for row in roles], dtype=float)


def role_map_figure(measures: dict, roles: Sequence[Sequence[str]], labels: dict | None = None,
                    final_steps: Sequence[Sequence[int]] | None = None, title: str = "",
                    step_word: str = "since step", layer_word: str = "layer", head_word: str = "head") -> go.Figure:
    """Layers (rows, layer 1 at the top) x heads grid coloured by role; each cell says the role and the head's
    largest share (e.g. "prev 0.47": what a *mixed* head leans to), the hover all seven measures.
    ``final_steps`` [L][H]: the step each head took its final role (a third line in the cell)."""
    labels = labels or {r: r for r in ROLES}
    L, H = len(roles), len(roles[0])
    z = _role_index(roles)
    shares = [k for k in MEASURES if k != "entropy"]

    def cell(layer: int, h: int) -> str:  # the role, the largest share (what a mixed head leans to), the step
        top = max(shares, key=lambda k: float(measures[k][layer][h]))
        out = [labels.get(roles[layer][h], roles[layer][h]), f"{MEASURE_SHORT[top]} {float(measures[top][layer][h]):.2f}"]
        if final_steps is not None:
            out.append(f"{step_word} {final_steps[layer][h]}")
        return "<br>".join(out)

    text = [[cell(layer, h) for h in range(H)] for layer in range(L)]
    hover = [["<br>".join([f"{layer_word} {layer + 1}, {head_word} {h + 1}: <b>{labels.get(roles[layer][h], roles[layer][h])}</b>"]
                          + [f"{MEASURE_SHORT[k]}: {float(measures[k][layer][h]):.3f}" for k in MEASURES])
              for h in range(H)] for layer in range(L)]
    fig = go.Figure(go.Heatmap(z=z, x=[f"{head_word} {h + 1}" for h in range(H)],
                               y=[f"{layer_word} {i + 1}" for i in range(L)],
                               zmin=-0.5, zmax=len(ROLES) - 0.5, colorscale=_discrete_scale(), showscale=False,
                               text=text, texttemplate="%{text}", hovertext=hover, hoverinfo="text",
                               xgap=2, ygap=2, showlegend=False, name=""))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(side="top")  # head labels above the grid, the role legend below it
    for r in ROLES:  # a legend of the roles (invisible points)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=labels.get(r, r), showlegend=True,
                                 marker=dict(size=12, symbol="square", color=ROLE_COLOURS[r],
                                             line=dict(width=1, color="#888"))))
    fig.update_layout(title=title or None, height=max(260, 75 * L + 130), margin=dict(l=10, r=10, t=70, b=10),
                      legend=dict(orientation="h", yanchor="top", y=-0.04), plot_bgcolor="white")
    return fig


def role_timeline_figure(steps: Sequence[int], roles_per_step: Sequence, loss_steps: Sequence[int] = (),
                         mlm_loss: Sequence[float] = (), final_steps: Sequence[Sequence[int]] | None = None,
                         labels: dict | None = None, loss_title: str = "MLM loss", step_title: str = "step",
                         current_step: int | None = None) -> go.Figure:
    """Top: the run's MLM loss against the step. Bottom: one row per head ("L1 H1"), one column per saved step,
    coloured by the head's role at that step; a diamond marks the step each head took its final role."""
    labels = labels or {r: r for r in ROLES}
    L, H = len(roles_per_step[-1]), len(roles_per_step[-1][0])
    names = [f"L{layer + 1} H{h + 1}" for layer in range(L) for h in range(H)]
    z = np.array([[ROLES.index(per[layer][h]) for per in roles_per_step] for layer in range(L) for h in range(H)],
                 dtype=float)
    hover = [[f"{names[r]}, {step_title} {steps[c]}: {labels.get(ROLES[int(z[r, c])], ROLES[int(z[r, c])])}"
              for c in range(len(steps))] for r in range(len(names))]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.35, 0.65], vertical_spacing=0.04)
    if len(loss_steps):
        fig.add_trace(go.Scatter(x=list(loss_steps), y=list(mlm_loss), mode="lines", name=loss_title,
                                 line=dict(color="#444")), row=1, col=1)
    xs = list(steps)  # each column is centred on its saved step
    fig.add_trace(go.Heatmap(z=z, x=xs, y=names, zmin=-0.5, zmax=len(ROLES) - 0.5, colorscale=_discrete_scale(),
                             showscale=False, hovertext=hover, hoverinfo="text", ygap=1, showlegend=False, name=""),
                  row=2, col=1)
    if final_steps is not None:
        fig.add_trace(go.Scatter(x=[final_steps[layer][h] for layer in range(L) for h in range(H)], y=names,
                                 mode="markers", name=tr("final role from"), marker=dict(symbol="diamond", size=9,
                                                                                    color="black"),
                                 hoverinfo="skip"), row=2, col=1)
    if current_step is not None:
        fig.add_vline(x=current_step, line_dash="dot", line_color="#888")
    fig.update_yaxes(autorange="reversed", row=2, col=1)
    fig.update_yaxes(title_text=loss_title, row=1, col=1)
    fig.update_xaxes(title_text=step_title, row=2, col=1)
    fig.update_layout(height=max(320, 22 * len(names) + 220), margin=dict(l=10, r=10, t=20, b=10),
                      showlegend=False, plot_bgcolor="white")
    return fig


def pruning_curve_figure(points: Sequence[dict], mlm_name: str = "MLM accuracy", nsp_name: str = "NSP accuracy",
                         x_title: str = "heads removed", y_title: str = "held-out accuracy",
                         order: Sequence[dict] | None = None) -> go.Figure:
    """Held-out MLM and NSP accuracy against the number of heads removed (least important first)."""
    x = [p["removed"] for p in points]
    removed = ["none"] + [f"L{o['layer'] + 1} H{o['head'] + 1}" for o in (order or [])]
    custom = removed if len(removed) == len(points) else None
    fig = go.Figure()
    for key, name, colour in (("mlm_acc", mlm_name, "#1f77b4"), ("nsp_acc", nsp_name, "#ff7f0e")):
        fig.add_trace(go.Scatter(x=x, y=[p[key] for p in points], mode="lines+markers", name=name,
                                 line=dict(color=colour), customdata=custom,
                                 hovertemplate=f"{name}: %{{y:.3f}}<br>{x_title}: %{{x}}"
                                 + ("<br>last removed: %{customdata}" if custom else "") + "<extra></extra>"))
    fig.update_layout(height=320, margin=dict(l=10, r=10, t=20, b=10), xaxis_title=x_title, yaxis_title=y_title,
                      yaxis_range=[0, 1.02], legend=dict(orientation="h", y=-0.25))
    return fig
