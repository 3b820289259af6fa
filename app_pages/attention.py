"""Attention page: every head's attention on a sentence or a pair (click a head to open it), one head up close
with a text alternative, attention rollout, bertviz (offline), per-head statistics, how a head formed during
training, and downloads (SVG/PNG figures, CSV, NPZ). The text, the layer/head and the tab live in the URL."""
import numpy as np
import plotly.graph_objects as go
import streamlit as st

from bertcore.analysis.explain import attention_rollout
from bertcore.analysis.inference import inspect_pair
from bertcore.data.tokenization import canonical_special
from explorer.figures import bertviz_offline
from explorer.parts import head_roles_view
from explorer.parts import replay, tour
from explorer.session import state
from explorer.parts import run_status
from explorer.figures.attention_stats import STAT_COLUMNS, STAT_LABELS, head_stats, head_stats_array, max_entropy, top_attended
from explorer.parts.examples import Examples, session_examples
from explorer.export import attention_csv, attentions_npz, plotly_config, rollout_csv
from explorer.figures.inspect import (
    attention_grid_figure,
    clicked_head,
    grid_cell_size,
    head_heatmap_figure,
    pooled_attention,
    stats_heatmap_figure,
)
from bertcore.data.user_text import is_blank
from explorer.i18n import LANGUAGES, frozen, mark, tr, using
from explorer.page_errors import user_action
from explorer.session.memo import memo, memo_shown

DEFAULT_A = "Ben reads a book in the library."
DEFAULT_B = "He walks to the school."
PAGE_MAX_TOKENS = 512  # BERT's position table; longer inputs are truncated (notice shown)
BERTVIZ_MAX_TOKENS = 64  # bertviz draws every line in the browser: beyond this it is unreadable and slow
TABS = [mark("All heads"), mark("One head"), mark("Rollout"), "bertviz", mark("Per-head statistics"),
        mark("Over training"), mark("Head roles")]  # English names; the tabs show tr(name) (explorer.i18n)
URL_TEXT_MAX = 2000  # longer texts are not written to the URL (links would break); the page says so


def _model_dims(model):
    cfg = model.config
    return int(cfg.num_hidden_layers), int(cfg.num_attention_heads), int(cfg.max_position_embeddings)


def _inputs(tok):
    """Sentence A / B; bound to the URL (``?attn_a=...&attn_b=...``) so a copied link reopens the same input.
    The defaults are words the model's vocabulary knows (explorer.parts.examples; a BERT-pytorch vocabulary gets
    its corpus's)."""
    ex = session_examples(tok, Examples("", "", DEFAULT_A, DEFAULT_B))
    url = dict(bind="query-params", persist_state="session")
    c1, c2 = st.columns(2)
    a = c1.text_area(tr("Sentence A"), value=ex.a, key="attn_a", height=80, max_chars=60_000, **url)
    use_b = c2.toggle(tr("Add a second sentence (pair: {pair})", pair=tok.pair_template()), value=True,
                      key="attn_use_b", **url)
    b = c2.text_area(tr("Sentence B"), value=ex.b, key="attn_b", height=80, max_chars=60_000,
                     disabled=not use_b, **url)
    if len(a or "") + len(b or "") > URL_TEXT_MAX:
        st.caption(tr("Texts over {n} characters make links too long to share reliably; copy the text too.",
                      n=URL_TEXT_MAX))
    return a, (b if use_b else None)


def _optional_b(b, tok):
    """Sentence B, or None when it is blank by the library's rule (``is_blank``): then only A is shown."""
    if b is not None and is_blank(b):
        st.info(tr("Sentence B is empty, so only sentence A is shown ({pair}).", pair=tok.pair_template(b=None)))
        return None
    return b


def _apply_grid_click(L, H):
    """A click on the all-heads grid (its selection, kept by streamlit under the chart's key) opens that head."""
    hit = clicked_head(st.session_state.get("attn_grid"))
    if hit is not None and hit != st.session_state.get("attn_last_click") and hit[0] < L and hit[1] < H:
        st.session_state["attn_layer"], st.session_state["attn_head"] = hit
        st.session_state["attn_tab"] = tr("One head")
    st.session_state["attn_last_click"] = hit


