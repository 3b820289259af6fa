"""Predict page, *Switch heads off*: head ablation (Michel et al. 2019) on the active model, with the held-out
metrics on fixed pairs of the built-in corpus (``bertcore.analysis.ablation``) and the predictions above with the
heads off. The metrics are masked-LM and NSP ones, so a left-to-right model and a model without a sentence head are
told why the section does not apply to them.
"""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from bertcore.analysis import ablation as ab
from bertcore.analysis.ablation import DEFAULT_EXAMPLES, held_out_batches
from bertcore.analysis.inference import sentence_head_label
from explorer.export import importance_csv, plotly_config
from explorer.figures.explain import METRIC_LABELS, importance_figure
from explorer.i18n import frozen, mark, tr
from explorer.page_errors import user_action
from explorer.session import workspace
from explorer.session.memo import memo as shared_memo

MAX_MASK_CHARTS = 12
HELD_OUT_LABELS = {"mlm_loss": mark("held-out MLM loss"), "mlm_acc": mark("held-out MLM acc"),
                   "nsp_acc": mark("held-out NSP acc")}


def _cached(key: tuple, compute):
    """A small per-session memo (the last few results), so reruns from other widgets do not recompute."""
    memo = st.session_state.setdefault("pred_memo", {})
    if key not in memo:
        if len(memo) >= 12:
            memo.pop(next(iter(memo)))
        memo[key] = compute()
    return memo[key]


def _held_out(am):
    """The fixed held-out batches for this model's tokenizer (built-in corpus, its training settings)."""
    corpus, _ = workspace.shared_corpus_and_tokenizer()
    tc = getattr(am.bundle, "train_config", None)
    max_len = am.model.config.max_position_embeddings
    return shared_memo(am.tokenizer, ("held_out", corpus.name, _settings(tc), max_len),
                lambda: held_out_batches(am.tokenizer, corpus, tc, DEFAULT_EXAMPLES, max_len=max_len))


def _settings(tc) -> str | None:
    """A training config as a cache key (None: the defaults)."""
    if not tc:
        return None
    return json.dumps(tc.to_dict() if hasattr(tc, "to_dict") else dict(tc), sort_keys=True, default=str)


def not_applicable(active) -> str | None:
    """Why the held-out MLM + NSP metrics cannot be measured on this model (a sentence for the page), or None."""
    model = active.model
    if getattr(model.config, "causal", False):
        return tr("{model} reads left to right and predicts the next token; the held-out metrics here are masked-LM "
                  "and NSP ones on masked pairs, which such a model never saw, so head ablation is not measured for "
                  "it.", model=active.label)
    if getattr(model, "has_mlm_head", True) and getattr(model, "sentence_task", "nsp") == "none":
        return tr("{model} was pretrained with masked LM alone (sentence_task = none, as RoBERTa); the held-out "
                  "metrics here include NSP, which its untrained sentence head cannot give, so head ablation is not "
                  "measured for it.", model=active.label)
    if not (getattr(model, "has_mlm_head", True) and getattr(model, "has_nsp_head", True)):
        return tr("{model} has no MLM or NSP head, so switching heads off has no prediction to change here.",
                  model=active.label)
    return None


