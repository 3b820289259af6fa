"""Pure plotly builder of the BERT pipeline diagram for the Overview page (no streamlit)."""
from __future__ import annotations

import html

import plotly.graph_objects as go

from explorer.i18n import mark, tr

# (key, title, detail template, x-centre, y-centre); the pipeline reads top to bottom.
STEPS = [
    ("text", mark("Text"), "“{example}”", 0.5, 6.0),
    ("tokens", mark("Tokens"), mark("{pair} · segments {segments} · vocab {vocab_size}"), 0.5, 5.0),
    ("embeddings", mark("Embeddings"), "{embed} · d={hidden}", 0.5, 4.0),
    ("encoder", mark("Encoder × {layers}"), mark("{heads} heads of self-attention + FFN {ffn} · {norm}-LN"), 0.5, 2.8),
    ("mlm", mark("MLM head"), mark("predict the masked tokens ({mlm_head})"), 0.25, 1.4),
    ("nsp", mark("NSP head"), mark("IsNext / NotNext from {cls} ({nsp_head})"), 0.75, 1.4),
]
COLORS = {"text": "#eceff1", "tokens": "#e3f2fd", "embeddings": "#e8f5e9", "encoder": "#fff3e0",
          "mlm": "#fce4ec", "nsp": "#ede7f6"}


def segment_labels(config) -> str:
    """The segment ids the model embeds, as its config says (``segment_ids``; none without a segment table)."""
    if not config.type_vocab_size:
        return tr("none (no segment embedding)")
    return "A=1, B=2, padding=0" if config.segment_ids == "1/2" else "A=0, B=1"


def embedding_parts(config) -> str:
    """The input representation's sum as the config builds it: scale, segment table, positions, LayerNorm."""
    parts = [tr("√d·token") if config.embedding_scale else tr("token")]
    if config.type_vocab_size:
        parts.append(tr("segment"))
    parts.append(tr("position ({kind})", kind=config.position_embedding))
    return " + ".join(parts) + (" → LayerNorm" if config.embedding_layer_norm else "")


def pipeline_steps(config, example: str = "the cat eats the cheese", tokenizer=None) -> list[dict]:
    """The diagram's boxes as data: key, title, detail, x, y (filled from a BertConfig and, for the special
    tokens' spelling, the model's tokenizer: ``<sos> A <eos> B <eos>`` for BERT-pytorch's vocabulary)."""
    pair = tokenizer.pair_template() if hasattr(tokenizer, "pair_template") else "[CLS] A [SEP] B [SEP]"
    cls = getattr(tokenizer, "cls_token", None) or "[CLS]"
    vals = dict(example=example, pair=pair, cls=cls, segments=segment_labels(config), embed=embedding_parts(config),
                vocab_size=config.vocab_size, hidden=config.hidden_size, layers=config.num_hidden_layers, heads=config.num_attention_heads,
                ffn=config.intermediate_size, norm=config.norm_placement, mlm_head=config.mlm_head,
                nsp_head=config.nsp_head)
    return [dict(key=k, title=tr(t).format(**vals), detail=tr(d).format(**vals), x=x, y=y) for k, t, d, x, y in STEPS]


def _plotly_text(text: str) -> str:
    """Plotly reads tags in annotation and hover text; escape the text so ``<sos>`` is drawn, not dropped."""
    return html.escape(text, quote=False)


def pipeline_figure(config, example: str = "the cat eats the cheese", height: int = 460,
                    tokenizer=None) -> go.Figure:
    """Text → tokens → embeddings → N encoder layers → MLM / NSP heads, as boxes and arrows."""
    steps = pipeline_steps(config, example, tokenizer)
    # Shapes and annotations are collected as plain dicts and validated once by the Figure: adding them
    # one by one (fig.add_shape / add_annotation) re-validates the whole list each time.
    shapes, notes = [], []
    half_w = {"mlm": 0.22, "nsp": 0.22}
    for s in steps:
        w = half_w.get(s["key"], 0.42)
        h = 0.55 if s["key"] != "encoder" else 0.75
        shapes.append(dict(type="rect", x0=s["x"] - w, x1=s["x"] + w, y0=s["y"] - h / 2, y1=s["y"] + h / 2,
                           line=dict(color="#455a64", width=1), fillcolor=COLORS[s["key"]], layer="below"))
        notes.append(dict(x=s["x"], y=s["y"] + 0.1, text=f"<b>{s['title']}</b>", showarrow=False, font=dict(size=15)))
        notes.append(dict(x=s["x"], y=s["y"] - 0.17, text=_plotly_text(s["detail"]), showarrow=False,
                          font=dict(size=11)))
    by = {s["key"]: s for s in steps}
    edges = [("text", "tokens"), ("tokens", "embeddings"), ("embeddings", "encoder"), ("encoder", "mlm"),
             ("encoder", "nsp")]
    for a, b in edges:
        sa, sb = by[a], by[b]
        ha = 0.75 if a == "encoder" else 0.55
        notes.append(dict(x=sb["x"], y=sb["y"] + 0.3, ax=sa["x"], ay=sa["y"] - ha / 2, xref="x", yref="y",
                          axref="x", ayref="y", showarrow=True, arrowhead=2, arrowsize=1.2, arrowwidth=1.5,
                          arrowcolor="#455a64", text=""))
    fig = go.Figure(layout=dict(shapes=shapes, annotations=notes))
    # invisible markers so hovering a box tells what it is
    fig.add_trace(go.Scatter(x=[s["x"] for s in steps], y=[s["y"] for s in steps], mode="markers",
                             marker=dict(size=40, opacity=0), hovertext=[_plotly_text(f"{s['title']}: {s['detail']}") for s in steps],
                             hoverinfo="text", customdata=[s["key"] for s in steps], showlegend=False))
    fig.update_xaxes(visible=False, range=[0, 1])
    fig.update_yaxes(visible=False, range=[0.8, 6.5])
    fig.update_layout(height=height, margin=dict(l=0, r=0, t=10, b=0), plot_bgcolor="white", dragmode=False)
    return fig
