"""Learn · Data & tokens: pick a corpus, build a tokenizer, look at its vocabulary and at typed text."""
from __future__ import annotations

import hashlib
from collections import Counter

import pandas as pd
import streamlit as st

from bertcore.data.corpus import load_corpus_file
from bertcore.data.tokenization import basic_tokenize, has_cjk
from bertcore.errors import BertcoreError
from explorer.session import corpus_state as cs, page_caches
from explorer.figures import learn as F
from explorer.parts.tutorial_example import render_bert_pytorch_example
from bertcore.data.tokenizer_base import SPECIAL_TOKENS
from bertcore.data.user_text import MAX_TEXT_CHARS, clean_text, is_blank
from explorer.i18n import frozen, mark, ntr, tr
from explorer.session.memo import memo_shown
from explorer.page_errors import error_text, user_action

INTRO = mark("""
BERT is pre-trained on **sentence pairs**: sentence A and the sentence B that follows it. Before the model
sees them, a tokenizer cuts text into tokens from a fixed vocabulary and maps each to an id; anything not
in the vocabulary becomes `[UNK]`. A **word-level** tokenizer (`bertcore.data.tokenization.WordTokenizer.build`)
keeps whole words; **WordPiece** (`WordPieceTokenizer.train`, as in BERT) splits rare words into
`##`-prefixed pieces so that almost nothing is unknown. The **BERT-pytorch vocabulary** is the tutorial's
(`bertcore.data.bert_pytorch_vocab.BertPytorchTokenizer`, tutorials 000/003): `<pad> <unk> <eos> <sos> <mask>`
at ids 0–4, then the whitespace words, case kept, by frequency. Corpora come from `bertcore.data.corpus`
(`builtin_corpus`, `tutorial_corpus`, `load_corpus_file`).
""")

SOURCES = [mark("built-in"), mark("tutorial two-liner"), mark("upload a .txt file"), mark("built-in Chinese (中文)")]
# the keys are corpus_state.KINDS
KINDS = {"word": mark("word-level"), "wordpiece": "WordPiece", "bert_pytorch": mark("BERT-pytorch")}
MAX_SHOW_TOKENS = 200  # tokens drawn in the figure; the rest are counted, not drawn
MAX_SHOW_PIECES = 100
_HEADERS = (mark("id"), mark("token"), mark("count in corpus"), mark("auto"), mark("pairs"), mark("prose"))


def _memo(key: str, fn):
    """Shared cache for built-in/tutorial corpora, this session's cache for uploaded ones."""
    if "upload:" not in key:
        with st.spinner(tr("Building the tokenizer and counting tokens…")):
            return page_caches.corpus_result(key, fn)
    cache = st.session_state.setdefault("dt_cache", {})
    if key not in cache:
        if len(cache) > 8:
            cache.clear()
        with st.spinner(tr("Building the tokenizer and counting tokens…")):
            cache[key] = fn()
    return cache[key]


def corpus_stats(corpus, tokenizer) -> dict:
    """Tokens per pair, token counts by vocabulary entry, and word counts (basic_tokenize) of a corpus."""
    lengths, tok_counts, word_counts = [], Counter(), Counter()
    for a, b in corpus.pairs:
        ta, tb = tokenizer.tokenize(a), tokenizer.tokenize(b)
        lengths.append(len(ta) + len(tb))
        tok_counts.update(ta)
        tok_counts.update(tb)
        if tokenizer.kind != "wordpiece":
            continue
        word_counts.update(basic_tokenize(a))
        word_counts.update(basic_tokenize(b))
    if tokenizer.kind != "wordpiece":  # whole-word vocabularies: the words are the known tokens
        word_counts = Counter({w: c for w, c in tok_counts.items() if w != tokenizer.unk_token})
    return {"pairs": len(corpus.pairs), "tokens": int(sum(lengths)), "lengths": lengths,
            "token_counts": tok_counts, "word_counts": word_counts}