def _tab_in_this_language() -> None:
    """The tabs' labels are the session's language, and Streamlit keeps the open tab's label (session state and
    ``?attn_tab=`` in the URL). A tab named in another language (a link made in English opened with ?lang=zh, or
    the language switched on this page) is renamed to this language's label, so the same tab stays open."""
    names = {}  # a tab's label in any language -> its English name
    for lang in LANGUAGES:
        with using(lang):
            names.update({tr(name): name for name in TABS})
    shown = st.session_state.get("attn_tab", st.query_params.get("attn_tab"))
    if shown in names and tr(names[shown]) != shown:
        st.session_state["attn_tab"] = tr(names[shown])  # the widget reads it from here (and rewrites the URL)


def _head_roles(base, active, fmt, a, b) -> None:
    head_roles_view.render(base, active, fmt, a, b)
    tour.mark_done("heads", active)  # "Start here" step 2: the roles of a trained model's heads were shown


def _select_head(L, H):
    url = dict(bind="query-params", persist_state="session")
    for key, n in (("attn_layer", L), ("attn_head", H)):
        if st.session_state.get(key, 0) not in range(n):  # another model with fewer layers/heads is active
            st.session_state[key] = 0
    c1, c2, c3 = st.columns([1, 1, 2])
    layer = c1.selectbox(tr("Layer"), list(range(L)), format_func=frozen(lambda i: tr("layer {n}", n=i + 1)), key="attn_layer",
                         **url)
    head = c2.selectbox(tr("Head"), list(range(H)), format_func=frozen(lambda i: tr("head {n}", n=i + 1)), key="attn_head",
                        **url)
    fmt = c3.segmented_control(tr("Camera button in each chart's toolbar saves"), ["svg", "png"], default="svg",
                               format_func=str.upper, key="attn_fig_fmt", required=True)
    return int(layer), int(head), fmt or "svg"


def _chart(fig, key, fmt, name, **kw):
    return st.plotly_chart(fig, key=key, config=plotly_config(name, fmt), **kw)


