"""Pure builders for the Lab page (texts through explorer.i18n; testable without a browser): a study's table as
rows of text cells (``bertcore.lab.table.cell``: mean ± sd over seeds, ▲/▼ where the paired test finds a
difference, n/a where a metric does not apply) beside the paper's own columns, the list of its runs, and the
held-out curves (mean over seeds per variant, ``bertcore.lab.table.mean_curves``) as one plotly figure.

Traces carry the curves' numbers unchanged as plain lists, so tests compare them with ``mean_curves``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bertcore.lab import table as T
from bertcore.lab.studies import METRICS
from explorer.i18n import mark, tr

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf", "#393b79", "#637939")  # the order of bertcore.lab.table's SVG, so both files agree
# The held-out columns of a run's history.csv the curves show, with their axis titles
CURVES = {"eval_mlm_acc": mark("held-out MLM accuracy"), "eval_nsp_acc": mark("held-out NSP accuracy"),
          "eval_accuracy": mark("held-out accuracy")}
STATUS_WORDS = {"missing": mark("to do"), "stopped": mark("stopped part-way"), "trained": mark("trained, not scored"),
                "training": mark("training"), "evaluating": mark("scoring"), "scored": mark("scored"),
                "failed": mark("failed")}  # bertcore.launch.study.CELL_STATES on screen


def metric_label(key: str) -> str:
    return tr(METRICS[key][0]) if key in METRICS else key


def table_rows(data: Mapping) -> tuple[list[str], list[dict]]:
    """(columns, rows) of the study's table: variant, seeds scored, each metric some variant has a value for (our
    mean ± sd), then the paper's columns. A metric a study does not score is left out; a variant without a value
    for a shown metric reads n/a."""
    variants = list(data.get("variants") or [])
    cols = T.used_metrics(variants)
    paper = list(data.get("paper_columns") or [])
    reference = data.get("reference")
    head = [tr("variant"), tr("seeds scored")] + [metric_label(k) for k in cols] + [
        tr("paper: {column}", column=c) for c in paper]
    rows = []
    for v in variants:
        name = str(v["name"]) + (" " + tr("(reference)") if v["name"] == reference else "")
        n = sum(1 for r in v.get("runs") or [] if r.get("metrics"))
        row = {head[0]: name, head[1]: f"{n}/{len(v.get('runs') or [])}"}
        for k in cols:
            row[metric_label(k)] = T.cell(v, k)
        for c in paper:
            x = (v.get("paper") or {}).get(c)
            row[tr("paper: {column}", column=c)] = "" if x is None else f"{x:g}"
        rows.append(row)
    return head, rows


def metric_help(data: Mapping) -> dict[str, str]:
    """Column label -> what the metric measures (the table's column help and the legend)."""
    variants = list(data.get("variants") or [])
    return {metric_label(k): tr(METRICS[k][1]) for k in T.used_metrics(variants) if k in METRICS}


def run_rows(data: Mapping, states: Mapping | None = None) -> list[dict]:
    """One row per run of the study, in the study's order: variant, seed, status (``states`` of a live study wins
    over study.json's), and each of its metrics (None where it has none)."""
    variants = list(data.get("variants") or [])
    cols = T.used_metrics(variants)
    out = []
    for v in variants:
        for r in v.get("runs") or []:
            seed = int(r["seed"])
            status = (states or {}).get((v["name"], seed), r.get("status"))
            row = {tr("variant"): v["name"], tr("seed"): seed, tr("status"): tr(STATUS_WORDS.get(status, status))}
            m = r.get("metrics") or {}
            for k in cols:
                x = m.get(k)
                row[metric_label(k)] = float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None
            out.append(row)
    return out


def curve_columns(data: Mapping) -> list[str]:
    """The history columns the curves show: MLM and NSP accuracy for pretraining, accuracy for a fine-tune study."""
    return ["eval_accuracy"] if data.get("kind") == "finetune" else ["eval_mlm_acc", "eval_nsp_acc"]


def curves_figure(curves: Mapping[str, Mapping[str, Sequence]], title: str = "", height: int = 380) -> go.Figure:
    """``curves``: history column -> {variant: [(step, mean over seeds)]} (``table.mean_curves``); one panel per
    column, one line per variant in the same colour on every panel."""
    columns = list(curves)
    fig = make_subplots(rows=1, cols=max(1, len(columns)), subplot_titles=[tr(CURVES.get(c, c)) for c in columns],
                        horizontal_spacing=0.08)
    names: list[str] = []
    for c in columns:
        for name in curves[c]:
            if name not in names:
                names.append(name)
    for j, c in enumerate(columns):
        for name, pts in curves[c].items():
            i = names.index(name)
            fig.add_trace(go.Scatter(x=[int(s) for s, _ in pts], y=[float(y) for _, y in pts], name=name,
                                     mode="lines+markers", legendgroup=name, showlegend=j == 0 or name not in
                                     curves[columns[0]], line=dict(color=COLORS[i % len(COLORS)], width=2),
                                     marker=dict(size=5), meta=dict(variant=name, column=c)),
                          row=1, col=j + 1)
        fig.update_xaxes(title_text=tr("step"), row=1, col=j + 1)
        fig.update_yaxes(range=[0, 1.02], tickformat=".0%", row=1, col=j + 1)
    fig.update_layout(title=title or tr("Held-out curves (mean over seeds)"), height=height,
                      legend=dict(orientation="h", y=-0.25), margin=dict(l=50, r=10, t=70, b=40))
    return fig