def _pick_corpus():
    """The corpus picker. Returns a CorpusChoice (word-level); keeps the previous corpus when an upload is bad."""
    current = cs.active()
    saved = SOURCES[2] if current.uploaded else SOURCES[1] if current.key == cs.TUTORIAL else SOURCES[0]
    saved = SOURCES[3] if current.key == cs.BUILTIN_ZH else saved
    source = st.radio(tr("Corpus"), SOURCES, index=SOURCES.index(saved), horizontal=True, key="dt_source",
                      format_func=frozen())
    if source == SOURCES[0]:
        return cs.builtin_choice()
    if source == SOURCES[3]:
        return cs.builtin_zh_choice()
    if source == SOURCES[1]:
        return cs.tutorial_choice()
    c1, c2 = st.columns([3, 1])
    mode = c2.radio(tr("file format"), [mark("auto"), mark("pairs"), mark("prose")], key="dt_mode", format_func=frozen(),
                    help=tr("pairs: one 'A<TAB>B' per line · prose: paragraphs split into sentences, "
                            "consecutive sentences form pairs · auto: pairs if most lines hold a TAB"))
    up = c1.file_uploader(tr("Upload a UTF-8 .txt corpus"), type=["txt"], key="dt_upload")
    if up is not None:
        data = up.getvalue()
        key = f"upload:{hashlib.sha1(data).hexdigest()[:16]}:{mode}"
        parsed = st.session_state.setdefault("dt_parsed", {})
        if key not in parsed:
            if len(parsed) > 8:
                parsed.clear()
            parsed[key] = _parse_upload(load_corpus_file, data, up.name, mode)
        if isinstance(parsed[key], BertcoreError):
            st.error(tr("Could not use this file: {reason}", reason=error_text(parsed[key])))
            return _previous_corpus(current)
        cs.remember_upload(cs.CorpusChoice(parsed[key], key))
        if st.session_state.get("dt_kept") != key:  # kept in the workspace once per new file or format
            err = cs.save_upload(data, up.name, mode)
            if err:
                st.warning(err)
            else:
                st.session_state["dt_kept"] = key
    elif cs.uploaded() is None:
        st.info(tr("Upload a .txt file: one `sentence A<TAB>sentence B` pair per line, or plain prose "
                   "(max size: `bertcore.data.corpus.MAX_CORPUS_BYTES`, env BERTCORE_MAX_CORPUS_BYTES)."))
        return _previous_corpus(current)
    choice = cs.uploaded()
    if up is None:
        st.caption(tr("Using the file uploaded earlier in this workspace, **{name}** (kept across "
                      "reloads; upload another file to replace it).", name=choice.corpus.name))
    return choice


def _parse_upload(load, data: bytes, name: str, mode: str):
    """The Corpus, or the CorpusError (its message is shown in the session's language, also after a switch)."""
    try:
        return load(data, name, mode=mode)
    except BertcoreError as e:
        return e


def _previous_corpus(current):
    st.caption(tr("Keeping the previous corpus **{name}**.", name=current.corpus.name))
    return current


@user_action("Search the vocabulary")
def _vocab_table(tokenizer, counts: Counter) -> None:
    st.subheader(tr("Vocabulary"))
    q = st.text_input(tr("Search the vocabulary"), key="dt_vocab_q", placeholder=tr("e.g. cat or ##s"))
    df = pd.DataFrame({"id": range(len(tokenizer.vocab)), "token": list(tokenizer.vocab),
                       "count in corpus": [counts.get(t, 0) for t in tokenizer.vocab]})
    q = "" if is_blank(q) else q.strip()
    if q:
        df = df[df["token"].str.contains(q.lower(), case=False, regex=False)]
    specials = " ".join(tokenizer.convert_ids_to_tokens(sorted(tokenizer.special_ids)))
    shown_n, total_n = f"{len(df):,}", f"{len(tokenizer.vocab):,}"
    lo, hi = min(tokenizer.special_ids), max(tokenizer.special_ids)
    st.caption(tr("{shown} of {total} tokens contain “{q}”. Ids {lo}–{hi} are the special tokens {specials}.",
                  shown=shown_n, total=total_n, q=q, lo=lo, hi=hi, specials=specials) if q else
               tr("{shown} of {total} tokens. Ids {lo}–{hi} are the special tokens {specials}.",
                  shown=shown_n, total=total_n, lo=lo, hi=hi, specials=specials))
    st.dataframe(df.rename(columns={c: tr(c) for c in ("id", "token", "count in corpus")}), hide_index=True, height=300, key="dt_vocab_df")


