"""Predict page: fill-mask (MLM head) and the sentence head (next-sentence or sentence-order prediction), optionally
side by side with a second model on the same input. A left-to-right model cannot fill a [MASK]; its column shows
its next-token guesses for the text before the [MASK] instead (``bertcore.analysis.inference.next_tokens``)."""
import re
import zlib

import pandas as pd
import streamlit as st

from bertcore.analysis.ablation import head_mask_for
from bertcore.analysis.explain import MIN_IG_STEPS, explain_all
from bertcore.analysis.inference import next_tokens, predict, sentence_head_label
from bertcore.model.formulas import formulas
from explorer.parts import examples, replay, tour
from explorer.session import state, workspace
from explorer.parts import run_status
from explorer.export import attributions_csv, plotly_config
from explorer.parts import ablation_view
from explorer.figures.explain import METHOD_LABELS, token_strip_figure
from explorer.figures.inspect import fill_mask_figure, nsp_figure
from explorer.i18n import frozen, mark, tr
from explorer.session.memo import has as memo_has
from explorer.session.memo import memo as shared_memo
from explorer.page_errors import user_action
from bertcore.data.user_text import clean_text

# the pre-filled texts for a word-level or WordPiece model (a BERT-pytorch vocabulary gets its own: _examples)
DEFAULT_MASKED = "the cows [MASK] the hay near the barn ."
DEFAULT_SENTENCE = "The cow eats the hay near the barn."
DEFAULT_A = "Ben reads a book in the library."
DEFAULT_B = "He walks to the school."

MAX_MASK_CHARTS = 12
NO_COMPARE = mark("(no comparison)")
_WORD = re.compile(r"\[(?:MASK|CLS|SEP|PAD|UNK)\]|<(?:mask|sos|eos|pad|unk)>|\w+|[^\w\s]", re.I)


def _words(text: str, tok=None) -> list[str]:
    """The clickable words: the tokenizer's own words where it splits text itself (a BERT-pytorch vocabulary keeps
    "barn." whole), else words and punctuation marks."""
    split = getattr(tok, "words", None)
    return split(text or "") if split is not None else _WORD.findall(text or "")


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


def _compare_choice(state, active, ex):
    """The models side by side: the active one, and by default the untrained one, when it can read the page's
    example (a model trained on Chinese is not compared with the untrained English one: all its words are [UNK])."""
    models = workspace.list_models()
    others = [lbl for lbl in models if lbl != active.label]
    options = [NO_COMPARE] + others
    untrained = models.get(workspace.UNTRAINED_LABEL)
    readable = untrained is not None and examples.mostly_known(untrained.tokenizer, [ex.masked])
    default = options.index(workspace.UNTRAINED_LABEL) if workspace.UNTRAINED_LABEL in others and readable else 0
    choice = st.selectbox(tr("Compare side by side with"), options, index=default, key="pred_compare",
                          format_func=frozen(lambda o: tr(o) if o == NO_COMPARE else o),
                          help=tr("Runs the same input through a second model: the untrained one, or another "
                                  "model of this session (trained, uploaded or pretrained)."))
    return [active] + ([models[choice]] if choice != NO_COMPARE else [])


def _examples(tok):
    """Pre-filled texts the active model's vocabulary knows (explorer.parts.examples): these defaults, or for a seed
    vocabulary sentences from the corpus it knows best (this session's corpus, the tutorial, the built-in)."""
    return examples.session_examples(tok, examples.Examples(DEFAULT_MASKED, DEFAULT_SENTENCE, DEFAULT_A, DEFAULT_B))


def _mask_name(tok) -> str:
    """How the help texts name the mask token: [MASK], and the vocabulary's own spelling where it differs."""
    own = getattr(tok, "mask_token", "[MASK]")
    return "[MASK]" if own == "[MASK]" else tr("[MASK] (or {own})", own=own)


def _unknown_hint(tok, text):
    try:
        unk = tok.unknown_words(text)
    except Exception:  # noqa: BLE001 - only a hint
        return
    if unk:
        shown = ", ".join(list(dict.fromkeys(unk))[:10])
        st.caption(tr("Not in this model's vocabulary (fed as {unk}): {words}",
                      unk=getattr(tok, 'unk_token', '[UNK]'), words=shown))


