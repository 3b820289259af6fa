"""Learn · Inside the model: one forward pass, one stage at a time, with the model's own numbers.

The numbers come from ``bertcore.analysis.trace.trace`` (one forward pass per input, layer and model version,
shared by every session through ``explorer.session.memo``), so they equal ``python -m bertcore trace RUN ... --json``. The
stage table, formulas and seed locations live in ``explorer.figures.forward_stages``; the stage, layer, head, token and
texts are in the address bar (``?fw_stage=qkv&fw_layer=0&fw_head=0&fw_token=2&fw_a=...``)."""
import numpy as np
import streamlit as st

from bertcore.analysis.trace import trace
from bertcore.data.user_text import is_blank
from explorer.figures import forward as FF
from explorer.figures import forward_math as FM
from explorer.figures import forward_stages as FS
from explorer.parts import replay, tour
from explorer.session import state
from explorer.parts.examples import Examples, session_examples
from explorer.export import matrix_csv, plotly_config
from explorer.figures.inspect import token_labels
from explorer.figures.plotly_dict import freeze_figure
from explorer.figures.forward_text import explanation, tutorial_line
from explorer.i18n import frozen, language, tr
from explorer.session.memo import memo
from explorer.page_errors import user_action

DEFAULT_A = "the cat eats the cheese in the kitchen ."
PAGE_MAX_TOKENS = 512
URL = dict(bind="query-params", persist_state="session")
K_STAGE, K_LAYER, K_HEAD, K_TOKEN = "fw_stage", "fw_layer", "fw_head", "fw_token"  # widget keys = URL names
TABLE_COLS = 256  # the table shows at most this many columns (the heat map and the CSV have all)
MAX_DRAWN_COLS = 4096  # wider matrices (the MLM logits of a big vocabulary) are not drawn
FIRST_IN_LAYER = "attn_norm_before"


def _kept(key: str, options: list, default):
    """The value of widget ``key``: this session's, else the URL's ``?key=`` (F5, a link), else ``default``."""
    v = st.session_state.get(key)
    if v not in options:
        raw = st.query_params.get(key)
        v = next((o for o in options if str(o) == raw), default)
        st.session_state[key] = v
    return v


def _to_url(key: str) -> None:
    st.query_params[key] = str(st.session_state[key])


def _go(stage: str, layer: int | None = None) -> None:
    st.session_state[K_STAGE] = stage
    if layer is not None:
        st.session_state[K_LAYER] = layer


def _trace(model, tok, a, b, layer, limit):
    """One forward pass per (model, texts, layer) for every session of this server."""
    return memo(model, ("fw_trace", a, b, layer, limit), lambda: trace(model, tok, a, b, layer=layer, max_len=limit))


def _inputs(tok):
    ex = session_examples(tok, Examples(DEFAULT_A.replace("cheese", "[MASK]"), DEFAULT_A, DEFAULT_A, ""))
    c1, c2 = st.columns(2)
    a = c1.text_input(tr("Sentence A"), value=ex.sentence, key="fw_a", max_chars=60_000, **URL)
    b = c2.text_input(tr("Sentence B (optional: a pair {pair})", pair=tok.pair_template()), value="", key="fw_b",
                      max_chars=60_000, **URL)
    return a, (None if is_blank(b) else b)


