"""Predict page: fill-mask (MLM head) and next-sentence prediction (NSP head), optionally side by side
with a second model on the same input."""
import re
import zlib

import streamlit as st

DEFAULT_MASKED = "the cows [MASK] the hay near the barn ."
DEFAULT_SENTENCE = "The cow eats the hay near the barn."
DEFAULT_A = "Ben reads a book in the library."
DEFAULT_B = "He walks to the school."
MAX_MASK_CHARTS = 12
NO_COMPARE = "(no comparison)"
_WORD = re.compile(r"\[(?:MASK|CLS|SEP|PAD|UNK)\]|\w+|[^\w\s]", re.I)


def _words(text: str) -> list[str]:
    return _WORD.findall(text or "")


def _pill_labels(words: list[str]) -> list[str]:
    """Unique button labels: a repeated word gets its occurrence number ("the", "the (2)")."""
    seen: dict[str, int] = {}
    out = []
    for w in words:
        seen[w] = seen.get(w, 0) + 1
        out.append(w if seen[w] == 1 else f"{w} ({seen[w]})")
    return out


def _mask_words(words: list[str], chosen) -> str:
    chosen = set(chosen or [])
    return " ".join("[MASK]" if i in chosen else w for i, w in enumerate(words))


def _compare_choice(state, active):
    models = state.list_models()
    others = [lbl for lbl in models if lbl != active.label]
    options = [NO_COMPARE] + others
    default = options.index(state.UNTRAINED_LABEL) if state.UNTRAINED_LABEL in others else 0
    choice = st.selectbox("Compare side by side with", options, index=default, key="pred_compare",
                          help="Runs the same input through a second model: the untrained one, or another "
                               "model of this session (trained, uploaded or pretrained).")
    return [active] + ([models[choice]] if choice != NO_COMPARE else [])


def _unknown_hint(tok, text):
    try:
        unk = tok.unknown_words(text)
    except Exception:  # noqa: BLE001 - only a hint
        return
    if unk:
        shown = ", ".join(list(dict.fromkeys(unk))[:10])
        st.caption(f"Not in this model's vocabulary (fed as [UNK]): {shown}")


def _fill_mask_column(am, text, top_k):
    from bertcore.errors import BertcoreError
    from bertcore.analysis.inference import fill_mask
    from explorer.figures_inspect import fill_mask_figure

    st.markdown(f"**{am.label}**")
    model, tok = am.model, am.tokenizer
    if not getattr(model, "has_mlm_head", True):
        st.info(f"{am.label} has no masked-language-model head (it was published as a bare encoder "
                "without the MLM layer), so it cannot fill in [MASK]. Nothing is predicted here.")
        return
    try:
        res = fill_mask(model, tok, text, top_k=top_k)
    except BertcoreError as e:
        st.error(str(e))
        return
    if res.truncated:
        st.warning(f"The text was truncated to {len(res.tokens)} tokens (the model's maximum length); "
                   "masks after that point are not predicted.")
    _unknown_hint(tok, text)
    if not res.masks:
        st.warning("No [MASK] is left after truncation. Put the [MASK] nearer the start.")
        return
    st.caption("Model input: " + " ".join(f"`{t}`" for t in res.tokens[:60]) +
               (" …" if len(res.tokens) > 60 else ""))
    if len(res.masks) > MAX_MASK_CHARTS:
        st.info(f"{len(res.masks)} masks: charts for the first {MAX_MASK_CHARTS}. With this many masks the "
                "model sees little context, so the guesses get poor.")
    for k, m in enumerate(res.masks[:MAX_MASK_CHARTS]):
        st.plotly_chart(fill_mask_figure(m.candidates, title=f"[MASK] {k + 1} (position {m.position})"),
                        key=f"pred_fm_{am.label}_{k}")


