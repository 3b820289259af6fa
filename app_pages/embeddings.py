"""Embeddings page: a PCA of the token embedding table and of the hidden states, layer by layer."""
import numpy as np
import streamlit as st

from bertcore.analysis.inference import inspect_pair
from bertcore.data.tokenization import canonical_special
from bertcore.errors import BertcoreError
from explorer.parts import replay
from explorer.session import state
from explorer.parts import run_status
from explorer.figures.inspect import embedding_scatter_figure, pca
from explorer.figures.overview import embedding_parts
from bertcore.data.user_text import is_blank
from explorer.i18n import frozen, language, mark, tr
from explorer.session.memo import memo
from explorer.page_errors import error_text, user_action

DEFAULT_SENTENCES = (
    "The horse eats the hay near the barn.\n"
    "Those horses eat the hay near the barn.\n"
    "The cow eats the grass in the field.\n"
    "The cows eat the grass in the field.\n"
    "Ben reads a book in the library.\n"
    "He walks to the school.\n"
    "The boat sails across the bay.\n"
    "The boats sail across the bay."
)
MAX_SENTENCES = 40
SENTENCE_MAX_TOKENS = 64
SPECIAL = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
COLOR_BY = {  # keys: the options (English values), marked for the catalogue; shown through tr
    mark("word"): mark("the token itself (the same word in different sentences gets one colour)"),
    mark("sentence"): mark("which input line the token came from"),
    mark("position"): mark("the token's position in its sequence"),
    mark("special vs normal"): mark("[CLS]/[SEP]/[UNK] against ordinary tokens"),
}


def _is_useful(tok: str) -> bool:
    """A whole word worth plotting from a big vocabulary (no ##pieces, [unused], punctuation, digits)."""
    return tok.isalpha() and not tok.startswith("##") and tok.isascii()


def _vocab_subset(tok, sentence_tokens: list[str], n: int) -> tuple[list[int], list[str]]:
    """Token ids to plot: every token of the given sentences + the first ``n`` useful vocabulary tokens."""
    vocab = list(tok.vocab)
    ids = []
    seen = set()
    for t in sentence_tokens:
        i = tok.token_to_id.get(t)
        if i is not None and i not in seen:
            ids.append(i)
            seen.add(i)
    groups = [tr("in your sentences")] * len(ids)
    added = 0
    small = len(vocab) <= 5000
    for i, t in enumerate(vocab):
        if added >= n:
            break
        if i in seen:
            continue
        if canonical_special(t) in SPECIAL:
            ids.append(i)
            groups.append(tr("special"))
        elif small or _is_useful(t):
            ids.append(i)
            groups.append(tr("vocabulary"))
            added += 1
        else:
            continue
        seen.add(i)
    return ids, groups


@st.fragment  # the vocabulary slider changes this figure only: only it reruns
@user_action("Plot the token embedding table")
def _token_table(am, sentences, tokens_in_sentences):
    model, tok = am.model, am.tokenizer
    W = model.bert.embeddings.word_embeddings.weight.detach().float().numpy()
    V = W.shape[0]
    st.subheader(tr("(a) The token embedding table"))
    st.markdown(tr("Row *i* of `bert.embeddings.word_embeddings` ({v} × {d}) is the vector that token *i* starts "
                   "from, before position and segment are added. Tokens the model uses in similar ways drift close "
                   "together during training; an untrained table is random noise.", v=V, d=W.shape[1]))
    if V > 2000:
        n = st.slider(tr("Vocabulary tokens to plot (besides the tokens of your sentences)"), 100, 3000, 600, 100,
                      key="emb_vocab_n",
                      help=tr("The vocabulary has {v} tokens. Shown: the first N whole-word tokens (no ##pieces, "
                              "digits or [unused] slots) plus every token of your sentences.", v=V))
    else:
        n = V
    # the same for every session that shows this model the same sentences (the default ones, mostly)
    fig = memo(model, ("emb_table_fig", tuple(tokens_in_sentences), n, language()),
               lambda: _table_figure(tok, W, tokens_in_sentences, n))
    if fig is None:
        st.info(tr("Too few tokens to plot; type a few sentences below."))
        return
    st.plotly_chart(fig, key="emb_table_fig")


def _table_figure(tok, W, tokens_in_sentences, n):
    """The PCA figure of the table rows to plot, or None when there are fewer than 3."""
    ids, groups = _vocab_subset(tok, tokens_in_sentences, n)
    labels_all = tok.convert_ids_to_tokens(ids)
    if len(ids) < 3:
        return None
    coords, ratio = pca(W[ids], 2)
    many = len(ids) > 150
    text = [lbl if (not many or g != tr("vocabulary")) else "" for lbl, g in zip(labels_all, groups)]
    return embedding_scatter_figure(coords, text, groups, ratio, hover=labels_all,
                                    group_colors={tr("vocabulary"): "#bbbbbb", tr("special"): "#e45756",
                                                  tr("in your sentences"): "#1f77b4"},
                                    title=tr("PCA of {n} rows of the token embedding table", n=len(ids)))


def _collect_hidden(am, sentences):
    """(rows, problems, truncated, limit) for the sentences: one forward pass per sentence, once per (model,
    sentences, language) for every session of this server."""
    limit = min(int(am.model.config.max_position_embeddings), SENTENCE_MAX_TOKENS)
    return memo(am.model, ("emb_hidden", tuple(sentences), limit, language()),
                lambda: _hidden_rows(am, sentences, limit)) + (limit,)