def _controls(model, tokens):
    """Layer, head, token, Back / Next and the stage slider; each value goes to the URL."""
    c = model.config
    L, H, T = int(c.num_hidden_layers), int(c.num_attention_heads), len(tokens)
    _kept(K_LAYER, list(range(L)), 0)
    _kept(K_HEAD, list(range(H)), 0)
    _kept(K_TOKEN, list(range(T)), min(1, T - 1))
    _kept(K_STAGE, FS.IDS, FS.IDS[0])
    c1, c2, c3, c4, c5 = st.columns([2, 2, 3, 1, 1], vertical_alignment="bottom")
    c1.selectbox(tr("Layer"), list(range(L)), key=K_LAYER, format_func=frozen(lambda i: tr("layer {n}", n=i + 1)),
                 help=tr("Layers count from 1 here; the CLI's --layer and the CSV count from 0."))
    c2.selectbox(tr("Head"), list(range(H)), key=K_HEAD, format_func=frozen(lambda i: tr("head {n}", n=i + 1)))
    labels = token_labels(tokens, escape=False)
    c3.selectbox(tr("Follow the token"), list(range(T)), key=K_TOKEN, format_func=lambda i: labels[i])
    layer, stage = int(st.session_state[K_LAYER]), st.session_state[K_STAGE]
    i = FS.IDS.index(stage)
    c4.button(tr("◀ Back"), key="fw_prev", disabled=i == 0, on_click=_go, args=(FS.IDS[max(0, i - 1)],),
              width="stretch")
    if stage == "next_layer" and layer < L - 1:
        nxt = (FIRST_IN_LAYER, layer + 1)
    else:
        nxt = (FS.IDS[min(i + 1, len(FS.IDS) - 1)], None)
    c5.button(tr("Next ▶"), key="fw_next", type="primary", disabled=i == len(FS.IDS) - 1, on_click=_go, args=nxt,
              width="stretch")
    st.select_slider(tr("Stage"), FS.IDS, key=K_STAGE, label_visibility="collapsed",
                     format_func=frozen(lambda s: f"{FS.IDS.index(s) + 1}. {FS.stage_title(FS.STAGE[s], c)}"))
    for k in (K_LAYER, K_HEAD, K_TOKEN, K_STAGE):
        _to_url(k)
    return (int(st.session_state[K_LAYER]), int(st.session_state[K_HEAD]), int(st.session_state[K_TOKEN]),
            st.session_state[K_STAGE])


def _where(stage, model, layer):
    names = ", ".join(f"`{n}`" for n in FS.names(stage, layer))
    st.markdown(tr("**Computed by** `{where}` · traced as {names}", where=stage.where, names=names))
    own = FS.design_tutorials(model.config)
    lines = [tutorial_line(r, r.tutorial in own) for r in stage.tutorials]
    st.markdown(tr("**In the tutorials:**") + "\n" + "\n".join(f"- {s}" for s in lines))


class _View:
    """What ``_matrix`` draws for one (trace, stage, layer, head, token): built once per model and input for every
    session (``explorer.session.memo``), drawn per session."""

    def __init__(self, t, model, tok, stage, layer, head, token):
        got = FS.stage_matrix(t, model.config, stage.id, layer, head)
        self.m = None
        if got is None:
            return
        m, cols = got
        if stage.id == "mlm":  # one column per word of the vocabulary
            cols = [f"{i} {w}" for i, w in enumerate(tok.convert_ids_to_tokens(list(range(m.shape[1]))))]
        tokens = t.tokens if m.shape[0] == len(t.tokens) else t.tokens[:1]
        self.wide = wide = m.shape[1] > MAX_DRAWN_COLS  # the MLM logits over a 30,522-word vocabulary
        row = token if m.shape[0] > 1 else 0
        r0, r1 = FF.window(m.shape[0], row)
        c0, c1 = (FF.window(m.shape[1], token) if stage.id in FS.SQUARE else (0, m.shape[1]))
        shown, rows = m[r0:r1, c0:c1], FF.stage_rows(tokens, r0, r1)
        shown_cols = (token_labels(t.tokens)[c0:c1] if stage.id in FS.SQUARE else cols[c0:c1])
        dk = model.config.head_dim
        self.fig = None if wide else freeze_figure(FF.stage_heatmap(
            shown, rows, shown_cols, row - r0, prob=stage.id in ("softmax", "attn_dropout"),
            blocks=3 if stage.id == "qkv" else 0,
            head_cols=(head * dk, (head + 1) * dk) if stage.id == "concat" else None,
            meta=f"{stage.id} {layer} {head} {token}"))
        what = tr("shape {shape}", shape=" × ".join(str(n) for n in m.shape))
        if (c1 - c0) != m.shape[1]:
            what += " · " + tr("showing rows {r0}–{r1} and columns {c0}–{c1} around the chosen token (a window: the "
                               "CSV has every value)", r0=r0, r1=r1 - 1, c0=c0, c1=c1 - 1)
        elif (r1 - r0) != m.shape[0]:
            what += " · " + tr("showing rows {r0}–{r1} around the chosen token (a window: the CSV has every row)",
                               r0=r0, r1=r1 - 1)
        self.what = what
        labels = [str(c) for c in (token_labels(t.tokens, escape=False)[c0:c1] if stage.id in FS.SQUARE
                                   else shown_cols)][:TABLE_COLS]
        marked = [("▶ " if i == row - r0 else "") + str(lab)
                  for i, lab in enumerate(token_labels(tokens, escape=False)[r0:r1])]
        self.n_rows = len(marked)
        self.table_cfg = {c: st.column_config.NumberColumn(c, format="%.4f") for c in labels}
        self.table = FF.stage_table(shown[:, :TABLE_COLS], marked, labels)  # what st.dataframe would make, made once
        self.m, self.tokens = m, tokens
        self.csv_cols = token_labels(t.tokens, escape=False) if stage.id in FS.SQUARE else cols
        self.rows_csv = slice(r0, r1) if wide else slice(0, m.shape[0])  # a big vocabulary: the shown rows only