def _fill_mask_section(state, models):
    st.subheader("Fill in the [MASK]")
    mode = st.radio("How to choose the masks", ["Type text with [MASK]", "Click words to mask them"],
                    horizontal=True, key="pred_mode")
    if mode == "Type text with [MASK]":
        text = st.text_area("Text with one or more [MASK]", value=DEFAULT_MASKED, key="pred_text",
                            height=80, max_chars=60_000)
    else:
        sentence = st.text_input("Sentence", value=DEFAULT_SENTENCE, key="pred_sentence", max_chars=2_000)
        words = _words(sentence)[:80]
        labels = _pill_labels(words)
        if not words:
            st.warning("The sentence is empty. Type a sentence, then click the words to mask.")
            return
        chosen = st.pills("Click the words to replace with [MASK]", list(range(len(words))),
                          format_func=lambda i: labels[i], selection_mode="multi",
                          key=f"pred_pills_{zlib.crc32(sentence.encode())}")
        if not chosen:
            st.info("Click one or more words above to mask them.")
            return
        text = _mask_words(words, chosen)
        st.markdown(f"Masked text: `{text}`")
    top_k = st.slider("Top-k candidates per mask", 1, 10, 5, key="pred_topk")
    if not (text or "").strip():
        st.warning("The text is empty. Type a sentence containing [MASK], e.g. `the cat [MASK] on the mat`.")
        return
    if "[mask]" not in text.lower():
        st.warning("The text has no [MASK]. Write [MASK] where a word should be predicted, "
                   "or switch to *Click words to mask them*.")
        return
    cols = st.columns(len(models))
    for col, am in zip(cols, models):
        with col:
            _fill_mask_column(am, text, top_k)


def _nsp_section(models):
    from bertcore.errors import BertcoreError
    from bertcore.analysis.inference import nsp_probability
    from explorer.figures_inspect import nsp_figure

    st.subheader("Next-sentence prediction")
    st.markdown("The NSP head reads the [CLS] vector of `[CLS] A [SEP] B [SEP]` and gives two logits; "
                "P(IsNext) is the softmax of the first one (label 0 = IsNext, as in transformers).")
    c1, c2 = st.columns(2)
    a = c1.text_area("Sentence A", value=DEFAULT_A, key="pred_nsp_a", height=70, max_chars=60_000)
    b = c2.text_area("Sentence B", value=DEFAULT_B, key="pred_nsp_b", height=70, max_chars=60_000)
    if not (a or "").strip() or not (b or "").strip():
        st.warning("NSP needs two sentences: type both sentence A and sentence B.")
        return
    cols = st.columns(len(models))
    for col, am in zip(cols, models):
        with col:
            st.markdown(f"**{am.label}**")
            if not getattr(am.model, "has_nsp_head", True):
                st.info(f"{am.label} has no next-sentence-prediction head (it was published without it), "
                        "so it cannot say whether B follows A. Nothing is predicted here.")
                continue
            try:
                p = float(nsp_probability(am.model, am.tokenizer, a, b))
            except BertcoreError as e:
                st.error(str(e))
                continue
            st.metric("P(IsNext)", f"{p:.1%}")
            st.plotly_chart(nsp_figure(p), key=f"pred_nsp_{am.label}")


def render():
    from explorer import state

    active = state.get_active()
    st.title("Predict")
    st.markdown(
        "BERT is pre-trained on two tasks, and their heads can be asked directly. **Fill-mask**: the MLM "
        "head turns the final hidden state at each [MASK] into a probability for every vocabulary word "
        "(`bertcore.analysis.inference.fill_mask`). **Next sentence**: the NSP head says how likely B really "
        "followed A (`bertcore.analysis.inference.nsp_probability`).")
    st.latex(r"P(w \mid \text{context}) = \mathrm{softmax}\big(W_{\text{emb}}\,"
             r"\mathrm{LN}(\mathrm{gelu}(W h_{\text{[MASK]}}))+b\big)_w")
    if active.kind == "untrained":
        state.untrained_notice()
        state.default_train_button("pred_train_default")
    models = _compare_choice(state, active)
    _fill_mask_section(state, models)
    st.divider()
    _nsp_section(models)


render()
