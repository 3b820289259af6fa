"""Pure plotly builders for the Train and Compare pages (no streamlit; testable without a browser).

Traces carry the history numbers unchanged as plain lists (x = step), so tests can compare them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from explorer.i18n import mark, tr

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"]
DASHES = ["solid", "dash", "dot", "dashdot"]

METRIC_NAMES = {
    "mlm_loss": mark("MLM loss (train)"), "nsp_loss": mark("NSP loss (train)"),
    "eval_mlm_loss": mark("MLM loss (held-out)"), "eval_nsp_loss": mark("NSP loss (held-out)"),
    "mlm_acc": mark("MLM accuracy (train)"), "nsp_acc": mark("NSP accuracy (train)"),
    "eval_mlm_acc": mark("MLM accuracy (held-out)"), "eval_nsp_acc": mark("NSP accuracy (held-out)"),
    "lr": mark("learning rate"), "tokens_per_s": mark("tokens / s"),
}
LOSS_METRICS = ["mlm_loss", "nsp_loss", "eval_mlm_loss", "eval_nsp_loss"]
ACC_METRICS = ["mlm_acc", "nsp_acc", "eval_mlm_acc", "eval_nsp_acc"]


def _as_histories(histories) -> dict[str, pd.DataFrame]:
    if isinstance(histories, pd.DataFrame):
        return {"": histories}
    return {str(k): v for k, v in dict(histories).items()}


def curves_figure(histories: pd.DataFrame | Mapping[str, pd.DataFrame], metrics: Sequence[str],
                  title: str = "", yaxis_title: str = "", height: int = 320, log_y: bool = False,
                  baseline: float | None = None, baseline_name: str = "") -> go.Figure:
    """One line per (history, metric). Train metrics are lines; held-out (eval_*) metrics are lines with
    markers drawn only where evaluated (NaN rows dropped). ``histories``: a DataFrame or {label: DataFrame}."""
    fig = go.Figure()
    hs = _as_histories(histories)
    bases = list(dict.fromkeys(m[5:] if m.startswith("eval_") else m for m in metrics))
    for hi, (label, df) in enumerate(hs.items()):
        if df is None or len(df) == 0:
            continue
        for m in metrics:
            if m not in df.columns or "step" not in df.columns:
                continue
            sub = df[["step", m]].dropna()
            if sub.empty:
                continue
            name = tr(METRIC_NAMES[m]) if m in METRIC_NAMES else m
            if label:
                name = f"{label} · {name}"
            is_eval = m.startswith("eval_")
            base = m[5:] if is_eval else m
            color = PALETTE[(hi if len(hs) > 1 else bases.index(base)) % len(PALETTE)]
            fig.add_trace(go.Scatter(
                x=[int(s) for s in sub["step"].tolist()], y=[float(v) for v in sub[m].tolist()], name=name,
                mode="lines+markers" if is_eval else "lines",
                line=dict(color=color, dash="dot" if is_eval else "solid", width=2 if is_eval else 1.5),
                marker=dict(size=6) if is_eval else None,
                meta=dict(metric=m, label=label),
            ))
    if baseline is not None and np.isfinite(baseline):
        fig.add_hline(y=float(baseline), line_dash="dash", line_color="gray",
                      annotation_text=baseline_name, annotation_position="bottom right")
    fig.update_layout(title=title, height=height, margin=dict(l=40, r=10, t=40 if title else 10, b=30),
                      xaxis_title=tr("step"), yaxis_title=yaxis_title, legend=dict(orientation="h", y=-0.25),
                      uirevision="keep")
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def thin_history(df: pd.DataFrame | None, max_rows: int = 150) -> pd.DataFrame | None:
    """For the live charts: every k-th step (at most ~``max_rows``), every evaluated step and the last one.

    The browser redraws the charts on every poll; a few hundred points per trace look the same and keep
    chromium's redraws from taking CPU away from training on a 2-core machine."""
    if df is None or len(df) <= max_rows:
        return df
    k = -(-len(df) // max_rows)
    keep = np.zeros(len(df), dtype=bool)
    keep[::k] = True
    keep[-1] = True
    if "eval_mlm_loss" in df.columns:
        keep |= df["eval_mlm_loss"].notna().to_numpy()
    return df[keep]


def loss_figure(histories, **kw) -> go.Figure:
    return curves_figure(histories, LOSS_METRICS, title=kw.pop("title", tr("Loss: MLM and NSP, train and held-out")),
                         yaxis_title=tr("cross-entropy (nats)"), **kw)


def accuracy_figure(histories, unigram_baseline: float | None = None, **kw) -> go.Figure:
    fig = curves_figure(histories, ACC_METRICS, title=kw.pop("title", tr("Accuracy: MLM and NSP, train and held-out")),
                        yaxis_title=tr("accuracy"), baseline=unigram_baseline,
                        baseline_name=tr("MLM: always the most frequent token"), **kw)
    fig.update_yaxes(range=[0, 1.02])
    return fig


def lr_figure(histories, **kw) -> go.Figure:
    return curves_figure(histories, ["lr"], title=kw.pop("title", tr("Learning rate (warmup, then linear decay)")),
                         yaxis_title="lr", **kw)


def throughput_figure(histories, **kw) -> go.Figure:
    return curves_figure(histories, ["tokens_per_s"], title=kw.pop("title", tr("Throughput")),
                         yaxis_title=tr("tokens / s"), **kw)