def _matrix(t, model, tok, stage, layer, head, token, left, right):
    """The stage's tensor: heat map of a window around the token (``right``), its shape, the table and the CSV
    (``left``)."""
    # the trace is one model's, for one input and layer: its views are kept with it
    v = memo(t, ("fw_view", stage.id, head, token, language()), lambda: _View(t, model, tok, stage, layer, head, token))
    if v.m is None:
        return None
    m = v.m
    with right:
        if v.wide:
            st.caption(tr("{n} columns are too many to draw; the top-k table below has the numbers that matter here.",
                          n=m.shape[1]))
        else:
            st.plotly_chart(v.fig, key="fw_stage_fig", config=plotly_config(f"{stage.id}_layer{layer}_head{head}"))
        st.caption(v.what)
    if m.shape[1] > TABLE_COLS:
        st.caption(tr("The table shows the first {n} of {all} columns; the heat map and the CSV have all of them.",
                      n=TABLE_COLS, all=m.shape[1]))
    st.dataframe(v.table, key="fw_stage_table", column_config=v.table_cfg, height=min(420, 36 * (v.n_rows + 1)))
    rows_csv = v.rows_csv
    with left:
        st.download_button(tr("{stage} as CSV", stage=FS.stage_title(stage, model.config)),
                           lambda: matrix_csv(m[rows_csv], v.tokens[rows_csv], v.csv_cols, first=rows_csv.start),
                           file_name=f"{stage.id}_layer{layer}" + (f"_head{head}" if stage.id in FS.PER_HEAD else "")
                           + ".csv", mime="text/csv", key="fw_csv", on_click="ignore", icon=":material/download:",
                           help=tr("Every row and column; layer and head count from 0 in the file name, as in the "
                                   "CLI."))
    return m


def _table(df, key: str, fmt: str = "%.4f", **kw) -> None:
    """A numeric table with every column at ``fmt`` (column_config, not a Styler: a Styler pays per cell)."""
    cfg = {str(c): st.column_config.NumberColumn(str(c), format=fmt) for c in df.columns}
    st.dataframe(df, key=key, column_config=cfg, **kw)


def _norm(model, t, stage, layer, token):
    d = FM.norm_detail(model, t, stage.id, layer, token)
    if d is None:
        return
    m = st.columns(4)
    m[0].metric(tr("mean μ"), f"{d.mean:.4f}")
    m[1].metric(tr("variance (n − 1)") if d.unbiased else tr("variance σ²"), f"{d.var:.4f}")
    m[2].metric("ε", f"{d.eps:g}")
    m[3].metric(tr("|recomputed − model|"), f"{d.max_diff:.1e}")
    st.caption(tr("The chosen token at this LayerNorm: its statistics over {D} dimensions, and γ, β (learned, one per "
                  "dimension) from the model's weights. The output recomputed from them equals the model's.",
                  D=len(d.x)))
    _table(FF.norm_frame(d), "fw_norm_table")


