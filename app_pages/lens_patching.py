"""Logit lens & patching page: where in the network an answer forms. The lens reads every
layer's hidden state at a [MASK] with the model's own MLM head; activation patching puts text B's hidden state (or
one head's output) into text A's run and measures how far the answer moves from A's to B's. Texts, words, the view
and the replay step live in the URL; the numbers equal ``python -m bertcore lens/patch ... --json``."""
import streamlit as st

from bertcore.analysis.inference import encode_pair
from bertcore.analysis.lens import NO_MLM_HEAD, applied_description, has_mlm_head, logit_lens
from bertcore.analysis.patching import activation_patching, default_pairs, focus_positions
from bertcore.data.user_text import is_blank
from explorer.parts import replay, tour
from explorer.session import state
from explorer.parts import run_status
from explorer.export import head_patch_csv, lens_csv, patch_csv, plotly_config
from explorer.figures.interp import head_patch_figure, lens_table, patch_figure, word_curve_figure
from explorer.i18n import frozen, mark, tr
from explorer.session.memo import memo
from explorer.page_errors import user_action

VIEWS = {"lens": mark("Logit lens"), "patch": mark("Activation patching")}
PAGE_MAX_TOKENS = 512
PATCH_ALL_MAX = 64  # longer inputs patch [CLS], the differing positions and the [MASK] unless asked for all
URL = dict(bind="query-params", persist_state="session")
K_PAIR = "lp_pair"


def _limit(model) -> int:
    return min(int(model.config.max_position_embeddings), PAGE_MAX_TOKENS)


def _pairs(tok):
    return memo(tok, ("lens_default_pairs",), lambda: default_pairs(tok))


def _use_pair():
    pairs = st.session_state.get("_lp_pairs") or []
    i = st.session_state.get(K_PAIR)
    if isinstance(i, int) and 0 <= i < len(pairs):
        a, b, right, wrong = pairs[i]
        st.session_state.update(lp_a=a, lp_b=b, lp_right=right, lp_wrong=wrong, lp_text=a, lp_word=right)


def _pair_picker(tok):
    pairs = _pairs(tok)
    st.session_state["_lp_pairs"] = pairs
    if not pairs:
        st.info(tr("This model's vocabulary lacks the built-in grammar's words (e.g. 'the cow [MASK] muddy .'), so "
                   "no pair is prefilled: type two texts of the same token length."))
        return ("", "", "", "")
    st.selectbox(tr("Ready pairs from the built-in grammar (subject number: is / are)"), range(len(pairs)),
                 format_func=lambda i: f"{pairs[i][0]}  ↔  {pairs[i][1]}  ({pairs[i][2]} / {pairs[i][3]})",
                 key=K_PAIR, index=None, placeholder=tr("Pick a pair to fill the texts"), on_change=_use_pair)
    return pairs[0]


def _lens_view(model, tok, first):
    if not has_mlm_head(model):
        st.info(tr("No MLM head: {why}. Activation patching still works (its readout is then the final [CLS] "
                   "state).", why=NO_MLM_HEAD))
        return
    c1, c2, c3 = st.columns([4, 1, 1])
    text = c1.text_input(tr("Text with [MASK]"), value=first[0], key="lp_text", **URL)
    word = c2.text_input(tr("Follow the word"), value=first[2], key="lp_word", **URL)
    k = c3.number_input(tr("Top k"), 1, 20, 5, key="lp_k")
    st.caption(tr("Applied to every layer's hidden state at each [MASK]: {what}. The last row equals fill-mask "
                  "(Predict page).", what=applied_description(model)))
    with user_action(tr("Run the logit lens")) as act:
        r = memo(model, ("lens", text, int(k), word.strip(), _limit(model)),
                 lambda: logit_lens(model, tok, text, top_k=int(k), word=None if is_blank(word) else word.strip(),
                                    max_len=_limit(model)))
    if act.failed:
        return
    tour.mark_done("lens", state.get_active())
    for m, pos in enumerate(r.positions[:8]):
        st.markdown(tr("**[MASK] at position {pos}**", pos=pos))
        st.dataframe(lens_table(r.top[m]), hide_index=True, width="stretch")
        if r.word is not None:
            st.plotly_chart(word_curve_figure(r.word, r.word_rank[m], r.word_prob[m]), width="stretch",
                            config=plotly_config(f"lens_{r.word}"), key=f"lp_curve_{m}")
        st.download_button(tr("Download CSV"), lens_csv(r.top[m], r.word, r.word_rank[m] if r.word else None,
                                                        r.word_prob[m] if r.word else None),
                           file_name=f"logit_lens_mask{pos}.csv", mime="text/csv", key=f"lp_lens_csv_{m}")