def _predict(am, a, b=None, top_k=5, heads=()):
    """Both heads on one input in one forward pass (``bertcore.analysis.inference.predict``), once per (model,
    input, heads switched off) for every session of this server (``explorer.session.memo``); a text alone must hold a
    [MASK]. Raises the library's InputError for bad input."""
    model = am.model
    heads = tuple(heads)

    def run():
        L, H = int(model.config.num_hidden_layers), int(model.config.num_attention_heads)
        mask = head_mask_for(heads, L, H) if heads else None
        return predict(model, am.tokenizer, a, b, top_k=top_k, head_mask=mask, require_mask=b is None)

    return shared_memo(model, ("predict", a, b, top_k, heads), run)


def _causal(am) -> bool:
    return bool(getattr(am.model.config, "causal", False))


def _next(am, text, top_k):
    """A left-to-right model's next-token guesses after the text up to its first [MASK] (``next_tokens``), once
    per (model, text, k) for every session."""
    return shared_memo(am.model, ("next_tokens", text, top_k),
                       lambda: next_tokens(am.model, am.tokenizer, text, top_k=top_k))


def _next_token_column(am, res, text):
    """A left-to-right model's column of the fill-mask section: why it cannot fill a [MASK], and its next-token
    guesses (the top-k of its LM head at the prefix's last token)."""
    prefix = " ".join(res.tokens[1:res.position + 1])
    st.info(tr("{model} reads left to right (attention_direction = left_to_right): it predicts the next token from "
               "the words on its left and never sees the right side of a [MASK], so it cannot fill one. Shown "
               "instead: its next-token guesses after the text up to the first [MASK] "
               "(`bertcore.analysis.inference.next_tokens`).", model=am.label))
    _unknown_hint(am.tokenizer, text)
    if res.truncated:
        st.warning(tr("The text was truncated to {n} tokens (the model's maximum length).", n=len(res.tokens)))
    st.caption(tr("Model input: {tokens}; the guess is read at position {p}, the prefix's last token.",
                  tokens=" ".join(f"`{t}`" for t in res.tokens[:60]) + (" …" if len(res.tokens) > 60 else ""),
                  p=res.position))
    title = tr("next token after “{prefix}”", prefix=prefix) if prefix else tr("first token (after {cls})",
                                                                             cls=res.tokens[0])
    st.plotly_chart(fill_mask_figure(res.candidates, title=title), key=f"pred_next_{am.label}")


def _fill_mask_column(am, res, text):
    st.markdown(f"**{am.label}**")
    tok = am.tokenizer
    if not getattr(am.model, "has_mlm_head", True):
        st.info(tr("{model} has no masked-language-model head (it was published as a bare encoder "
                   "without the MLM layer), so it cannot fill in [MASK]. Nothing is predicted here.", model=am.label))
        return
    if res is None:
        return
    if _causal(am):
        _next_token_column(am, res, text)
        return
    if res.truncated:
        st.warning(tr("The text was truncated to {n} tokens (the model's maximum length); "
                      "masks after that point are not predicted.", n=len(res.tokens)))
    _unknown_hint(tok, text)
    if not res.masks:
        st.warning(tr("No [MASK] is left after truncation. Put the [MASK] nearer the start."))
        return
    st.caption(tr("Model input: {tokens}", tokens=" ".join(f"`{t}`" for t in res.tokens[:60]) +
                  (" …" if len(res.tokens) > 60 else "")))
    if len(res.masks) > MAX_MASK_CHARTS:
        st.info(tr("{n} masks: charts for the first {shown}. With this many masks the "
                   "model sees little context, so the guesses get poor.", n=len(res.masks), shown=MAX_MASK_CHARTS))
    for k, m in enumerate(res.masks[:MAX_MASK_CHARTS]):
        st.plotly_chart(fill_mask_figure(m.candidates, title=tr("[MASK] {k} (position {position})", k=k + 1, position=m.position)),
                        key=f"pred_fm_{am.label}_{k}")