def _extras(model, tok, t, stage, layer, head, token, m):
    c = model.config
    if stage.id == "masked":
        demo = memo(model, ("fw_pad", tuple(t.input_ids), tuple(t.segment_ids), layer),
                    lambda: FM.padded_attention(model, t, layer))
        if demo is None:
            st.caption(tr("(No room for two [PAD] tokens after this input: it fills the position table.)"))
            return
        T = len(t.tokens)
        k0, k1 = FF.window(T, token)
        keys = list(range(k0, k1)) + [T, T + 1]  # a window of the real keys, and the two [PAD] keys
        labels = token_labels(t.tokens + [tok.pad_token] * 2, escape=False)
        rows = np.stack([demo[k][head, token][keys] for k in ("scaled", "masked", "probs")])
        st.markdown(tr("**The same input padded by two {pad} tokens** (as in a batch), row {row} of head {h}:",
                       pad=tok.pad_token, row=f"`{labels[token]}`", h=head + 1))
        st.dataframe(FF.shown_frame(rows, [tr("scaled"), tr("masked"), tr("softmax")], [labels[k] for k in keys]),
                     key="fw_mask_demo")
    elif stage.id == "attn_dropout":
        p = c.attention_probs_dropout_prob
        drawn = FM.dropout_draw(m[token], p, seed=0)
        frame = FF.stage_frame(np.stack([m[token], drawn]), [tr("eval (what the model uses)"),
                                                              tr("one training draw, p = {p}", p=f"{p:g}")],
                               token_labels(t.tokens, escape=False))
        _table(frame, "fw_dropout_demo")
    elif stage.id == "mlm" and "mlm.logits" in t.tensors:
        positions, masked = FM.mlm_positions(t, tok, token)
        if c.causal:  # a left-to-right model: the chosen token's output is its guess for the token after it
            positions = [token]
            st.info(tr("A left-to-right model predicts the next token: below, its guesses for the token after {tok} "
                       "(position {p}), from the tokens up to it alone.", tok=f"`{t.tokens[token]}`", p=token + 1))
        elif not masked:
            st.info(tr("The text has no {mask}, so the head's guess at the chosen token is shown; put {mask} into the "
                       "text to ask it for a word.", mask=tok.mask_token))
        top = FF.topk_frame(FM.mlm_top(t, tok, positions[:8], k=5), t.tokens)
        st.dataframe(top, key="fw_mlm_top", hide_index=True, column_config={
            "prob": st.column_config.NumberColumn(tr("probability"), format="%.4f"),
            "logit": st.column_config.NumberColumn("logit", format="%.3f"),
            "position": tr("position"), "input": tr("input token"), "rank": tr("rank"), "token": tr("prediction")})
    elif stage.id == "nsp":
        p = FM.nsp_probs(t)
        if p is not None:
            m1, m2 = st.columns(2)
            sop = getattr(model, "sentence_task", "nsp") == "sop"  # ALBERT's SOP: label 0 = the pair in order
            m1.metric("P(in order)" if sop else "P(IsNext)", f"{p[0]:.1%}")
            m2.metric("P(swapped)" if sop else "P(NotNext)", f"{p[1]:.1%}")
    elif stage.id == "next_layer" and layer < c.num_hidden_layers - 1:
        st.button(tr("Continue in layer {n}", n=layer + 2), key="fw_next_layer", on_click=_go,
                  args=(FIRST_IN_LAYER, layer + 1))


def _stage(model, tok, t, stage, layer, head, token):
    n = len(FS.IDS)
    where = {"embeddings": tr("embeddings"), "heads": tr("pre-training heads")}.get(
        stage.group, tr("layer {l}, head {h}", l=layer + 1, h=head + 1) if stage.id in FS.PER_HEAD
        else tr("layer {l}", l=layer + 1))
    title = FS.stage_title(stage, model.config)
    st.markdown("#### " + tr("Stage {i} of {n}: {title}", i=FS.IDS.index(stage.id) + 1, n=n, title=title)
                + f" · {where}")
    st.latex(FS.stage_formula(stage.id, model.config, tok, len(t.tokens), head))
    reason = FS.absent_reason(stage.id, model.config, model)
    if reason:
        st.info(reason)
    left, right = st.columns([2, 3])
    with left:
        st.markdown(explanation(stage.id, model, tok, t, layer, head, token))
        _where(stage, model, layer)
    m = None
    if not (stage.id == "mlm" and reason):
        m = _matrix(t, model, tok, stage, layer, head, token, left, right)
    _norm(model, t, stage, layer, token)
    with left if stage.id in ("mlm", "nsp") else st.container():  # the heads' answers next to their logits
        _extras(model, tok, t, stage, layer, head, token, m)


def _follow(model, t, stage, layer, head, token):
    st.subheader(tr("Follow one token: {tok}", tok=token_labels(t.tokens, escape=False)[token]))
    st.caption(tr("Its vector's length ‖v‖₂ after each stage (Q, K, V: the query of head {h}; the stages without "
                  "a vector of its own, such as the attention weights, are left out), and below, every {D}-wide "
                  "vector as one row.", h=head + 1, D=model.config.hidden_size))
    norms, strip = memo(t, ("fw_follow", head, token, stage.id, language()),
                        lambda: _follow_figures(model, t, stage, layer, head, token))
    st.plotly_chart(norms, key="fw_norms", config=plotly_config("token_norms"))
    st.plotly_chart(strip, key="fw_strip", config=plotly_config("token_strip"))