def _grid(insp, tokens, fmt):
    A = insp.attentions
    L, H, T, _ = A.shape
    st.markdown(tr("**{L} layers × {H} heads**, one colour scale for all (0 to the largest weight, {top}). Rows are "
                   "queries (the token that attends), columns are keys. **Click a head** to open it in *One head*.",
                   L=L, H=H, top=f"{float(A.max()):.2f}"))
    n = grid_cell_size(L, H)
    P, labels = memo(insp, ("attn_pooled", n), lambda: pooled_attention(A, tokens, n))
    if P.shape[-1] < T:
        st.info(tr("{T} tokens × {heads} heads: each map is pooled on the server to {P} × {P} blocks of up to {n} "
                   "tokens (mean over the block's queries of the weight on the block's keys, so rows still sum to 1). "
                   "*One head* and *Rollout* show every token.", T=T, heads=L * H, P=P.shape[-1], n=-(-T // n)))
    fig = memo_shown(insp, ("attn_grid_fig", n), lambda: attention_grid_figure(P, tokens, labels=labels))
    _chart(fig, "attn_grid", fmt, "attention_all_heads", on_select="rerun", selection_mode="points")
    st.download_button(tr("All attentions (NPZ: attentions [L, H, T, T], tokens, segment_ids)"),
                       lambda: attentions_npz(A, tokens, insp.segment_ids), file_name="attentions.npz",
                       mime="application/octet-stream", key="attn_dl_npz", on_click="ignore")


def _top3(attn, tokens, key):
    st.markdown(tr("**Text alternative**: the three keys each query attends to most."))
    cfg = {f"weight {r}": st.column_config.NumberColumn(tr("weight {r}", r=r), format="%.3f") for r in (1, 2, 3)}
    cfg.update({f"key {r}": st.column_config.TextColumn(tr("key {r}", r=r)) for r in (1, 2, 3)})
    cfg.update(position=st.column_config.NumberColumn(tr("position")), query=st.column_config.TextColumn(tr("query")))
    st.dataframe(top_attended(attn, tokens, 3), hide_index=True, column_config=cfg, key=key, height=240)


def _one_head(insp, tokens, layer, head, fmt):
    A = insp.attentions[layer, head]
    fig = head_heatmap_figure(A, tokens, title=tr("layer {l}, head {h}", l=layer + 1, h=head + 1))
    _chart(fig, "attn_head_fig", fmt, f"attention_L{layer + 1}_H{head + 1}")
    st.download_button(tr("Layer {l}, head {h} as CSV", l=layer + 1, h=head + 1), lambda: attention_csv(A, tokens),
                       file_name=f"attention_layer{layer}_head{head}.csv", mime="text/csv", key="attn_dl_head",
                       on_click="ignore", help=tr("0-based layer/head in the file name, as in the CLI"))
    _top3(A, tokens, "attn_head_top3")


def _rollout(insp, tokens, fmt):
    st.markdown(tr("**Attention rollout** (Abnar & Zuidema 2020): each layer's head-averaged attention is mixed "
                   "with the identity for the residual connection, rows renormalised, and the layers multiplied: "
                   "row *i* says how much of each input token reaches position *i* at the top "
                   "(`bertcore.analysis.explain.attention_rollout`)."))
    st.latex(r"\bar A_l = \tfrac12\,\mathrm{mean}_h A_{l,h} + \tfrac12 I,\qquad "
             r"\mathrm{rollout} = \bar A_L \cdots \bar A_1")
    R = attention_rollout(insp.attentions)
    _chart(head_heatmap_figure(R, tokens, title=tr("attention rollout"), zmax=float(R.max())), "attn_rollout_fig",
           fmt, "attention_rollout")
    st.download_button(tr("Rollout as CSV"), lambda: rollout_csv(R, tokens), file_name="rollout.csv", mime="text/csv",
                       key="attn_dl_rollout", on_click="ignore")
    _top3(R, tokens, "attn_rollout_top3")


def _bertviz(insp, tokens, b_start):
    T = len(tokens)
    st.caption(tr("bertviz by Jesse Vig, served entirely from this server (d3 and jQuery inlined; no CDN). "
                  "Head view: pick a layer, hover or click a token; model view: every layer and head as "
                  "thumbnails, click one to enlarge it."))
    if T > BERTVIZ_MAX_TOKENS:
        st.info(tr("bertviz is shown for inputs of up to {max} tokens (it draws every line in the browser); this one "
                   "has {T}. The other tabs handle all {T} tokens; shorten the text to see it here.",
                   max=BERTVIZ_MAX_TOKENS, T=T))
        return
    view = st.radio(tr("View"), [mark("head view"), mark("model view")], horizontal=True, key="attn_bv_view", format_func=frozen())
    with user_action("Draw bertviz") as act:  # a visualisation problem must not break the page
        if view == "head view":
            html = bertviz_offline.head_view_html(insp.attentions, tokens, sentence_b_start=b_start)
            height = int(130 + 22.5 * T)  # bertviz head view: 22.5 px per token row
        else:
            html = bertviz_offline.model_view_html(insp.attentions, tokens, sentence_b_start=b_start)
            L, H = insp.attentions.shape[:2]
            # bertviz model view: rows of thumbnails T*84/H + 10 px high, or the enlarged detail view
            height = int(max(L * (T * 84 / H + 10) + 38, T * 18 + 55) + 70)
    if act.failed:
        return
    st.iframe(html, height=height)


def _stats(insp, tokens, fmt):
    df = head_stats(insp.attentions, tokens)
    T = len(tokens)
    cls = next((t for t in tokens if canonical_special(t) == "[CLS]"), "[CLS]")  # the vocabulary's spelling
    sep = next((t for t in tokens if canonical_special(t) == "[SEP]"), "[SEP]")
    st.markdown(tr(
        "Averages over the query rows. **Entropy** in nats: 0 means each query looks at one token, log T = {logt} "
        "means it spreads evenly over all {T} tokens. The other columns are the mean weight each query puts on "
        "{cls}, on all {sep}s, on itself, on the previous and on the next token.",
        logt=f"{max_entropy(tokens, T):.2f}", T=T, cls=cls, sep=sep))
    st.latex(r"H = -\frac{1}{T}\sum_{i=1}^{T}\sum_{j=1}^{T} a_{ij}\,\log a_{ij}")
    stat = st.selectbox(tr("Statistic to map"), STAT_COLUMNS, format_func=frozen(lambda s: tr(STAT_LABELS[s])),
                        key="attn_stat")
    zmax = max_entropy(tokens, T) if stat == "entropy" else 1.0
    _chart(stats_heatmap_figure(df, stat, zmax=zmax), "attn_stats_fig", fmt, f"head_{stat}")
    cfg = {c: st.column_config.NumberColumn(tr(STAT_LABELS[c]), format="%.3f") for c in STAT_COLUMNS}
    cfg.update(layer=st.column_config.NumberColumn(tr("layer")), head=st.column_config.NumberColumn(tr("head")))
    st.dataframe(df, hide_index=True, column_config=cfg, key="attn_stats_table")


def _no_snapshot_reason(active) -> str:
    kind = active.kind
    if kind == "untrained":
        return tr("The active model is untrained, so there is no training to replay. Train a model "
                  "(the button above or the Train page): the trainer records the attention on a fixed "
                  "probe pair every few steps.")
    if kind == "pretrained":
        return tr("{model} was pretrained elsewhere; its training history is not part of the download, so there are "
                  "no attention snapshots to replay. Train a model in this session to watch a head form.",
                  model=active.label)
    if kind == "uploaded":
        return tr("Uploaded checkpoints do not carry attention snapshots. Train a model in this session "
                  "to watch a head form.")
    return tr("This model has no attention snapshots (snapshot_every may have been 0 or training stopped "
              "before the first one).")


def _over_training(active, layer, head, fmt):


    bundle = active.bundle
    snaps = list(getattr(bundle, "snapshots", None) or [])
    probe = list(getattr(bundle, "probe_tokens", None) or [])
    if not snaps or not probe:
        st.info(_no_snapshot_reason(active))
        return
    L, H = snaps[0].attentions.shape[:2]
    if layer >= L or head >= H:
        layer, head = 0, 0
    st.markdown(tr("The trainer's probe pair, recorded at {n} steps. Showing **layer {l}, head {h}** (choose it "
                   "above, or click it in *All heads*). Colour scale: 0 to 1.", n=len(snaps), l=layer + 1, h=head + 1))
    steps = [int(s.step) for s in snaps]
    if len(snaps) > 1:
        idx = st.select_slider(tr("Training step"), options=list(range(len(snaps))),
                               value=len(snaps) - 1, format_func=lambda i: str(steps[i]), key="attn_snap")
    else:
        idx = 0
    A = np.asarray(snaps[idx].attentions)[layer, head]
    T = min(A.shape[0], len(probe))
    _chart(head_heatmap_figure(A[:T, :T], probe[:T], zmax=1.0,
                               title=tr("step {step}: layer {l}, head {h}", step=steps[idx], l=layer + 1, h=head + 1)),
           "attn_snap_fig", fmt, f"attention_step{steps[idx]}_L{layer + 1}_H{head + 1}")
    ent = [float(head_stats_array(np.asarray(s.attentions)[:, :, :T, :T], probe[:T])["entropy"][layer, head])
           for s in snaps]
    fig = go.Figure(go.Scatter(x=steps, y=ent, mode="lines+markers", name=tr("entropy")))
    fig.add_vline(x=steps[idx], line_dash="dot")
    fig.update_layout(height=240, xaxis_title=tr("step"), yaxis_title=tr("entropy (nats)"),
                      margin=dict(l=10, r=10, t=10, b=10))
    _chart(fig, "attn_snap_entropy", fmt, "entropy_over_training")


def _notices(insp, tokens, tok, a, b, limit, max_pos):
    if insp.truncated:
        why = tr("the model's maximum length") if limit == max_pos else tr("this page's limit ({n})", n=PAGE_MAX_TOKENS)
        st.warning(tr("The input is too long and was **truncated to {n} tokens** ({why}). Only the kept tokens are "
                      "shown.", n=len(tokens), why=why))
    try:
        unknown = tok.unknown_words(a + (" " + b if b else ""))
    except Exception:  # noqa: BLE001 - only a hint
        unknown = []
    if unknown:
        shown = ", ".join(dict.fromkeys(unknown[:12]))
        more = " …" if len(unknown) > 12 else ""
        st.info(tr("Not in the vocabulary, shown as [UNK]: {words}", words=shown + more))
    if len(tokens) <= 2 and not any(canonical_special(t) not in ("[CLS]", "[SEP]") for t in tokens):
        st.info(tr("After tokenization nothing but {cls}/{sep} is left (the text had no words the tokenizer keeps), so "
                   "the maps below only show special tokens.", cls=tok.cls_token, sep=tok.sep_token))


def render():
    st.title(tr("Attention"))
    base = state.get_active()
    active = replay.at_step(base, "attn")
    model, tok = active.model, active.tokenizer
    L, H, max_pos = _model_dims(model)

    st.markdown(tr(
        "Each of the model's heads mixes information between tokens: every token (a *query*) compares "
        "itself with every token (a *key*), and the softmax of those scores says how much of each "
        "token's value it takes in. Every row of a map below sums to 1. The weights are computed by "
        "`bertcore.analysis.inference.inspect_pair` (the model's forward pass with `output_attentions=True`)."))
    if model.config.causal:  # BERT Table 5's LTR: the causal mask (bertcore.model.bert.BertModel.attention_mask)
        st.latex(r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + M\right)V,"
                 r"\quad M_{ij} = -\infty \text{ for } j > i")
        st.info(tr("**{model} reads left to right** (attention_direction = left_to_right): the mask is causal. Each "
                   "token attends only to itself and the tokens before it, so every map below is lower-triangular, "
                   "with weight 0 above the diagonal, and its first row puts all weight on {cls}.", model=active.label,
                   cls=tok.cls_token))
    else:
        st.latex(r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V")
    st.caption(tr("Active model: **{model}**, {L} layers × {H} heads, up to {max} tokens. The text, the head and the "
                  "tab are in the address bar: copy the link to share this view.", model=active.label, L=L, H=H,
                  max=max_pos))
    if active.kind == "untrained":
        run_status.untrained_notice()
        run_status.default_train_button("attn_train_default")

    a, b = _inputs(tok)
    b = _optional_b(b, tok)
    limit = min(max_pos, PAGE_MAX_TOKENS)
    with user_action("Inspect the attention") as act:  # the library decides whether A holds words
        # every rerun of this page (a layer, a head, a tab) reads the same pair: one forward pass per model and input
        insp = memo(model, ("attn_inspect", a, b, limit), lambda: inspect_pair(model, tok, a, b, max_len=limit))
    if act.failed:
        return
    tokens = [str(t) for t in insp.tokens]
    _notices(insp, tokens, tok, a, b, limit, max_pos)
    # Sentence B starts at the first segment-1 token (a [SEP] typed inside A must not move the boundary).
    seg = list(insp.segment_ids)
    b_start = seg.index(1) if b is not None and 1 in seg else None
    shown = " ".join(f"`{t}`" for t in tokens[:80]) + (" …" if len(tokens) > 80 else "")
    st.caption(tr("Tokens: {tokens}", tokens=shown))

    _apply_grid_click(L, H)
    layer, head, fmt = _select_head(L, H)
    _tab_in_this_language()
    tabs = st.tabs([tr(name) for name in TABS], key="attn_tab", bind="query-params", on_change="rerun")
    views = {
        "All heads": lambda: _grid(insp, tokens, fmt),
        "One head": lambda: _one_head(insp, tokens, layer, head, fmt),
        "Rollout": lambda: _rollout(insp, tokens, fmt),
        "bertviz": lambda: _bertviz(insp, tokens, b_start),
        "Per-head statistics": lambda: _stats(insp, tokens, fmt),
        "Over training": lambda: _over_training(active, layer, head, fmt),
        "Head roles": lambda: _head_roles(base, active, fmt, a, b),
    }
    for name, tab in zip(TABS, tabs):
        if tab.open is not False:  # lazy: only the open tab runs (None when tabs do not track state)
            with tab, user_action(f"Show {name}"):
                views[name]()


render()