def _fill_mask_section(state, models, ex):
    mask = _mask_name(models[0].tokenizer)
    st.subheader(tr("Fill in the [MASK]"))
    mode = st.radio(tr("How to choose the masks"), [mark("Type text with [MASK]"), mark("Click words to mask them")],
                    horizontal=True, key="pred_mode", format_func=frozen())
    if mode == "Type text with [MASK]":
        text = st.text_area(tr("Text with one or more {mask}", mask=mask), value=ex.masked, key="pred_text",
                            height=80, max_chars=60_000)
    else:
        sentence = st.text_input(tr("Sentence"), value=ex.sentence, key="pred_sentence", max_chars=2_000)
        with user_action(tr("Read the sentence")) as act:
            cleaned, _ = clean_text(sentence, "the sentence")  # the library's rule: invisible characters are not words
        if act.failed:
            return None
        words = _words(cleaned, models[0].tokenizer)[:80]
        labels = _pill_labels(words)
        if not words:
            st.warning(tr("The sentence has no word to click. Type a sentence, then click the words to mask."))
            return None
        chosen = st.pills(tr("Click the words to replace with [MASK]"), list(range(len(words))),
                          format_func=lambda i: labels[i], selection_mode="multi",
                          key=f"pred_pills_{zlib.crc32(sentence.encode())}")
        if not chosen:
            st.info(tr("Click one or more words above to mask them."))
            return None
        text = _mask_words(words, chosen)
        st.markdown(tr("Masked text: `{text}`", text=text))
    top_k = st.slider(tr("Top-k candidates per mask"), 1, 10, 5, key="pred_topk")
    results = []
    for k, am in enumerate(models):  # the library decides: empty, no [MASK], [MASK] too late
        with user_action(tr("Read the text with [MASK]") if k == 0 else
                         tr("Fill in the [MASK] with {model}", model=am.label)) as act:
            if _causal(am) and getattr(am.model, "has_mlm_head", True):
                results.append(_next(am, text, top_k))  # no [MASK] to fill: the next token of the prefix
            else:
                results.append(_predict(am, text, None, top_k))
        if act.failed:
            if k == 0:
                return None
            results[-1:] = [None]
    cols = st.columns(len(models))
    for col, am, res in zip(cols, models, results):
        with col:
            _fill_mask_column(am, res, text)
    if results[0] is not None and getattr(results[0], "masks", None):
        tour.mark_done("predict", models[0])
    return text, top_k, results[0]


def _head_intro(am) -> str:
    """What the active model's sentence head reads and what its first probability means."""
    tok, model = am.tokenizer, am.model
    reads = (tr("the final vector of the last real token (a left-to-right model: under its causal mask {cls} sees "
                "only itself)", cls=tok.cls_token) if _causal(am) else tr("the {cls} vector", cls=tok.cls_token))
    if getattr(model, "sentence_task", "nsp") == "none" and not getattr(model, "has_nsp_head", True):
        return tr("{model} was pretrained with masked LM alone (sentence_task = none, RoBERTa §4.2), so it has no "
                  "sentence head to ask; a model beside it may have one.", model=am.label)
    if getattr(model, "sentence_task", "nsp") == "sop":
        return tr("This model learned **sentence-order prediction** (ALBERT §4.6): its head reads {reads} of `{pair}` "
                  "and says whether A and B are a true pair in their order (label 0) or the same pair swapped "
                  "(label 1). P(in order) is the softmax of the first logit; a random B is not what it was trained "
                  "to spot.", reads=reads, pair=tok.pair_template())
    if _causal(am):
        return tr("The NSP head reads {reads} of `{pair}` and gives two logits; P(IsNext) is the softmax of the first "
                  "one (label 0 = IsNext, as in transformers).", reads=reads, pair=tok.pair_template())
    return tr("The NSP head reads the {cls} vector of `{pair}` and gives two logits; P(IsNext) is the softmax of the "
              "first one (label 0 = IsNext, as in transformers).", cls=tok.cls_token, pair=tok.pair_template())


def no_sentence_head(am) -> str:
    """Why this model's column shows no sentence probability."""
    if getattr(am.model, "sentence_task", "nsp") == "none":
        return tr("{model} was pretrained with masked LM alone (sentence_task = none, as RoBERTa): its sentence head "
                  "never trained, so it cannot say whether B follows A. Nothing is predicted here.", model=am.label)
    return tr("{model} has no next-sentence-prediction head (it was published without it), so it cannot say whether "
              "B follows A. Nothing is predicted here.", model=am.label)


