"""Overview: the BERT pipeline from text to the two pretraining heads, and the active model's card."""
from pathlib import Path

import pandas as pd
import streamlit as st

from bertcore.model.bert import count_parameters
from bertcore.model.formulas import formulas
from explorer.session import state
from explorer.parts import run_status
from explorer.parts import tour
from explorer.i18n import mark, tr
from explorer.session.memo import memo, memo_shown
from explorer.figures.overview import pipeline_figure, segment_labels

PAGES_DIR = Path(__file__).resolve().parent

# pipeline step -> pages that explain it (file, link label)
STEP_LINKS = [
    (mark("Text → tokens"), [("data_tokens.py", mark("Data & tokens"))]),
    (mark("Embeddings"), [("positional_encoding.py", mark("Positional encoding")), ("embeddings.py", mark("Embeddings"))]),
    (mark("Encoder layers"), [("attention.py", mark("Attention"))]),
    (mark("MLM / NSP heads"), [("masking_nsp.py", mark("Masking & NSP")), ("predict.py", mark("Predict"))]),
    (mark("Pretraining"), [("train.py", mark("Train")), ("compare.py", mark("Compare designs"))]),
]


def _link(fname: str, label: str) -> None:
    if (PAGES_DIR / fname).exists():
        st.page_link(f"app_pages/{fname}", label=tr(label), icon=":material/arrow_forward:")


def model_card(model) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(config table, parameters per part) of a BertForPreTraining."""
    cfg = model.config.to_dict()
    cfg_df = pd.DataFrame({"field": list(cfg), "value": [str(v) for v in cfg.values()]})
    parts = count_parameters(model)
    total = parts.get("total", sum(parts.values()))
    rows = [(k, int(v), f"{100 * v / total:.1f}%" if total else "–") for k, v in parts.items() if k != "total"]
    rows.append(("total", int(total), "100%"))
    _ = (mark("field"), mark("value"), mark("part"), mark("parameters"), mark("share"))  # headers: tr() on screen
    return cfg_df, pd.DataFrame(rows, columns=["part", "parameters", "share"])


def _loss_formulas(config, tokenizer=None) -> None:
    """The pretraining loss of the active model, written from its config and its vocabulary's special tokens
    (bertcore.model.formulas)."""
    f = formulas(config, tokenizer)
    st.latex(r"\mathcal{L} = \mathcal{L}_{\mathrm{MLM}} + \mathcal{L}_{\mathrm{NSP}}")
    st.latex(f["mlm"])
    st.latex(f["nsp"])
    st.caption(tr("Written from the active model's config (`bertcore.model.formulas`): its MLM head, tying and "
                  "activation, and its NSP head. The NSP loss averages −log p(y | x) over both labels, IsNext and "
                  "NotNext."))


def input_sentence(tokenizer, config) -> str:
    """How the active model reads a pair: its vocabulary's special tokens and the segment ids it embeds."""
    pair = tokenizer.pair_template() if hasattr(tokenizer, "pair_template") else "[CLS] A [SEP] B [SEP]"
    return tr("`{pair}` (segment ids {segments})", pair=pair, segments=segment_labels(config))


def render() -> None:
    st.title(tr("How BERT pretrains"))
    tour.render_start_here()
    st.divider()
    active = state.get_active()
    st.markdown(
        tr("BERT reads a pair of sentences as one sequence {sequence}, turns every token into a vector "
           "(`bertcore.model.BertEmbeddings`), refines all vectors together through a stack of self-attention "
           "encoder layers, and is trained on two tasks at once: guess the masked words (MLM) and tell whether B "
           "really follows A (NSP). Everything here is computed by `bertcore`: the model is "
           "`bertcore.model.BertForPreTraining`, the training loop `bertcore.training.trainer.Trainer`, and the "
           "parameter counts `bertcore.model.count_parameters`.",
           sequence=input_sentence(active.tokenizer, active.model.config))
    )
    _loss_formulas(active.model.config, active.tokenizer)
    run_status.untrained_notice()
    if active.kind == "untrained":
        run_status.default_train_button("overview_train_default")

    left, right = st.columns([3, 2])
    with left:
        st.subheader(tr("The pipeline"))
        fig = memo_shown(active.model, ("ov_pipeline",),
                         lambda: pipeline_figure(active.model.config, tokenizer=active.tokenizer))
        st.plotly_chart(fig, key="overview_pipeline", config={"displayModeBar": False})
    with right:
        st.subheader(tr("Explore each step"))
        for step, links in STEP_LINKS:
            st.markdown(f"**{tr(step)}**")
            for fname, label in links:
                _link(fname, label)

    st.subheader(tr("Model card: {label}", label=active.label))
    cfg_df, parts_df = memo(active.model, ("ov_card",), lambda: model_card(active.model))
    c1, c2 = st.columns(2)
    with c1:
        st.caption(tr("Configuration (`bertcore.config.BertConfig`, HF field names)"))
        st.dataframe(cfg_df.rename(columns={"field": tr("field"), "value": tr("value")}), hide_index=True, width="stretch")
    with c2:
        st.caption(tr("Parameters per part (`bertcore.model.count_parameters`; the MLM decoder is tied to the word "
                      "embeddings when mlm_head=transform, so it is counted once)"))
        st.dataframe(parts_df.rename(columns={c: tr(c) for c in ("part", "parameters", "share")}), hide_index=True, width="stretch")
        hist = getattr(active.bundle, "history", None)
        if hist is not None and len(hist):
            last = hist.iloc[-1]
            st.metric(tr("training steps"), int(last["step"]))
            ev = hist.dropna(subset=["eval_mlm_acc"]) if "eval_mlm_acc" in hist else hist.iloc[0:0]
            if len(ev):
                st.metric(tr("held-out MLM accuracy"), f"{ev['eval_mlm_acc'].iloc[-1]:.3f}")


render()