@user_action("Tokenize your own text")
def _try_text(tokenizer, default: str) -> None:
    st.subheader(tr("Tokenize your own text"))
    text = st.text_area(tr("Text"), value=default, key="dt_text", height=90)
    if is_blank(text):  # the library's rule: spaces and invisible characters only
        st.info(tr("Type some text above to see its tokens and ids (spaces and invisible characters such as "
                   "zero-width spaces are not text)."))
        return
    n_chars = len(text)
    with user_action("Tokenize the text") as act:
        text, cut = clean_text(text)  # invisible characters become spaces; very long text is cut (bertcore)
        tokens = tokenizer.tokenize(text)
        ids = tokenizer.convert_tokens_to_ids(tokens)
        unknown = tokenizer.unknown_words(text)
        pieces = tokenizer.word_pieces(text) if tokenizer.kind == "wordpiece" else []
    if act.failed:
        return
    if cut:
        st.warning(tr("The text has {n} characters; only the first {max} are tokenized.", n=f"{n_chars:,}",
                      max=f"{MAX_TEXT_CHARS:,}"))
    if not tokens:
        st.info(tr("No tokens: the text holds only whitespace and control characters, which the tokenizer "
                   "removes (`basic_tokenize` drops control characters and splits on whitespace)."))
        return
    unk = tokenizer.unk_token
    n_unk = sum(t == unk for t in tokens)
    c1, c2, c3 = st.columns(3)
    c1.metric(tr("tokens"), f"{len(tokens):,}")
    c2.metric(tr("{unk} tokens", unk=unk), f"{n_unk:,}")
    c3.metric(tr("characters"), f"{len(text):,}")
    if len(tokens) > MAX_SHOW_TOKENS:
        st.warning(tr("Long input: showing the first {shown} of {n} tokens. "
                      "(A model would also truncate it to its max length.)", shown=MAX_SHOW_TOKENS,
                      n=f"{len(tokens):,}"))
    shown = slice(0, MAX_SHOW_TOKENS)
    st.plotly_chart(memo_shown(tokenizer, ("dt_tokens_fig", text), lambda: F.tokens_figure(tokens[shown], ids[shown])),
                    key="dt_tokens_chart")
    roles = {tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id, tokenizer.pad_id}
    specials = sorted({t for t, i in zip(tokens, ids) if i in roles})
    if has_cjk(text):
        st.caption(tr("Chinese characters (Han) are split one character per token, as BERT's own tokenizer does: "
                      "Chinese writes no spaces between words, so each character is a word-level token."))
    if specials:
        st.caption(tr("Typed special tokens ({specials}) are kept as single tokens with their special ids.",
                      specials=", ".join(specials)))
    if unknown:
        shown_unk = [w if len(w) <= 30 else w[:30] + "…" for w in list(dict.fromkeys(unknown))[:30]]
        words = ", ".join(f"`{w}`" for w in shown_unk) + (" …" if len(set(unknown)) > 30 else "")
        st.warning(ntr("{count} word(s) are not in the vocabulary and became {unk}: {words}",
                       "{count} word(s) are not in the vocabulary and became {unk}: {words}", len(unknown),
                       count=f"{len(unknown):,}", unk=unk, words=words))
    else:
        st.success(tr("Every word is in the vocabulary (no {unk}).", unk=unk))
    if tokenizer.kind == "wordpiece":
        split = [(w, " ".join(p)) for w, p in pieces if len(p) > 1]
        if split:
            st.markdown(tr("**WordPiece splits** (word → pieces; `##` marks a piece that continues a word)"))
            st.dataframe(pd.DataFrame(split[:MAX_SHOW_PIECES], columns=[tr("word"), tr("pieces")]), hide_index=True,
                         key="dt_pieces_df")
            if len(split) > MAX_SHOW_PIECES:
                st.caption(tr("First {shown} of {n} split words.", shown=MAX_SHOW_PIECES, n=f"{len(split):,}"))
        else:
            st.caption(tr("No word was split: every word is a single WordPiece token."))


def render() -> None:
    st.title(tr("Data & tokens"))
    st.markdown(tr(INTRO))
    with user_action("Build the corpus and its tokenizer") as act:
        choice = _pick_corpus()
        corpus = choice.corpus
        st.caption(f"**{corpus.name}**: {tr(corpus.description)}")

        current = cs.active()
        c1, c2 = st.columns(2)
        kinds, labels = list(KINDS), list(KINDS.values())
        label = c1.radio(tr("Tokenizer"), labels, horizontal=True, key="dt_kind", format_func=frozen(),
                         index=kinds.index(current.kind) if current.key == choice.key else 0,
                         help=tr("BERT-pytorch vocabulary: the tutorial's WordVocab; pairs read <sos> A <eos> B "
                                 "<eos>."))
        kind = kinds[labels.index(label)]
        vocab_size = c2.slider(tr("WordPiece vocabulary size"), 50, 4000, int(current.vocab_size or 400), step=50,
                               key="dt_vocab_size", disabled=kind != "wordpiece",
                               help=tr("Target size including the {n} special tokens ({specials}) and the single "
                                       "characters.", n=len(SPECIAL_TOKENS), specials=" ".join(SPECIAL_TOKENS)))
        choice = cs.CorpusChoice(corpus, choice.key, kind, vocab_size if kind == "wordpiece" else None)
        cs.set_active(choice)  # Masking & NSP and Train use this corpus and tokenizer
        tokenizer = cs.tokenizer(choice)
        stats = _memo(f"stats|{choice.key}|{choice.kind}|{choice.vocab_size}", lambda: corpus_stats(corpus, tokenizer))

        st.subheader(tr("Corpus statistics"))
        m = st.columns(4)
        m[0].metric(tr("sentence pairs"), f"{stats['pairs']:,}")
        m[1].metric(tr("tokens"), f"{stats['tokens']:,}")
        m[2].metric(tr("vocabulary size"), f"{tokenizer.vocab_size:,}")
        m[3].metric(tr("distinct words"), f"{len(stats['word_counts']):,}")
        g1, g2 = st.columns(2)
        figs = memo_shown(tokenizer, ("dt_stats_figs", corpus.name, len(corpus.pairs)),  # one corpus per tokenizer
                          lambda: (F.length_histogram(stats["lengths"]), F.top_words_bar(stats["word_counts"], 20)))
        g1.plotly_chart(figs[0], key="dt_len_chart")
        g2.plotly_chart(figs[1], key="dt_top_chart")

        if choice.key == cs.TUTORIAL:
            render_bert_pytorch_example("dt_bert_pytorch")
    if act.failed:
        return
    _vocab_table(tokenizer, stats["token_counts"])
    a, b = corpus.pairs[0]
    _try_text(tokenizer, f"{a} {b}")


render()
