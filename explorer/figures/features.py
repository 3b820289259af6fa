"""Figures and tables of the Features page (pure builders, no streamlit): an SAE's feature table, a feature's top
contexts (tokens shaded by its activation), its activation histogram, its output words, a text's activations, and
the over-training view (the best number, topic and [MASK] features per saved step, against the skills chart).
Texts go through ``tr`` (the session's language); label names are ``bertcore.data.token_labels.describe_label``."""
from __future__ import annotations

import html
from collections import Counter

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bertcore.data.token_labels import describe_label
from explorer.i18n import mark, tr

FAMILY_NAMES = {"number": mark("number feature"), "topic": mark("topic feature"), "mask": mark("[MASK] feature")}
SHADE = (230, 120, 20)  # the highlight's colour (orange), its alpha ∝ activation


def label_text(label: str | None) -> str:
    return tr(describe_label(label))


def fires_on(table: dict, ft: dict, n: int = 3) -> str:
    """The tokens it fires most on (from its top contexts), most frequent first."""
    seqs = table.get("sequences", {})
    words = [seqs.get(str(c["seq"]), [""] * (c["position"] + 1))[c["position"]] for c in ft.get("top_contexts", [])]
    return ", ".join(w for w, _ in Counter(words).most_common(n))


def feature_frame(table: dict) -> pd.DataFrame:
    """One row per feature: id, label, AUROC, precision, recall, frequency, what it fires on (screen language)."""
    rows = []
    for ft in table["features"]:
        rows.append({tr("feature"): ft["id"], tr("label"): label_text(ft["label"]),
                     "AUROC": ft["auroc"], tr("precision"): ft["precision"], tr("recall"): ft["recall"],
                     tr("frequency"): ft["frequency"], tr("fires most on"): fires_on(table, ft)})
    df = pd.DataFrame(rows)
    return df.sort_values(by=["AUROC", tr("frequency")], ascending=False, na_position="last", kind="stable")


def features_csv(table: dict) -> bytes:
    """The feature table for a spreadsheet (English column names, as the CLI's JSON keys)."""
    rows = [{"id": ft["id"], "label": ft["label"] or "", "label_text": str(describe_label(ft["label"])),
             "auroc": ft["auroc"], "precision": ft["precision"], "recall": ft["recall"], "frequency": ft["frequency"],
             "max_activation": ft["max_activation"], "fires_most_on": fires_on(table, ft, 5),
             "promotes": " ".join(t for t, _ in ft.get("promotes", [])),
             "suppresses": " ".join(t for t, _ in ft.get("suppresses", []))} for ft in table["features"]]
    return pd.DataFrame(rows).to_csv(index=False, float_format="%.6g").encode("utf-8")


def _shade(tokens: list[str], acts: list[float], top: float, peak: int | None = None) -> str:
    spans = []
    for i, (t, a) in enumerate(zip(tokens, acts)):
        alpha = 0.0 if top <= 0 else max(0.0, min(1.0, a / top))
        border = "outline:2px solid #b34700;" if i == peak else ""
        spans.append(f'<span title="{a:.3f}" style="background:rgba({SHADE[0]},{SHADE[1]},{SHADE[2]},{alpha:.2f});'
                     f'{border}padding:1px 3px;margin:1px;border-radius:3px;display:inline-block">'
                     f"{html.escape(t)}</span>")
    return "".join(spans)


def contexts_html(table: dict, ft: dict) -> str:
    """The feature's top contexts, one sequence a line, every token shaded by the feature's activation there (the
    strongest token outlined; the number in each line is that token's activation)."""
    seqs = table.get("sequences", {})
    top = float(ft.get("max_activation") or 0.0)
    lines = []
    for c in ft.get("top_contexts", []):
        toks = seqs.get(str(c["seq"]), [])
        lines.append(f'<div style="margin:2px 0;font-family:monospace;font-size:13px">'
                     f'<span style="display:inline-block;width:4.5em;color:#666">{c["activation"]:.2f}</span>'
                     f'{_shade(toks, c.get("activations", [0.0] * len(toks)), top, c["position"])}</div>')
    return "".join(lines) or f"<div>{html.escape(tr('This feature never fires on the evaluation tokens.'))}</div>"


