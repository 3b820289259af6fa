"""Attention page: every head's attention on a sentence or a pair, one head up close, bertviz
(offline), per-head statistics, and how a head's pattern formed during training."""
import numpy as np
import streamlit as st

DEFAULT_A = "Ben reads a book in the library."
DEFAULT_B = "He walks to the school."
PAGE_MAX_TOKENS = 128  # longer inputs are truncated (notice shown): keeps the grid and bertviz light
GRID_MAX_CELLS = 72 * 64 * 64  # L*H*T*T drawn in the grid (MiniLM at 64 tokens)
BERTVIZ_MAX_TOKENS = 64


def _model_dims(model):
    cfg = model.config
    return int(cfg.num_hidden_layers), int(cfg.num_attention_heads), int(cfg.max_position_embeddings)


def _inputs():
    c1, c2 = st.columns(2)
    a = c1.text_area("Sentence A", value=DEFAULT_A, key="attn_a", height=80, max_chars=60_000)
    use_b = c2.toggle("Add a second sentence (pair: [CLS] A [SEP] B [SEP])", value=True, key="attn_use_b")
    b = c2.text_area("Sentence B", value=DEFAULT_B, key="attn_b", height=80, max_chars=60_000,
                     disabled=not use_b)
    return a, (b if use_b else None)


def _validate(a, b):
    """Return (a, b, message). message is None when the input can be inspected."""
    a = a or ""
    if not a.strip():
        return a, b, "Sentence A is empty. Type a sentence (for example: the cat sits on the mat)."
    if b is not None and not b.strip():
        b = None
        st.info("Sentence B is empty, so only sentence A is shown ([CLS] A [SEP]).")
    return a, b, None


def _select_head(L, H, key):
    c1, c2 = st.columns(2)
    layer = c1.selectbox("Layer", list(range(L)), format_func=lambda i: f"layer {i + 1}",
                         key=f"{key}_layer_{L}")
    head = c2.selectbox("Head", list(range(H)), format_func=lambda i: f"head {i + 1}",
                        key=f"{key}_head_{H}")
    return int(layer), int(head)


def _grid(insp, tokens):
    from explorer.figures_inspect import attention_grid_figure

    A = insp.attentions
    L, H, T, _ = A.shape
    st.markdown(f"**{L} layers × {H} heads**, one colour scale for all (0 to the largest weight, "
                f"{float(A.max()):.2f}). Rows are queries (the token that attends), columns are keys. "
                "Hover for the tokens and the weight.")
    if L * H * T * T > GRID_MAX_CELLS:
        n = max(2, int((GRID_MAX_CELLS / (L * H)) ** 0.5))
        st.info(f"{T} tokens × {L * H} heads is too much to draw at once; the grid shows the first {n} "
                "tokens (queries and keys). The single-head view, bertviz and the table use all tokens.")
        A = A[:, :, :n, :n]
        tokens = tokens[:n]
    fig = attention_grid_figure(A, tokens)
    st.plotly_chart(fig, key="attn_grid")


def _one_head(insp, tokens, L, H):
    from explorer.figures_inspect import head_heatmap_figure

    layer, head = _select_head(L, H, "attn_big")
    A = insp.attentions[layer, head]
    fig = head_heatmap_figure(A, tokens, title=f"layer {layer + 1}, head {head + 1}")
    st.plotly_chart(fig, key="attn_head_fig")
    top = np.argsort(-A, axis=1)[:, 0]
    st.caption("Where each query looks most: " + ", ".join(
        f"{tokens[i]}→{tokens[j]}" for i, j in enumerate(top[:40])) + (" …" if len(top) > 40 else ""))
    return layer, head