def _follow_figures(model, t, stage, layer, head, token):
    """(norms per stage, the vectors as a strip) of the chosen token, the current stage marked."""
    vecs = FS.token_vectors(t, model.config, layer, head, token)
    labels = [f"{FS.IDS.index(s) + 1}. {FS.stage_title(FS.STAGE[s], model.config)}" for s, _ in vecs]
    ids = [s for s, _ in vecs]
    cur = ids.index(stage.id) if stage.id in ids else None
    vecs_q = [(s, v if s != "qkv" else v[: model.config.head_dim]) for s, v in vecs]
    norms = FF.norms_figure(labels, [float(np.linalg.norm(v)) for _, v in vecs_q], cur)
    wide = [(lab, v) for lab, (s, v) in zip(labels, vecs) if len(v) == model.config.hidden_size]
    cur_w = next((i for i, (lab, _) in enumerate(wide) if cur is not None and lab == labels[cur]), None)
    return norms, FF.strip_figure([lab for lab, _ in wide], [v for _, v in wide], cur_w)


def render():
    st.title(tr("Inside the model"))
    active = replay.at_step(state.get_active(), "fw")
    model, tok = active.model, active.tokenizer
    st.markdown(tr(
        "One forward pass, one stage at a time, from the embeddings through one layer to the MLM and NSP heads. "
        "Every number is the model's own (`bertcore.analysis.trace.trace`, the same as `python -m bertcore trace`); "
        "the stage, layer, head, token and texts are in the address bar."))
    design = FS.matching_preset(model.config)
    tutorials = FS.design_tutorials(model.config)
    st.caption(tr("Active model: **{model}** · {L} layers × {H} heads, hidden size {D} · design: {design}",
                  model=active.label, L=model.config.num_hidden_layers, H=model.config.num_attention_heads,
                  D=model.config.hidden_size, design=design or tr("custom"))
               + (" · " + tr("tutorials {files}", files=", ".join(tutorials)) if tutorials else "")
               + (" · :orange[" + tr("untrained: random weights, so the numbers show the starting point, not "
                                     "learned behaviour") + "]" if active.kind == "untrained" else ""))
    a, b = _inputs(tok)
    if is_blank(a):
        st.info(tr("Type a sentence A to follow it through the model (sentence B is optional)."))
        return
    layer = _kept(K_LAYER, list(range(model.config.num_hidden_layers)), 0)
    limit = min(int(model.config.max_position_embeddings), PAGE_MAX_TOKENS)
    with user_action(tr("Trace the forward pass")) as act:
        t = _trace(model, tok, a, b, layer, limit)
    if act.failed:
        return
    if t.truncated:
        st.warning(tr("The input is too long and was **truncated to {n} tokens** (the model's maximum length).",
                      n=len(t.tokens)))
    shown = " ".join(f"`{x}`" for x in t.tokens[:60]) + (" …" if len(t.tokens) > 60 else "")
    st.caption(tr("{n} tokens: {tokens}", n=len(t.tokens), tokens=shown))
    _explore(active, a, b, limit)


@st.fragment  # Back / Next, the stage, layer, head and token change only what is below them: only that reruns
def _explore(active, a, b, limit):
    model, tok = active.model, active.tokenizer
    layer = _kept(K_LAYER, list(range(model.config.num_hidden_layers)), 0)
    with user_action(tr("Trace the forward pass")) as act:
        t = _trace(model, tok, a, b, layer, limit)  # the tokens are those of every layer's trace
    if act.failed:
        return
    layer, head, token, stage_id = _controls(model, t.tokens)
    stage = FS.STAGE[stage_id]
    with user_action(tr("Show the stage")):
        _stage(model, tok, t, stage, layer, head, token)
    if layer == 0 and stage_id in ("ffn_add_norm", "next_layer"):  # "Start here": the end of layer 0 reached
        tour.mark_done("forward", active)
    st.divider()
    with user_action(tr("Follow one token")):
        _follow(model, t, stage, layer, head, token)


render()
