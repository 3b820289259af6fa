"""The BERT-pytorch tutorial's worked example (tutorial 003: BERT-pytorch's data format) on screen, shared by Data &
tokens and Masking & NSP."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertcore.data.bert_pytorch_vocab import bert_pytorch_example


def bert_pytorch_frame(ex: dict) -> pd.DataFrame:
    """One row per position of the padded example: the tutorial's token, its id, label, segment and padding mask."""
    inv = {i: t for t, i in ex["vocab"].items()}
    return pd.DataFrame({
        "position": range(len(ex["bert_input"])),
        "token": [inv.get(i, "?") for i in ex["bert_input"]],
        "bert_input": ex["bert_input"],
        "bert_label": ex["bert_label"],
        "segment_label": ex["segment_label"],
        "mask (x > 0)": ex["mask"],
    })


def padding_mask_figure(ex: dict) -> go.Figure:
    """The padding mask (x > 0) as the tutorial builds it: 1 for real tokens, 0 for the padding to its seq_len."""
    inv = {i: t for t, i in ex["vocab"].items()}
    labels = [f"{p}: {inv.get(i, '?')}" for p, i in enumerate(ex["bert_input"])]
    fig = go.Figure(go.Heatmap(z=[ex["mask"]], x=labels, y=["mask = (x > 0)"], zmin=0, zmax=1, showscale=False,
                               colorscale=[[0, "#eeeeee"], [1, "#1f77b4"]], text=[ex["mask"]],
                               texttemplate="%{text}", hovertemplate="%{x}: %{z}<extra></extra>"))
    fig.update_layout(height=150, margin={"t": 10, "b": 60, "l": 10, "r": 10})
    return fig


def render_bert_pytorch_example(key: str) -> None:
    """The whole example in an expander: vocabulary order, ids, labels 1/2 with 0 for padding, padding to seq_len."""
    ex = bert_pytorch_example()
    with st.expander("The BERT-pytorch tutorial's worked example: its own format (`bertcore.data.bert_pytorch_vocab`)"):
        st.markdown(
            "The tutorial (document 003) builds its vocabulary as `<pad> <unk> <eos> <sos> <mask>` followed by the "
            "words by frequency, keeps case, writes `<sos> A <eos> B <eos>`, labels segment A with 1 and B with 2, "
            f"pads with 0 to {len(ex['bert_input'])} positions (its seq_len) and masks padded keys with `(x > 0)`. "
            "Its example masks *Welcome* and replaces *jungle* with the random id 10. The project's own pipeline lowercases, uses `[CLS] [SEP]` "
            "and pads each batch to its longest pair; these are the tutorial's numbers, computed by "
            "`bert_pytorch_example()`.")
        vocab = pd.DataFrame({"token": list(ex["vocab"]), "id": list(ex["vocab"].values())})
        c1, c2 = st.columns([1, 3])
        c1.dataframe(vocab, hide_index=True, height=300, key=f"{key}_vocab")
        c2.dataframe(bert_pytorch_frame(ex), hide_index=True, height=300, key=f"{key}_rows")
        st.plotly_chart(padding_mask_figure(ex), key=f"{key}_mask")