def text_html(tokens: list[str], acts: np.ndarray, top: float) -> str:
    """A typed text's tokens shaded by one feature's activation."""
    return (f'<div style="font-family:monospace;font-size:14px">'
            f'{_shade(tokens, [float(a) for a in acts], top if top > 0 else float(np.max(acts, initial=0.0)))}</div>')


def histogram_figure(hist: dict, title: str) -> go.Figure:
    """Counts of the feature's non-zero activations per bin (the zero count in the title)."""
    edges = np.asarray(hist.get("edges") or [0.0, 1.0], dtype=float)
    counts = np.asarray(hist.get("counts") or [0], dtype=float)
    centers = (edges[:-1] + edges[1:]) / 2 if len(edges) > 1 else np.array([0.0])
    fig = go.Figure(go.Bar(x=centers.astype(np.float32), y=counts.astype(np.float32),
                           width=float(edges[1] - edges[0]) if len(edges) > 1 else 1.0, marker_color="#e67814",
                           hovertemplate=tr("activation %{x:.3f}<br>tokens %{y}") + "<extra></extra>"))
    fig.update_layout(title=title or None, height=250, margin=dict(l=40, r=10, t=40 if title else 20, b=40), bargap=0.02,
                      xaxis_title=tr("activation (non-zero)"), yaxis_title=tr("tokens"))
    return fig


def words_frame(words: list) -> pd.DataFrame:
    return pd.DataFrame([{tr("word"): t, tr("Δ logit"): round(float(v), 3)} for t, v in words])


def top_features_frame(tokens: list[str], acts: np.ndarray, table: dict, n: int = 3) -> pd.DataFrame:
    """Per token of a typed text: its ``n`` most active features with their labels."""
    rows = []
    feats = table["features"]
    for i, t in enumerate(tokens):
        order = np.argsort(-acts[i], kind="stable")[:n]
        cells = [f"#{j} {label_text(feats[j]['label'])} ({acts[i, j]:.2f})" for j in order if acts[i, j] > 0]
        rows.append({tr("position"): i, tr("token"): t, tr("most active features"): " · ".join(cells)})
    return pd.DataFrame(rows)


def over_training_figure(points: list[dict], skills: pd.DataFrame | None, skill_names: dict, step: int | None,
                         title: str) -> go.Figure:
    """Top: per saved step, the best AUROC of any feature for a number, topic or [MASK] label. Bottom: the run's
    skills (share of held-out items passed, skills.csv) over the same steps. ``step``: the replayed one."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=(tr("best feature AUROC (an SAE per saved step)"),
                                        tr("skills (held-out items passed)")))
    xs = [p["step"] for p in points]
    for key, name in FAMILY_NAMES.items():
        ys = [(p["families"].get(key) or {}).get("auroc") for p in points]
        hover = [label_text((p["families"].get(key) or {}).get("label")) for p in points]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=tr(name), text=hover,
                                 hovertemplate=tr("step %{x}<br>AUROC %{y:.3f}<br>%{text}") + "<extra></extra>"),
                      row=1, col=1)
    if skills is not None and len(skills):
        for col, name in skill_names.items():
            if col in skills:
                fig.add_trace(go.Scatter(x=skills["step"].tolist(), y=skills[col].astype(float).tolist(), mode="lines",
                                         name=name, line=dict(dash="dot"), legendgroup="skills",
                                         hovertemplate=tr("step %{x}<br>%{y:.2f}") + "<extra></extra>"), row=2, col=1)
    if step is not None:
        for r in (1, 2):
            fig.add_vline(x=step, line=dict(color="#888", dash="dash"), row=r, col=1)
    fig.update_yaxes(range=[0.4, 1.02], row=1, col=1, title_text="AUROC")
    fig.update_yaxes(range=[0.0, 1.02], row=2, col=1, title_text=tr("passed"))
    fig.update_xaxes(title_text=tr("training step"), row=2, col=1)
    fig.update_layout(title=title, height=520, margin=dict(l=50, r=10, t=70, b=40),
                      legend=dict(orientation="v", x=1.02, y=1))
    return fig