def _nsp_section(models, ex):
    st.subheader(tr("Next-sentence prediction"))
    st.markdown(_head_intro(models[0]))
    c1, c2 = st.columns(2)
    a = c1.text_area(tr("Sentence A"), value=ex.a, key="pred_nsp_a", height=70, max_chars=60_000)
    b = c2.text_area(tr("Sentence B"), value=ex.b, key="pred_nsp_b", height=70, max_chars=60_000)
    with user_action(tr("Read the sentence pair")) as act:  # the library decides whether A and B hold words
        _predict(models[0], a, b)
    if act.failed:
        return None
    cols = st.columns(len(models))
    for col, am in zip(cols, models):
        with col:
            st.markdown(f"**{am.label}**")
            if not getattr(am.model, "has_nsp_head", True):
                st.info(no_sentence_head(am))
                continue
            with user_action(tr("Predict the next sentence with {model}", model=am.label)) as act:
                p = _predict(am, a, b).p_is_next
            if act.failed:
                continue
            st.metric(sentence_head_label(am.model), f"{p:.1%}")
            st.plotly_chart(nsp_figure(p, sentence_task=getattr(am.model, "sentence_task", "nsp")),
                            key=f"pred_nsp_{am.label}")
    return a, b


def _why_targets(am, fill, pair) -> list:
    """(label, a, b, target) choices: each [MASK] of the fill-mask text, and NSP on the sentence pair."""
    out = []
    if _causal(am):  # explain reads a [MASK] or [CLS]; a left-to-right model has neither to explain
        return out
    if fill and getattr(am.model, "has_mlm_head", True):
        text, _, res = fill
        n = len(res.masks)
        out += [(f"[MASK] {i + 1}", text, None, f"mask:{i}") for i in range(min(n, MAX_MASK_CHARTS))]
    if pair and getattr(am.model, "has_nsp_head", True):
        out.append(("NSP: P(IsNext)", pair[0], pair[1], "nsp"))
    return out


@user_action(tr("Explain the prediction"))
def _why_section(active, fill, pair):


    st.subheader(tr("Why it predicts that"))
    st.markdown(tr(
        "Three answers for the active model, side by side (`bertcore.analysis.explain.explain_all`). **Attention "
        "rollout** (Abnar & Zuidema 2020): how much of each token reaches the explained position through attention "
        "alone. **Gradient × input** and **integrated gradients** (Sundararajan et al. 2017): each token's share "
        "of the log-probability, with the integral from a baseline where every word is [MASK] (positions and "
        "segments kept). Integrated gradients sum to f(input) − f(baseline); the gap says how close they get."))
    st.latex(r"\mathrm{IG}_i = (x_i - x'_i)\int_0^1 \frac{\partial f(x' + \alpha(x - x'))}{\partial x_i}\,d\alpha")
    targets = _why_targets(active, fill, pair)
    if _causal(active):
        st.info(tr("{model} reads left to right: the attributions here explain a [MASK] or the sentence head at {cls}, "
                   "which a left-to-right model does not have (it predicts the next token, and its sentence head reads "
                   "the last token). Its attention is on the Attention page.", model=active.label,
                   cls=active.tokenizer.cls_token))
        return
    if not targets:
        st.info(tr("Nothing to explain yet: type a text with [MASK] above, or two sentences for NSP. (A model without "
                   "MLM and NSP heads, such as all-MiniLM-L6-v2, can only be explained by rollout on the Attention page.)"))
        return
    _why_view(active, targets)


def _ask_why(texts) -> None:
    st.session_state["pred_why_for"] = texts