def _patch_inputs(model, first):
    c1, c2 = st.columns(2)
    a = c1.text_input(tr("Text A (its answer = 0)"), value=first[0], key="lp_a", **URL)
    b = c2.text_input(tr("Text B (its answer = 1), the same number of tokens"), value=first[1], key="lp_b", **URL)
    mlm = has_mlm_head(model)
    c1, c2, c3 = st.columns([1, 1, 2])
    right = c1.text_input(tr("Right word"), value=first[2], key="lp_right", disabled=not mlm, **URL)
    wrong = c2.text_input(tr("Wrong word"), value=first[3], key="lp_wrong", disabled=not mlm, **URL)
    long = len((a or "").split()) > PATCH_ALL_MAX  # about the token count: heads on long texts take seconds
    heads = c3.toggle(tr("Also patch single heads (layer × head map)"), value=not long, key="lp_heads",
                      help=tr("Every head of every layer: for a 512-token MiniLM input about 8 s (docs/BENCH.md)."))
    return a, b, right, wrong, heads


def _patch_view(model, tok, first):
    a, b, right, wrong, heads = _patch_inputs(model, first)
    limit = _limit(model)
    if not has_mlm_head(model):
        st.info(tr("No MLM head: the readout is the final [CLS] hidden state projected on the direction from A's "
                   "to B's final [CLS] state (0 = A's state, 1 = B's)."))
    with user_action(tr("Patch the activations")) as act:
        n_tokens = len(encode_pair(tok, a, None, limit)[0])
        positions = None
        if n_tokens > PATCH_ALL_MAX and not st.toggle(
                tr("Patch every position (slow for long texts)"), value=False, key="lp_all"):
            positions = focus_positions(tok, a, b, limit)
            st.caption(tr("Long input: patching [CLS], the positions where A and B differ and the [MASK] "
                          "({n} positions).", n=len(positions)))
        key = ("patch", a, b, right.strip(), wrong.strip(), heads, tuple(positions or ()), limit)
        r = memo(model, key, lambda: activation_patching(
            model, tok, a, b, None if is_blank(right) else right.strip(), None if is_blank(wrong) else wrong.strip(),
            heads, positions, limit))
    if act.failed:
        return
    for n in r.notes:
        st.caption(n)
    what = tr("logit({right}) − logit({wrong})", right=right, wrong=wrong) if r.readout == "logit_diff" else \
        tr("[CLS] projection")
    st.markdown(tr("Unpatched {what}: A **{da:.3f}**, B **{db:.3f}**. Effect = (d_patched − d_A) / (d_B − d_A).",
                   what=what, da=r.d_a, db=r.d_b))
    st.plotly_chart(patch_figure(r.effect, r.tokens_a, r.positions, r.position,
                                 tr("B's hidden state at one layer × position, patched into A")),
                    width="stretch", config=plotly_config("patching_layer_position"), key="lp_fig_pos")
    st.download_button(tr("Download CSV"), patch_csv(r.effect, r.raw, r.tokens_a, r.positions),
                       file_name="patching_layer_position.csv", mime="text/csv", key="lp_csv_pos")
    if r.head_effect is not None:
        st.plotly_chart(head_patch_figure(r.head_effect, tr("One head's output from B, at every position")),
                        width="stretch", config=plotly_config("patching_layer_head"), key="lp_fig_head")
        st.download_button(tr("Download CSV"), head_patch_csv(r.head_effect, r.head_raw),
                           file_name="patching_layer_head.csv", mime="text/csv", key="lp_csv_head")


def _view() -> str:
    """The view radio; its value is kept in the URL as ``?lp_view=lens|patch`` (language-independent)."""
    asked = st.query_params.get("lp_view")
    options = list(VIEWS)
    view = st.radio(tr("View"), options, format_func=frozen(lambda v: tr(VIEWS[v])), horizontal=True, key="lp_view_radio",
                    index=options.index(asked) if asked in options else 0)
    st.query_params["lp_view"] = view
    return view


def render():
    st.title(tr("Logit lens & patching"))
    active = replay.at_step(state.get_active(), "lp")
    model, tok = active.model, active.tokenizer
    st.markdown(tr("Where does the model know the answer? The **logit lens** (nostalgebraist 2020) reads every "
                   "layer with the model's own MLM head; **activation patching** (Vig et al. 2020; Meng et al. 2022) "
                   "runs text A with one hidden state taken from text B and shows how far the answer moves "
                   "(0 = A's answer, 1 = B's). Layer 0 is the embedding output."))
    st.caption(tr("Active model: **{label}**. The texts, words, view and step are in the address bar; the same "
                  "numbers: `python -m bertcore lens` / `patch ... --json`.", label=active.label))
    if active.kind == "untrained":
        run_status.untrained_notice()
    first = _pair_picker(tok)
    view = _view()
    with user_action(tr("Show {view}", view=tr(VIEWS.get(view, "")))):
        (_lens_view if view == "lens" else _patch_view)(model, tok, first)


render()
