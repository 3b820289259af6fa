"""Pure plotly builders for the Train and Compare pages (no streamlit; testable without a browser).

Traces carry the history numbers unchanged as plain lists (x = step), so tests can compare them. The curves are
named after the run's objective (``Objective``): a left-to-right model's mlm_* columns hold its next-token
loss/accuracy (BERT Table 5's LTR), a SOP run's nsp_* columns its sentence-order task (ALBERT §4.6), and a
sentence_task=none run (RoBERTa §4.2) has NaN there, so it draws no sentence curve.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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
# the word-level task's name: MLM (BERT §3.1), or the next token of a left-to-right model (BERT Table 5's LTR)
WORD_TASKS = {False: mark("MLM"), True: mark("next-token")}
SENTENCE_NAMES = {"nsp": "NSP", "sop": "SOP", "none": None}  # the sentence task's name (None: there is none)
UNIT_NAMES = {"whole_word": mark("whole-word masking"), "span": mark("span masking")}  # masking_unit, but token
_SPLITS = {"mlm_loss": (mark("{task} loss (train)"), False), "eval_mlm_loss": (mark("{task} loss (held-out)"), False),
           "mlm_acc": (mark("{task} accuracy (train)"), False),
           "eval_mlm_acc": (mark("{task} accuracy (held-out)"), False),
           "nsp_loss": (mark("{task} loss (train)"), True), "eval_nsp_loss": (mark("{task} loss (held-out)"), True),
           "nsp_acc": (mark("{task} accuracy (train)"), True),
           "eval_nsp_acc": (mark("{task} accuracy (held-out)"), True)}


@dataclass(frozen=True)
class Objective:
    """What a run trained on: ``sentence_task`` nsp | sop | none (TrainConfig), ``causal`` (BertConfig
    attention_direction=left_to_right) and ``masking_unit`` token | whole_word | span. The default is BERT's."""

    sentence_task: str = "nsp"
    causal: bool = False
    masking_unit: str = "token"

    @property
    def word_task(self) -> str:
        """"MLM" or "next-token" (translated)."""
        return tr(WORD_TASKS[bool(self.causal)])

    @property
    def sentence_name(self) -> str | None:
        """"NSP", "SOP" or None (sentence_task=none: no sentence head)."""
        return SENTENCE_NAMES.get(self.sentence_task, "NSP")

    def metric_name(self, metric: str) -> str:
        """A history column's name on screen for this objective ("next-token loss (held-out)", "SOP accuracy
        (train)"); an unknown column keeps its own name."""
        if metric in _SPLITS:
            text, sentence = _SPLITS[metric]
            return tr(text, task=(self.sentence_name or "NSP") if sentence else self.word_task)
        return tr(METRIC_NAMES[metric]) if metric in METRIC_NAMES else metric

    def summary(self) -> str:
        """One phrase: "MLM + NSP", "next-token + SOP", "MLM alone", with the masking unit when it is not token."""
        head = (tr("{word} + {sentence}", word=self.word_task, sentence=self.sentence_name) if self.sentence_name
                else tr("{word} alone", word=self.word_task))
        if not self.causal and self.masking_unit != "token":
            head += " · " + (tr(UNIT_NAMES[self.masking_unit]) if self.masking_unit in UNIT_NAMES
                             else self.masking_unit)
        return head


def objective_of(train_config=None, model_config=None, model=None) -> Objective:
    """The Objective of a run from whatever is known: a TrainConfig (or its dict, train_config.json), a BertConfig
    (or dict) and/or the loaded model (``model.sentence_task``, ``model.config``, restored by load_checkpoint)."""
    def get(obj, name, default):
        if obj is None:
            return default
        return obj.get(name, default) if isinstance(obj, Mapping) else getattr(obj, name, default)

    if model_config is None and model is not None:
        model_config = getattr(model, "config", None)
    task = get(train_config, "sentence_task", None) or get(model, "sentence_task", None) or "nsp"
    causal = get(model_config, "attention_direction", "bidirectional") == "left_to_right"
    return Objective(str(task), causal, str(get(train_config, "masking_unit", None) or "token"))


def _as_histories(histories) -> dict[str, pd.DataFrame]:
    if isinstance(histories, pd.DataFrame):
        return {"": histories}
    return {str(k): v for k, v in dict(histories).items()}


def curves_figure(histories: pd.DataFrame | Mapping[str, pd.DataFrame], metrics: Sequence[str],
                  title: str = "", yaxis_title: str = "", height: int = 320, log_y: bool = False,
                  baseline: float | None = None, baseline_name: str = "",
                  objective: Objective | None = None) -> go.Figure:
    """One line per (history, metric). Train metrics are lines; held-out (eval_*) metrics are lines with
    markers drawn only where evaluated (NaN rows dropped: a run without a sentence task draws no NSP line).
    ``histories``: a DataFrame or {label: DataFrame}; ``objective`` names the curves (default: MLM and NSP)."""
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
            name = objective.metric_name(m) if objective is not None else (
                tr(METRIC_NAMES[m]) if m in METRIC_NAMES else m)
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


def _tasks(objective: Objective | None) -> str:
    o = objective or Objective()
    return (tr("{word} and {sentence}", word=o.word_task, sentence=o.sentence_name) if o.sentence_name
            else o.word_task)


def loss_figure(histories, objective: Objective | None = None, **kw) -> go.Figure:
    title = (tr("Loss: MLM and NSP, train and held-out") if objective in (None, Objective()) else
             tr("Loss: {tasks}, train and held-out", tasks=_tasks(objective)))
    return curves_figure(histories, LOSS_METRICS, title=kw.pop("title", title),
                         yaxis_title=tr("cross-entropy (nats)"), objective=objective, **kw)


def accuracy_figure(histories, unigram_baseline: float | None = None, objective: Objective | None = None,
                    **kw) -> go.Figure:
    """Accuracy curves with the unigram baseline (always the most frequent token), the only level drawn: there is
    no sentence-task baseline (a sentence_task=none run has no such curve)."""
    if objective in (None, Objective()):
        title, base = tr("Accuracy: MLM and NSP, train and held-out"), tr("MLM: always the most frequent token")
    else:
        title = tr("Accuracy: {tasks}, train and held-out", tasks=_tasks(objective))
        base = tr("{word}: always the most frequent token", word=objective.word_task)
    fig = curves_figure(histories, ACC_METRICS, title=kw.pop("title", title), yaxis_title=tr("accuracy"),
                        baseline=unigram_baseline, baseline_name=base, objective=objective, **kw)
    fig.update_yaxes(range=[0, 1.02])
    return fig


def lr_figure(histories, **kw) -> go.Figure:
    return curves_figure(histories, ["lr"], title=kw.pop("title", tr("Learning rate (warmup, then linear decay)")),
                         yaxis_title="lr", **kw)


def throughput_figure(histories, **kw) -> go.Figure:
    return curves_figure(histories, ["tokens_per_s"], title=kw.pop("title", tr("Throughput")),
                         yaxis_title=tr("tokens / s"), **kw)