@user_action("Switch heads off")
def render(active, fill, pair, predict) -> None:
    """The section (Michel et al. 2019): heads switched off by click, the held-out metrics and the predictions
    above before and after, and the importance map. ``predict(am, a, b, top_k, heads=())`` is the page's memoised
    prediction."""
    st.subheader(tr("Switch heads off"))
    st.markdown(tr("Michel et al. (2019) asked whether all heads are needed. Click heads to switch them off (their "
                   "attention probabilities are multiplied by 0, `head_mask`) and watch the predictions above and the "
                   "held-out metrics on fixed pairs of the built-in corpus change (`bertcore.analysis.ablation`)."))
    model = active.model
    why = not_applicable(active)
    if why:
        st.info(why)
        return
    L, H = int(model.config.num_hidden_layers), int(model.config.num_attention_heads)
    off = st.pills(tr("Heads switched off"), list(range(L * H)), format_func=lambda i: f"L{i // H + 1} H{i % H + 1}",
                   selection_mode="multi", key=f"pred_abl_heads_{L}x{H}") or []
    heads = [(i // H, i % H) for i in off]
    mask = ab.head_mask_for(heads, L, H)
    with user_action(tr("Evaluate with the heads off")) as act:
        batches = _held_out(active)
        tc = getattr(active.bundle, "train_config", None)
        data_key = (_settings(tc), model.config.max_position_embeddings)
        base = shared_memo(model, ("base", *data_key), lambda: ab.evaluate(model, batches))
        after = ab.evaluate(model, batches, mask) if heads else base
    if act.failed:
        return
    m = st.columns(3)
    for col, k in zip(m, ("mlm_loss", "mlm_acc", "nsp_acc")):
        col.metric(tr(HELD_OUT_LABELS[k]), f"{after[k]:.4f}",
                   delta=f"{after[k] - base[k]:+.3g}" if heads else None,
                   delta_color="inverse" if k.endswith("loss") else "normal")
    n_examples = sum(int(b["input_ids"].shape[0]) for b in batches)
    st.caption(tr("Over {n} held-out examples from the built-in corpus's held-out pairs, each masked once "
                  "with fixed masks (`bertcore.analysis.ablation.held_out_batches`).", n=n_examples))
    rows = []
    inputs = ((fill[0], None, fill[1]),) if fill else ()
    for a, b, top_k in inputs + (((pair[0], pair[1], 5),) if pair else ()):
        # all heads on: the prediction above (memoised); heads off: one more forward pass, only when some are off
        on = predict(active, a, b, top_k)
        now = predict(active, a, b, top_k, heads) if heads else on
        if b is not None and on.p_is_next is not None:
            rows.append({"prediction": sentence_head_label(model), "all heads on": f"{on.p_is_next:.3f}",
                         "with the heads off": f"{now.p_is_next:.3f}"})
            continue
        for k, (m_on, m_off) in enumerate(zip(on.masks[:MAX_MASK_CHARTS], now.masks)):
            rows.append({"prediction": f"[MASK] {k + 1}",
                         "all heads on": ", ".join(f"{t} {p:.2f}" for t, p in m_on.candidates[:3]),
                         "with the heads off": ", ".join(f"{t} {p:.2f}" for t, p in m_off.candidates[:3])})
    if rows:
        headers = {k: tr(k) for k in (mark("prediction"), mark("all heads on"), mark("with the heads off"))}
        st.dataframe(pd.DataFrame(rows).rename(columns=headers), hide_index=True, key="pred_abl_table")
    st.markdown(tr("**Importance map**: every head switched off alone; the change of a held-out metric."))
    imp_key = ("importance", active.label, id(model))
    memo = st.session_state.get("pred_memo", {})
    if imp_key not in memo and not st.button(tr("Compute the importance map ({n} evaluations)", n=L * H),
                                             key="pred_abl_importance"):
        return
    imp = _cached(imp_key, lambda: shared_memo(model, ("importance", *data_key),
                                        lambda: ab.head_importance(model, batches, baseline=base)))
    metric = st.segmented_control(tr("Metric"), list(METRIC_LABELS), default="d_mlm_loss",
                                  format_func=frozen(lambda k: tr(METRIC_LABELS[k])), key="pred_abl_metric", required=True)
    st.plotly_chart(importance_figure(imp["heads"], L, H, metric or "d_mlm_loss", off=heads), key="pred_abl_map",
                    config=plotly_config("head_importance", "svg"))
    st.download_button(tr("Importance map as CSV"), lambda: importance_csv(imp["heads"]), file_name="head_importance.csv",
                       mime="text/csv", key="pred_dl_importance", on_click="ignore")