def _hidden_rows(am, sentences, limit):
    rows = []  # (sentence index, position, token, hidden [L+1, D])
    problems, truncated = [], []
    for si, s in enumerate(sentences):
        try:
            insp = inspect_pair(am.model, am.tokenizer, s, None, max_len=limit)
        except BertcoreError as e:
            problems.append(tr("line {n}: {error}", n=si + 1, error=error_text(e)))
            continue
        if insp.truncated:
            truncated.append(si + 1)
        for p, t in enumerate(insp.tokens):
            rows.append((si, p, str(t), insp.hidden_states[:, p, :]))
    return rows, problems, truncated


@user_action("Plot the hidden states")
def _hidden_states(am, sentences):
    st.subheader(tr("(b) Hidden states, layer by layer"))
    st.markdown(tr("Each token of each line below becomes one point per layer. Layer 0 is the embedding output "
                   "({parts}); layer ℓ is the output of encoder layer ℓ. Watch how the same word in different "
                   "sentences separates as context mixes in.", parts=embedding_parts(am.model.config)))
    rows, problems, truncated, limit = _collect_hidden(am, sentences)
    for p in problems[:5]:
        st.warning(p)
    if truncated:
        st.warning(tr("Line(s) {lines} were truncated to {n} tokens.", lines=", ".join(map(str, truncated[:10])),
                      n=limit))
    if len(rows) < 3:
        st.info(tr("Type at least one sentence with a few words to plot hidden states."))
        return
    _hidden_view(am, sentences, rows, limit)


@st.fragment  # the layer, colour and [CLS]/[SEP] switches change this figure only: only it reruns
@user_action("Plot the hidden states")
def _hidden_view(am, sentences, rows, limit):
    L = rows[0][3].shape[0] - 1
    c1, c2, c3 = st.columns([2, 2, 1])
    layer = c1.slider(tr("Layer (0 = embeddings)"), 0, L, L, key=f"emb_layer_{L}")
    color_by = c2.selectbox(tr("Colour by"), list(COLOR_BY), key="emb_color", format_func=frozen(),
                            help="\n".join(f"- **{tr(k)}**: {tr(v)}" for k, v in COLOR_BY.items()))
    specials = f"{am.tokenizer.cls_token}/{am.tokenizer.sep_token}"  # as the model's vocabulary spells them
    include_special = c3.toggle(specials, value=True, key="emb_special",
                                help=tr("Special tokens often sit far from the rest and squash the plot."))
    fig = memo(am.model, ("emb_hidden_fig", tuple(sentences), limit, layer, color_by, include_special, language()),
               lambda: _hidden_figure(sentences, rows, layer, color_by, include_special))
    if fig is None:
        st.info(tr("Too few tokens left to plot; include {specials} or add sentences.", specials=specials))
        return
    st.plotly_chart(fig, key="emb_hidden_fig")


def _hidden_figure(sentences, rows, layer, color_by, include_special):
    """The PCA figure of the token vectors at ``layer``, or None when fewer than 3 are left."""
    pts = [r for r in rows if include_special or canonical_special(r[2]) not in ("[CLS]", "[SEP]")]
    if len(pts) < 3:
        return None
    X = np.stack([r[3][layer] for r in pts])
    coords, ratio = pca(X, 2)
    if color_by == "word":
        groups = [r[2] for r in pts]
    elif color_by == "sentence":
        groups = [f"{r[0] + 1}: {sentences[r[0]][:30]}" for r in pts]
    elif color_by == "position":
        groups = [tr("pos {n}", n=r[1]) for r in pts]
    else:
        groups = [tr("special") if canonical_special(r[2]) in SPECIAL else tr("normal") for r in pts]
    labels = [r[2] for r in pts]
    hover = [tr("{token} (line {line}, position {pos})", token=r[2], line=r[0] + 1, pos=r[1]) for r in pts]
    return embedding_scatter_figure(coords, labels, groups, ratio, hover=hover,
                                    title=tr("PCA of {n} token vectors at layer {layer}", n=len(pts), layer=layer))


def render():
    st.title(tr("Embeddings"))
    active = replay.at_step(state.get_active(), "emb")
    st.markdown(tr(
        "Vectors with hundreds of dimensions can be looked at through their two directions of largest "
        "variance: principal component analysis, here a plain SVD of the centred vectors. The hidden "
        "states come from `bertcore.analysis.inference.inspect_pair`; the PCA is "
        "`explorer.figures.inspect.pca` (numpy only)."))
    st.latex(r"X - \bar{X} = U \Sigma V^\top,\qquad \text{coordinates} = (X-\bar{X})\,V_{[:, :2]}")
    if active.kind == "untrained":
        run_status.untrained_notice()
        run_status.default_train_button("emb_train_default")
    text = st.text_area(tr("Sentences, one per line"), value=DEFAULT_SENTENCES, key="emb_text", height=190,
                        max_chars=60_000)
    lines = [ln.strip() for ln in (text or "").splitlines() if not is_blank(ln)]  # the library's "empty"
    if not lines:
        st.warning(tr("No sentences: type one sentence per line (for example: the cow eats the hay)."))
    if len(lines) > MAX_SENTENCES:
        st.warning(tr("{n} lines; only the first {max} are used.", n=len(lines), max=MAX_SENTENCES))
        lines = lines[:MAX_SENTENCES]
    tok = active.tokenizer
    sent_tokens = []
    with user_action("Tokenize the sentences"):
        for ln in lines:
            sent_tokens.extend(tok.tokenize(ln))
    _token_table(active, lines, sent_tokens)
    st.divider()
    if lines:
        _hidden_states(active, lines)


render()