@st.fragment
@user_action(tr("Explain the prediction"))
def _why_view(active, targets):
    """The attributions for one target, computed when the learner asks (the button) or already known to the server.
    A fragment: the target, the steps and the button rerun only this view, not the predictions above. Integrated
    gradients take a batch of forward and backward passes, the most work of any Predict action, so a new text
    waits for the button instead of computing them for every sentence typed (docs/BENCH-HISTORY.md, "One torch
    thread for the pages")."""
    labels = [t[0] for t in targets]
    c1, c2 = st.columns([2, 1])
    pick = c1.segmented_control(tr("Explain"), labels, default=labels[0], key="pred_why_target", required=True)
    steps = c2.select_slider(tr("Integrated-gradients steps"), [MIN_IG_STEPS, 64, 100, 200], 64, key="pred_why_steps")
    label, a, b, target = targets[labels.index(pick) if pick in labels else 0]
    texts = (id(active.model), tuple((t[1], t[2]) for t in targets))  # what the learner asked to have explained
    if st.session_state.get("pred_why_for") != texts and not memo_has(active.model, ("why", a, b, target, steps)):
        # the press is recorded before the rerun it causes, so that rerun draws the attributions and no button
        st.button(tr("Compute the attributions"), key="pred_why_go", type="primary", on_click=_ask_why, args=(texts,),
                  help=tr("Rollout, gradient × input and integrated gradients for this text; they stay on for the "
                          "other targets and steps of the same text."))
        st.caption(tr("Press **Compute the attributions** to see why the model predicts what it does for this "
                      "text (integrated gradients take {steps} forward and backward passes).", steps=steps + 1))
        return
    with user_action(tr("Explain the prediction")) as act, st.spinner(tr("Integrating gradients…")):
        # shared by every session that asks the same of this model
        r = shared_memo(active.model, ("why", a, b, target, steps),
                        lambda: explain_all(active.model, active.tokenizer, a, b, target, steps=steps))
    if act.failed:
        return
    shown = f"'{r['target_label']}'" if target != "nsp" else "IsNext"
    fig = token_strip_figure(r["tokens"], r["scores"], r["position"],
                             title=tr("why {shown}? (the explained position {position} is outlined)",
                                      shown=shown, position=r['position']))
    st.plotly_chart(fig, key="pred_why_fig", config=plotly_config("why_" + target.replace(":", ""), "svg"))
    m = st.columns(5)
    for col, (pair_name, rho) in zip(m, r["rank_correlation"].items()):
        p, q = pair_name.split("~")
        col.metric(tr("Spearman ρ: {a} vs {b}", a=tr(METHOD_LABELS[p]), b=tr(METHOD_LABELS[q])),
                   tr("n/a") if rho != rho else f"{rho:+.2f}")
    for col, name in zip(m[3:], ("integrated_gradients", "grad_x_input")):
        res = r["results"][name]
        col.metric(tr("completeness gap, {method}", method=tr(METHOD_LABELS[name])), f"{res.completeness_gap:.3f}",
                   help=tr("|Σ attributions − (f(x) − f(x'))| / |f(x) − f(x')| with f(x) = {fx}, "
                           "f(x') = {fb} (baseline: {baseline})", fx=f"{res.f_input:.3f}",
                           fb=f"{res.f_baseline:.3f}", baseline=res.baseline))
    table = pd.DataFrame({tr("position"): range(len(r["tokens"])), tr("token"): r["tokens"],
                          **{tr(METHOD_LABELS[k]): v for k, v in r["scores"].items()}})
    with st.expander(tr("The numbers (text alternative)")):
        st.dataframe(table, hide_index=True, key="pred_why_table")
    st.download_button(tr("Attributions as CSV"), lambda: attributions_csv(r["tokens"], r["scores"]),  # on click
                       file_name=f"attributions_{target.replace(':', '')}.csv", mime="text/csv",
                       key="pred_dl_why", on_click="ignore")


def render():
    st.title(tr("Predict"))
    active = replay.at_step(state.get_active(), "pred")
    st.markdown(tr(
        "BERT is pre-trained on two tasks, and their heads can be asked directly. **Fill-mask**: the MLM "
        "head turns the final hidden state at each {mask} into a probability for every "
        "vocabulary word "
        "(`bertcore.analysis.inference.fill_mask`). **Next sentence**: the NSP head says how likely B really "
        "followed A (`bertcore.analysis.inference.nsp_probability`).", mask=active.tokenizer.mask_token))
    st.latex(formulas(active.model.config)["mlm"])  # the active model's own head, activation and tying
    if active.kind == "untrained":
        run_status.untrained_notice()
        run_status.default_train_button("pred_train_default")
    ex = _examples(active.tokenizer)
    models = _compare_choice(state, active, ex)
    fill = _fill_mask_section(state, models, ex)
    st.divider()
    pair = _nsp_section(models, ex)
    st.divider()
    _why_section(active, fill, pair)
    st.divider()
    ablation_view.render(active, fill, pair, _predict)


render()