def _bertviz(insp, tokens, b_start):
    from explorer import bertviz_offline

    T = len(tokens)
    st.caption("bertviz by Jesse Vig, served entirely from this server (d3 and jQuery inlined; no CDN). "
               "Head view: pick a layer, hover or click a token; model view: every layer and head as "
               "thumbnails, click one to enlarge it.")
    if T > BERTVIZ_MAX_TOKENS:
        st.info(f"bertviz is shown for inputs of up to {BERTVIZ_MAX_TOKENS} tokens; this one has {T}. "
                "Shorten the text to see it here.")
        return
    view = st.radio("View", ["head view", "model view"], horizontal=True, key="attn_bv_view")
    try:
        if view == "head view":
            html = bertviz_offline.head_view_html(insp.attentions, tokens, sentence_b_start=b_start)
            height = int(130 + 22.5 * T)  # bertviz head view: 22.5 px per token row
        else:
            html = bertviz_offline.model_view_html(insp.attentions, tokens, sentence_b_start=b_start)
            L, H = insp.attentions.shape[:2]
            # bertviz model view: rows of thumbnails T*84/H + 10 px high, or the enlarged detail view
            height = int(max(L * (T * 84 / H + 10) + 38, T * 18 + 55) + 70)
    except Exception as e:  # noqa: BLE001 - a visualisation problem must not break the page
        st.error(f"bertviz could not draw this input: {type(e).__name__}: {e}")
        return
    st.iframe(html, height=height)


def _stats(insp, tokens):
    from explorer.attention_stats import STAT_COLUMNS, STAT_LABELS, head_stats, max_entropy
    from explorer.figures_inspect import stats_heatmap_figure

    df = head_stats(insp.attentions, tokens)
    T = len(tokens)
    st.markdown(
        "Averages over the query rows. **Entropy** in nats: 0 means each query looks at one token, "
        f"log T = {max_entropy(tokens, T):.2f} means it spreads evenly over all {T} tokens. "
        "The other columns are the mean weight each query puts on [CLS], on all [SEP]s, on itself, "
        "on the previous and on the next token.")
    st.latex(r"H = -\frac{1}{T}\sum_{i=1}^{T}\sum_{j=1}^{T} a_{ij}\,\log a_{ij}")
    stat = st.selectbox("Statistic to map", STAT_COLUMNS, format_func=lambda s: STAT_LABELS[s],
                        key="attn_stat")
    zmax = max_entropy(tokens, T) if stat == "entropy" else 1.0
    st.plotly_chart(stats_heatmap_figure(df, stat, zmax=zmax), key="attn_stats_fig")
    cfg = {c: st.column_config.NumberColumn(STAT_LABELS[c], format="%.3f") for c in STAT_COLUMNS}
    st.dataframe(df, hide_index=True, column_config=cfg, key="attn_stats_table")


def _no_snapshot_reason(active) -> str:
    kind = active.kind
    if kind == "untrained":
        return ("The active model is untrained, so there is no training to replay. Train a model "
                "(the button above or the Train page): the trainer records the attention on a fixed "
                "probe pair every few steps.")
    if kind == "pretrained":
        return (f"{active.label} was pretrained elsewhere; its training history is not part of the "
                "download, so there are no attention snapshots to replay. Train a model in this session "
                "to watch a head form.")
    if kind == "uploaded":
        return ("Uploaded checkpoints do not carry attention snapshots. Train a model in this session "
                "to watch a head form.")
    return ("This model has no attention snapshots (snapshot_every may have been 0 or training stopped "
            "before the first one).")


