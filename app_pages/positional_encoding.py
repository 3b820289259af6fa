"""Learn · Positional encoding: the sinusoidal table, learned position embeddings, and the embedding sum."""
from __future__ import annotations

import streamlit as st

from bertcore.analysis.inference import inspect_pair
from bertcore.data.tokenization import canonical_special
from bertcore.model.formulas import formulas
from bertcore.model.functional import sinusoidal_table
from explorer.figures import learn as F
from explorer.session import state
from explorer.parts import run_status
from bertcore.model.bert import embedding_init
from bertcore.data.user_text import is_blank
from explorer.i18n import frozen, mark, tr
from explorer.page_errors import user_action

INTRO = mark("""
Self-attention on its own does not know word order: permute the tokens and every output is permuted
the same way. So before layer 1 each token's vector gets a **position** vector added (and a **segment**
vector saying sentence A or B). The original Transformer (Vaswani et al. 2017, §3.5) uses a fixed table of
sines and cosines at geometrically spaced wavelengths; BERT *learns* its table instead.
The table below is computed by `bertcore.model.functional.sinusoidal_table`; the embedding parts of a typed
sentence come from `bertcore.analysis.inference.inspect_pair`.
""")


def _sinusoidal(n_pos: int, d_model: int):
    return sinusoidal_table(n_pos, d_model).numpy()


@user_action("Draw the sinusoidal table")
def _section_table():
    st.subheader(tr("The sinusoidal table"))
    c1, c2 = st.columns(2)
    d_model = c1.slider(tr("d_model (dimensions)"), 2, 512, 64, step=2, key="pe_d_model")
    n_pos = c2.slider(tr("max length (positions)"), 2, 512, 64, key="pe_max_len")
    table = _sinusoidal(n_pos, d_model)
    st.plotly_chart(F.pe_table_figure(table), key="pe_table_chart")
    st.caption(tr("Left columns (small i) oscillate fast, right columns slowly: every position gets a unique "
                  "pattern, and PE(pos + k) is a fixed linear function (a rotation) of PE(pos)."))

    st.subheader(tr("sin / cos curves"))
    default = [d for d in (0, 1, 6, 7, 20) if d < d_model]
    dims = st.multiselect(tr("dimensions"), list(range(d_model)), default=default, key=f"pe_dims_{d_model}",
                          help=tr("even dimension 2i is sin, odd dimension 2i+1 is cos with the same wavelength"))
    if dims:
        st.plotly_chart(F.pe_curves_figure(table, dims), key="pe_curves_chart")
    else:
        st.info(tr("Choose one or more dimensions to plot their curves."))

    st.subheader(tr("Position-to-position similarity"))
    kind_label = st.radio(tr("measure"), [mark("cosine similarity"), mark("dot product")], horizontal=True, key="pe_sim_kind",
                          format_func=frozen())
    kind = "cosine" if kind_label.startswith("cosine") else "dot"
    st.plotly_chart(F.similarity_figure(F.similarity(table, kind), kind, tr("Sinusoidal PE")), key="pe_sim_chart")
    st.caption(tr("Similarity depends (almost) only on the distance |p − q|: the bright band along the diagonal "
                  "is what lets attention find neighbours."))
    return kind


@user_action("Compare with the learned position embeddings")
def _section_learned(kind: str):
    st.subheader(tr("The active model's position embeddings"))
    am = state.get_active()
    emb = am.model.bert.embeddings
    cfg = am.model.config
    table = emb.position_table().detach().float().numpy()
    n_pos, d = table.shape
    st.caption(tr("Active model: **{label}** · `position_embedding = \"{pe}\"` · table {n} × {d} "
                  "(`bert.embeddings.position_embeddings.weight`).", label=am.label, pe=cfg.position_embedding,
                  n=n_pos, d=d))
    if cfg.position_embedding != "learned":
        st.info(tr("This model uses the **fixed sinusoidal** table (no learned position parameters), so both "
                   "panels below are the same numbers. Train a variant with `position_embedding = learned` "
                   "to compare."))
    elif not am.is_trained:
        run_status.untrained_notice()
        st.warning(tr("The learned table is still **random** ({init} init): its similarity map is noise with a "
                      "bright diagonal. After training, neighbouring positions become similar.",
                      init=embedding_init(cfg, n_pos)))
        run_status.default_train_button("pe_train_default")
    sin = _sinusoidal(n_pos, d)
    left = tr("learned (active model)") if cfg.position_embedding == "learned" else tr("active model (sinusoidal)")
    fig = F.side_by_side_similarity(F.similarity(table, kind), F.similarity(sin, kind), kind,
                                    left, tr("sinusoidal {n} × {d}", n=n_pos, d=d))
    st.plotly_chart(fig, key="pe_learned_chart")


def untrained_parts(cfg) -> str:
    """What the untrained model's embedding parts are, from its config: each table's init and the LayerNorm (or none)."""
    token = embedding_init(cfg, cfg.vocab_size)
    if cfg.type_vocab_size:
        vectors = tr("token vectors {token} and segment vectors {segment}", token=token,
                     segment=embedding_init(cfg, cfg.type_vocab_size))
    else:
        vectors = tr("token vectors {token}", token=token)
    if cfg.embedding_layer_norm:
        return tr("Untrained model: random {vectors}; the LayerNorm row rescales their sum to mean 0, variance 1 "
                  "per token.", vectors=vectors)
    return tr("Untrained model: random {vectors}; this model feeds their sum to layer 1 without a LayerNorm.",
              vectors=vectors)


@user_action("Embed the sentence")
def _section_sentence():
    st.subheader(tr("Token + segment + position = the input to layer 1"))
    am = state.get_active()
    st.latex(formulas(am.model.config)["embeddings"])  # with or without scale and LayerNorm, as the model has
    a = st.text_input(tr("sentence A"), value="the cat eats the cheese in the kitchen .", key="pe_sent_a")
    b = st.text_input(tr("sentence B (optional)"), value="", key="pe_sent_b")
    if is_blank(a):  # the library's rule: spaces and invisible characters only
        st.info(tr("Type a sentence A to see its embeddings (sentence B is optional)."))
        return
    model, tok = am.model, am.tokenizer
    with user_action("Embed the sentence") as act:  # inspect_pair cuts very long text and says so (truncated)
        ins = inspect_pair(model, tok, a, None if is_blank(b) else b)
        tokens, embs, truncated = list(ins.tokens), dict(ins.embeddings), bool(ins.truncated)
        if not getattr(model.config, "embedding_layer_norm", True):
            embs.pop("normed", None)  # this model adds the parts and feeds the sum to layer 1: no LayerNorm row
    if act.failed:
        return
    if truncated:
        st.warning(tr("The input was longer than the model's {max} positions: it was truncated to {n} tokens "
                      "(longest sentence first).", max=model.config.max_position_embeddings, n=len(tokens)))
    unk = sum(canonical_special(t) == "[UNK]" for t in tokens)
    shown = " ".join(tokens[:60]) + (" …" if len(tokens) > 60 else "")
    st.caption(tr("{n} tokens: {tokens}", n=len(tokens), tokens=shown) + (f" · {unk} [UNK]" if unk else ""))
    if am.kind == "untrained":
        st.caption(untrained_parts(model.config))
    st.plotly_chart(F.embedding_stack_figure(embs, tokens), key="pe_embed_chart")


def render() -> None:
    st.title(tr("Positional encoding"))
    st.markdown(tr(INTRO))
    st.latex(r"PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right),\qquad "
             r"PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right)")
    kind = _section_table() or "cosine"
    _section_learned(kind)
    _section_sentence()


render()