def _over_training(active, layer, head):
    from explorer.attention_stats import head_stats_array
    from explorer.figures_inspect import head_heatmap_figure
    import plotly.graph_objects as go

    bundle = active.bundle
    snaps = list(getattr(bundle, "snapshots", None) or [])
    probe = list(getattr(bundle, "probe_tokens", None) or [])
    if not snaps or not probe:
        st.info(_no_snapshot_reason(active))
        return
    L, H = snaps[0].attentions.shape[:2]
    if layer >= L or head >= H:
        layer, head = 0, 0
    st.markdown(f"The trainer's probe pair, recorded at {len(snaps)} steps. Showing **layer {layer + 1}, "
                f"head {head + 1}** (change it above in *One head*). Colour scale: 0 to 1.")
    steps = [int(s.step) for s in snaps]
    if len(snaps) > 1:
        idx = st.select_slider("Training step", options=list(range(len(snaps))),
                               value=len(snaps) - 1, format_func=lambda i: str(steps[i]), key="attn_snap")
    else:
        idx = 0
    snap = snaps[idx]
    A = np.asarray(snap.attentions)[layer, head]
    T = min(A.shape[0], len(probe))
    st.plotly_chart(head_heatmap_figure(A[:T, :T], probe[:T], zmax=1.0,
                                        title=f"step {steps[idx]}: layer {layer + 1}, head {head + 1}"),
                    key="attn_snap_fig")
    ent = [float(head_stats_array(np.asarray(s.attentions)[:, :, :T, :T], probe[:T])["entropy"][layer, head])
           for s in snaps]
    fig = go.Figure(go.Scatter(x=steps, y=ent, mode="lines+markers", name="entropy"))
    fig.add_vline(x=steps[idx], line_dash="dot")
    fig.update_layout(height=240, xaxis_title="step", yaxis_title="entropy (nats)",
                      margin=dict(l=10, r=10, t=10, b=10))
    st.plotly_chart(fig, key="attn_snap_entropy")


def render():
    from bertcore.errors import BertcoreError
    from bertcore.analysis.inference import inspect_pair
    from explorer import state

    active = state.get_active()
    model, tok = active.model, active.tokenizer
    L, H, max_pos = _model_dims(model)

    st.title("Attention")
    st.markdown(
        "Each of the model's heads mixes information between tokens: every token (a *query*) compares "
        "itself with every token (a *key*), and the softmax of those scores says how much of each "
        "token's value it takes in. Every row of a map below sums to 1. The weights are computed by "
        "`bertcore.analysis.inference.inspect_pair` (the model's forward pass with `output_attentions=True`).")
    st.latex(r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V")
    st.caption(f"Active model: **{active.label}**, {L} layers × {H} heads, up to {max_pos} tokens.")
    if active.kind == "untrained":
        state.untrained_notice()
        state.default_train_button("attn_train_default")

    a, b = _inputs()
    a, b, msg = _validate(a, b)
    if msg:
        st.warning(msg)
        return
    limit = min(max_pos, PAGE_MAX_TOKENS)
    try:
        insp = inspect_pair(model, tok, a, b, max_len=limit)
    except BertcoreError as e:
        st.error(str(e))
        return
    tokens = [str(t) for t in insp.tokens]
    if insp.truncated:
        why = "the model's maximum length" if limit == max_pos else f"this page's limit ({PAGE_MAX_TOKENS})"
        st.warning(f"The input is too long and was **truncated to {len(tokens)} tokens** ({why}). "
                   "Only the kept tokens are shown.")
    try:
        unknown = tok.unknown_words(a + (" " + b if b else ""))
    except Exception:  # noqa: BLE001 - only a hint
        unknown = []
    if unknown:
        shown = ", ".join(dict.fromkeys(unknown[:12]))
        st.info(f"Not in the vocabulary, shown as [UNK]: {shown}{' …' if len(unknown) > 12 else ''}")
    if len(tokens) <= 2 and not any(t not in ("[CLS]", "[SEP]") for t in tokens):
        st.info("After tokenization nothing but [CLS]/[SEP] is left (the text had no words the tokenizer "
                "keeps), so the maps below only show special tokens.")
    # Sentence B starts at the first segment-1 token (a [SEP] typed inside A must not move the boundary).
    seg = list(insp.segment_ids)
    b_start = seg.index(1) if b is not None and 1 in seg else None
    st.caption("Tokens: " + " ".join(f"`{t}`" for t in tokens[:80]) + (" …" if len(tokens) > 80 else ""))

    tab_grid, tab_head, tab_bv, tab_stats, tab_train = st.tabs(
        ["All heads", "One head", "bertviz", "Per-head statistics", "Over training"])
    with tab_grid:
        _grid(insp, tokens)
    with tab_head:
        layer, head = _one_head(insp, tokens, L, H)
    with tab_bv:
        _bertviz(insp, tokens, b_start)
    with tab_stats:
        _stats(insp, tokens)
    with tab_train:
        _over_training(active, layer, head)


render()
